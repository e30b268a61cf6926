/** The builder's result is loaded only when it names this build's tag alone (sandbox/build-archive.ts, review M3). */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { archiveNamesProblem, readArchiveNames } from '../../sandbox/build-archive';

const TAG = 'drydock-env-acme-app:0123456789ab';

/** A real tar of the given files, as buildah's docker-archive or a hostile one lays them out. */
function archive(files: Record<string, string>): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'drydock-archive-'));
  for (const [name, text] of Object.entries(files)) writeFileSync(path.join(dir, name), text);
  const file = path.join(dir, 'image.tar');
  execFileSync('tar', ['-cf', file, '-C', dir, ...Object.keys(files)]);
  return file;
}

const manifest = (...tags: string[]) => JSON.stringify([{ Config: 'c.json', RepoTags: tags, Layers: ['l.tar'] }]);

test("buildah's archive of the build's tag (its localhost/ spelling, a repositories file) is loaded", async () => {
  const file = archive({
    'manifest.json': manifest(`localhost/${TAG}`),
    repositories: JSON.stringify({ 'localhost/drydock-env-acme-app': { '0123456789ab': 'abc' } }),
    'c.json': '{}',
  });
  expect(archiveNamesProblem(await readArchiveNames(file), TAG)).toBeUndefined();
});

test('an archive naming another image anywhere Docker reads names is refused, naming it', async () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ 'manifest.json': manifest(TAG, 'postgres:16') }, /postgres:16.*manifest\.json/],
    [
      { 'manifest.json': manifest(TAG), repositories: JSON.stringify({ 'drydock/base': { latest: 'x' } }) },
      /drydock\/base:latest \(repositories\)/,
    ],
    [
      {
        'manifest.json': manifest(TAG),
        'index.json': JSON.stringify({ manifests: [{ annotations: { 'io.containerd.image.name': 'redis:8' } }] }),
      },
      /redis:8 \(index\.json\)/,
    ],
  ];
  for (const [files, message] of cases) {
    expect(archiveNamesProblem(await readArchiveNames(archive(files)), TAG)).toMatch(message);
  }
});

test('an archive of two images, or with no manifest, is refused', async () => {
  const two = JSON.stringify([
    { Config: 'a.json', RepoTags: [TAG], Layers: [] },
    { Config: 'b.json', RepoTags: [], Layers: [] },
  ]);
  expect(archiveNamesProblem(await readArchiveNames(archive({ 'manifest.json': two })), TAG)).toMatch(/exactly one/);
  expect(archiveNamesProblem(await readArchiveNames(archive({ 'c.json': '{}' })), TAG)).toMatch(/exactly one/);
});
