/**
 * The machine's cache of built tools (infra/lib.sh: tool_to_cache, tool_from_cache): a
 * tool one checkout built is taken by the next as hard links, only at the same stamp.
 */
import { execFileSync } from 'node:child_process';
import {
  mkdirSync,
  mkdtempSync,
  rmSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const LIB = path.join(__dirname, '../../infra/lib.sh');
const root = mkdtempSync(path.join(tmpdir(), 'drydock-tool-cache-'));
const cache = path.join(root, 'cache');
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** Runs the helpers in bash; true when the last command succeeded. */
function sh(script: string, env: Record<string, string> = { DRYDOCK_TOOL_CACHE: cache }): boolean {
  try {
    execFileSync('bash', ['-c', `source "${LIB}"; ${script}`], { env: { ...process.env, ...env }, stdio: 'pipe' });
    return true;
  } catch {
    return false;
  }
}

/** A checkout's built tool: a binary, a stamp and a link to the binary. */
function builtTool(dir: string, word: string): string {
  const tool = path.join(root, dir, '.tools', 'tool');
  mkdirSync(tool, { recursive: true });
  writeFileSync(path.join(tool, 'bin'), word, { mode: 0o755 });
  symlinkSync('bin', path.join(tool, 'alias'));
  return tool;
}

test("a second checkout takes the first one's build as hard links, at its stamp only", () => {
  const first = builtTool('one', 'built once');
  const second = path.join(root, 'two', '.tools', 'tool');
  expect(sh(`tool_from_cache ${second} tool stamp-1`)).toBe(false);
  expect(sh(`tool_to_cache ${first} tool stamp-1`)).toBe(true);

  expect(sh(`tool_from_cache ${second} tool stamp-1`)).toBe(true);
  expect(readFileSync(path.join(second, 'bin'), 'utf8')).toBe('built once');
  expect(statSync(path.join(second, 'bin')).ino).toBe(statSync(path.join(first, 'bin')).ino);
  expect(statSync(path.join(second, 'bin')).mode & 0o777).toBe(0o755);
  expect(readlinkSync(path.join(second, 'alias'))).toBe('bin');
  // Another stamp (a new version, another Go) is not in the cache: it is built.
  expect(sh(`tool_from_cache ${path.join(root, 'three', '.tools', 'tool')} tool stamp-2`)).toBe(false);
});

test('a stamp is kept once: a later build at the same stamp does not replace it', () => {
  const first = builtTool('four', 'first');
  const later = builtTool('five', 'later');
  expect(sh(`tool_to_cache ${first} kept stamp && tool_to_cache ${later} kept stamp`)).toBe(true);
  const taken = path.join(root, 'six', '.tools', 'tool');
  expect(sh(`tool_from_cache ${taken} kept stamp`)).toBe(true);
  expect(readFileSync(path.join(taken, 'bin'), 'utf8')).toBe('first');
  expect(readdirSync(cache).filter((e) => e.startsWith('kept-'))).toHaveLength(1);
});

test('DRYDOCK_TOOL_CACHE set empty turns the cache off', () => {
  const off = { DRYDOCK_TOOL_CACHE: '', HOME: path.join(root, 'home') };
  expect(sh(`tool_to_cache ${builtTool('seven', 'x')} off stamp`, off)).toBe(true);
  expect(sh(`tool_from_cache ${path.join(root, 'eight', '.tools', 'tool')} off stamp`, off)).toBe(false);
  expect(() => readdirSync(path.join(root, 'home'))).toThrow();
});
