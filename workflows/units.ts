/**
 * A session input's durations ("90s", "10m", "24h", "2d" or ms) and sizes
 * ("512m", "2g" or bytes) as numbers, and its limits as the sandbox takes
 * them. Apart from the input's schemas (input.ts): workflow code uses these,
 * and a workflow evaluates every module it imports each time it starts (zod
 * and the schemas cost a new session 15–40 ms, bench/RESULTS.md).
 */
const MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** Milliseconds of a well-formed duration (the input's schema checked it). */
export function durationMs(d: number | string): number {
  if (typeof d === 'number') return d;
  const [, n, unit] = /^(\d+)(ms|s|m|h|d)$/.exec(d)!;
  return Number(n) * MS[unit as keyof typeof MS];
}

/** Bytes of a well-formed size (the input's schema checked it). */
export function sizeBytes(s: number | string): number {
  if (typeof s === 'number') return s;
  const [, n, unit] = /^(\d+)([kmg])$/i.exec(s)!;
  return Number(n) * 1024 ** ({ k: 1, m: 2, g: 3 } as const)[unit.toLowerCase() as 'k' | 'm' | 'g'];
}

/** The size limits of a session's input (`limits`, input.ts) that the sandbox takes. */
export interface SandboxLimitsInput {
  cpus: number;
  memory: number | string;
  pids: number;
  tmp: number | string;
  disk: number | string;
}

/** A session's limits as the sandbox takes them: numbers and bytes. */
export function sandboxLimitsOf(limits: SandboxLimitsInput) {
  return {
    cpus: limits.cpus,
    memoryBytes: sizeBytes(limits.memory),
    pids: limits.pids,
    tmpBytes: sizeBytes(limits.tmp),
    diskBytes: sizeBytes(limits.disk),
  };
}
