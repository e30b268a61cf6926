// The few functions of `semver` (installed, untyped here) that lib/toolchains.ts uses.
declare module 'semver' {
  interface SemVer {
    major: number;
  }
  const semver: {
    validRange(range: string): string | null;
    minVersion(range: string): SemVer | null;
    satisfies(version: string, range: string): boolean;
    maxSatisfying(versions: string[], range: string): string | null;
    major(version: string): number;
  };
  export default semver;
}
