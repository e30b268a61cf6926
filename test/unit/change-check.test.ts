/**
 * The change's check before review and push (repos/change-check.ts), against
 * real git in a temp folder: the files' sizes from their headers, and the
 * secret scan reading blobs through the process helper in batches (a change
 * of 8 MiB and more takes several), each secret named with its file's path.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { changedFiles, secretsInChange } from '../../repos/change-check';
import { processObservers } from '../../platform/processes';
import { Redactor } from '../../platform/scrub';

const dir = mkdtempSync(path.join(tmpdir(), 'drydock-change-check-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const git = (...args: string[]) =>
  execFileSync('git', args, { cwd: dir, maxBuffer: 64 << 20 })
    .toString()
    .trim();
const MiB = 1024 * 1024;
const SECRET = 'sk-live-0123456789abcdef0123456789abcdef';

function commit(files: Record<string, string | Buffer>): string {
  for (const [name, content] of Object.entries(files)) writeFileSync(path.join(dir, name), content);
  git('add', '-A');
  git('commit', '--quiet', '-m', 'change');
  return git('rev-parse', 'HEAD');
}

beforeAll(() => {
  execFileSync('git', ['init', '--quiet', '--initial-branch=main', dir]);
  git('config', 'user.name', 't');
  git('config', 'user.email', 't@t');
  commit({ 'README.md': 'first\n' });
});

test('a change of three batches: every secret found under its own path, no fork of the worker for the blobs', async () => {
  const parent = git('rev-parse', 'HEAD');
  // 6 + 6 MiB do not fit one batch of 8; the secret sits at the end of the second big file (binary),
  // base64-encoded in a small one after it, and nowhere in the 9 MiB file that must go alone.
  const big = (fill: number, tail = '') => Buffer.concat([Buffer.alloc(6 * MiB, fill), Buffer.from(tail)]);
  const head = commit({
    'a.bin': big(1),
    'b.bin': big(2, SECRET),
    'c.txt': `key: ${Buffer.from(SECRET).toString('base64')}\n`,
    'd.bin': Buffer.alloc(9 * MiB, 3),
  });
  const files = await changedFiles(dir, parent, head);
  expect(files.map((f) => [f.path, f.size])).toEqual([
    ['a.bin', 6 * MiB],
    ['b.bin', 6 * MiB + SECRET.length],
    ['c.txt', expect.any(Number)],
    ['d.bin', 9 * MiB],
  ]);
  const commands: string[] = [];
  const observe = (file: string, args: string[]) => void commands.push([file, ...args].join(' '));
  processObservers.push(observe);
  try {
    const redactor = new Redactor([SECRET]);
    const found = await secretsInChange(dir, files, 'a message', (c) => redactor.holds(c));
    expect(found.map((f) => f.where)).toEqual(['b.bin', 'c.txt']);
  } finally {
    processObservers.splice(processObservers.indexOf(observe), 1);
  }
  // a.bin alone; b.bin and c.txt; d.bin alone: three reads, each through the helper.
  expect(commands).toEqual(Array(3).fill('git cat-file --batch'));
});

test('a blob the mirror does not have fails the scan, naming it', async () => {
  const missing = { path: 'gone.txt', blob: 'f'.repeat(40), size: 4 };
  await expect(secretsInChange(dir, [missing], 'm', () => [])).rejects.toThrow(`object ${'f'.repeat(40)} is missing`);
});
