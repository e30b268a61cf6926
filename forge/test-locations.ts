/**
 * Where in the repo a failing test failed, from its JUnit testcase: the
 * `file` and `line` attributes some runners write (pytest, jest-junit with
 * addFileAttribute), else the first `path:line` of the failure's text that
 * is the repo's own (not node_modules, not a runtime's internals). Paths are
 * made relative to the workspace. Pure.
 */

/** The sandbox's checkout; reports often name files under it. */
const WORKSPACE = '/workspace/';

export interface TestLocation {
  file: string;
  line: number;
}

/** A repo-relative path, or undefined for a path outside the repo or of a dependency. */
export function repoPath(path: string): string | undefined {
  let p = path.trim().replace(/^file:\/\//, '');
  if (p.startsWith(WORKSPACE)) p = p.slice(WORKSPACE.length);
  p = p.replace(/^(\.\/)+/, '');
  if (
    !p ||
    p.startsWith('/') ||
    p.startsWith('node:') ||
    p.split('/').some((s) => s === '..' || s === 'node_modules')
  ) {
    return undefined;
  }
  return p.length <= 500 ? p : undefined;
}

/** `path:line` (and `:column`) in a stack trace or a runner's message; the first one in the repo. */
const PLACE = /([A-Za-z0-9_./@+-]{1,500}\.[A-Za-z0-9]{1,10}):(\d{1,7})(?::\d{1,7})?/g;

export function locateFailure(testcase: { file?: unknown; line?: unknown }, text: string): TestLocation | undefined {
  const file = typeof testcase.file === 'string' ? repoPath(testcase.file) : undefined;
  const line = Number(testcase.line);
  if (file && Number.isInteger(line) && line > 0) return { file, line };
  let first: TestLocation | undefined;
  for (const m of text.slice(0, 20_000).matchAll(PLACE)) {
    const found = repoPath(m[1]);
    if (!found) continue;
    const place = { file: found, line: Number(m[2]) };
    if (place.line < 1) continue;
    // The testcase's own file first, when it names one.
    if (!file || found === file) return place;
    first ??= place;
  }
  return first;
}
