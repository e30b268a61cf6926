/**
 * The isolated builder's cache of base archives (sandbox/builder.ts): an
 * image's `docker save` archive is kept by its id and reused, and only the
 * most recently used BASE_ARCHIVES_KEPT stay. (The save itself is run by
 * test/e2e/builder.test.ts.)
 */
import { mkdir, mkdtemp, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BASE_ARCHIVES_KEPT, baseArchive, pruneArchives } from '../../sandbox/builder';

let cache: string;
beforeEach(async () => {
  cache = await mkdtemp(path.join(tmpdir(), 'builder-cache-'));
  await mkdir(path.join(cache, 'bases'));
});
afterEach(() => rm(cache, { recursive: true, force: true }));

const hex = (n: number) => n.toString(16).padStart(64, '0');

test('an archive kept for an image id is reused as it is, and marked as just used', async () => {
  const kept = path.join(cache, 'bases', `${hex(1)}.tar`);
  await writeFile(kept, 'saved before');
  const long = new Date(Date.now() - 3600_000);
  await utimes(kept, long, long);
  expect(await baseArchive(cache, `sha256:${hex(1)}`)).toBe(kept);
  expect((await stat(kept)).mtimeMs).toBeGreaterThan(long.getTime() + 1000);
});

test('the least recently used archives beyond the kept number go, never one being saved', async () => {
  const dir = path.join(cache, 'bases');
  const total = BASE_ARCHIVES_KEPT + 3;
  for (let i = 0; i < total; i++) {
    const file = path.join(dir, `${hex(i)}.tar`);
    await writeFile(file, 'x');
    const at = new Date(Date.now() - (total - i) * 60_000); // i = 0 is the oldest
    await utimes(file, at, at);
  }
  await writeFile(path.join(dir, `${hex(99)}.tar.123.456.partial`), 'being saved');
  await pruneArchives(dir, path.join(dir, `${hex(total - 1)}.tar`));
  const left = await readdir(dir);
  expect(left).toContain(`${hex(99)}.tar.123.456.partial`);
  for (let i = 0; i < 3; i++) expect(left).not.toContain(`${hex(i)}.tar`);
  for (let i = 3; i < total; i++) expect(left).toContain(`${hex(i)}.tar`);
});
