/**
 * The isolated builder's content key (sandbox/builder.ts, buildKey): what a
 * build's result is made of, so that the same content under another tag is
 * tagged, not built again, and any change that could change the image is a
 * new key. (The reuse itself, with a real engine: test/e2e/builder.test.ts.)
 */
import { chmod, mkdtemp, rm, symlink, utimes, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createLogger } from '../../platform/log';
import { buildKey, reuseResult, type IsolatedBuild } from '../../sandbox/builder';

let dir: string;
let context: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'builder-key-'));
  context = path.join(dir, 'context');
  await mkdir(path.join(context, 'sub'), { recursive: true });
  await writeFile(path.join(context, 'a.txt'), 'a\n');
  await writeFile(path.join(context, 'sub', 'run.sh'), 'echo run\n');
});
afterEach(() => rm(dir, { recursive: true, force: true }));

const build = (over: Partial<IsolatedBuild> = {}): IsolatedBuild => ({
  builderImage: 'drydock-builder:abc',
  tag: 'drydock-env-x:1',
  labels: { 'drydock.image': 'environment' },
  repo: { dockerfile: 'FROM debian\nCOPY . /src\n', context, args: { A: '1' } },
  bases: [{ ref: 'debian', id: `sha256:${'1'.repeat(64)}` }],
  egress: [{ host: 'deb.debian.org' }],
  owner: 'one',
  log: createLogger('silent'),
  ...over,
});

test('the same content under another tag, owner or file times is the same key', async () => {
  const key = await buildKey(build());
  const later = new Date(Date.now() - 86_400_000);
  await utimes(path.join(context, 'a.txt'), later, later);
  expect(await buildKey(build({ tag: 'drydock-env-y:2', owner: 'two' }))).toBe(key);
  expect(key).toMatch(/^[0-9a-f]{64}$/);
});

test('a change of what the image is made of is another key', async () => {
  const key = await buildKey(build());
  const keys = [
    await buildKey(build({ builderImage: 'drydock-builder:def' })),
    await buildKey(build({ labels: { 'drydock.image': 'repo' } })),
    await buildKey(build({ repo: { dockerfile: 'FROM debian\nCOPY . /srv\n', context, args: { A: '1' } } })),
    await buildKey(build({ repo: { dockerfile: 'FROM debian\nCOPY . /src\n', context, args: { A: '2' } } })),
    await buildKey(
      build({ repo: { dockerfile: 'FROM debian\nCOPY . /src\n', context, args: { A: '1' }, target: 't' } }),
    ),
    await buildKey(build({ layer: 'FROM drydock-stage-repo\n' })),
    await buildKey(build({ bases: [{ ref: 'debian', id: `sha256:${'2'.repeat(64)}` }] })),
    await buildKey(build({ egress: [{ host: 'deb.debian.org' }, { host: 'example.com' }] })),
  ];
  await writeFile(path.join(context, 'a.txt'), 'b\n');
  keys.push(await buildKey(build()));
  await chmod(path.join(context, 'sub', 'run.sh'), 0o755);
  keys.push(await buildKey(build()));
  await symlink('a.txt', path.join(context, 'link'));
  keys.push(await buildKey(build()));
  await rm(path.join(context, 'link'));
  await symlink('sub/run.sh', path.join(context, 'link'));
  keys.push(await buildKey(build()));
  // A file's bytes cannot pass for its name: a.txt holding "b\n" and a file named so differ.
  await writeFile(path.join(context, 'sub', 'empty'), '');
  keys.push(await buildKey(build()));
  expect(new Set([key, ...keys]).size).toBe(keys.length + 1);
});

test('no record, or one that names no image id, is no reuse', async () => {
  expect(await reuseResult(dir, 'f'.repeat(64), 'drydock-env-x:1')).toBe(false);
  await mkdir(path.join(dir, 'results'));
  await writeFile(path.join(dir, 'results', 'e'.repeat(64)), 'debian:latest\n');
  expect(await reuseResult(dir, 'e'.repeat(64), 'drydock-env-x:1')).toBe(false);
});
