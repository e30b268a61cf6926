/** The builder's result is loaded only when it names this build's tag alone (sandbox/build-archive.ts, review M3). */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { archiveLayersProblem, archiveNamesProblem, readArchiveNames } from '../../sandbox/build-archive';

const TAG = 'drydock-env-acme-app:0123456789ab';

/** A real tar of the given files, as buildah's docker-archive or a hostile one lays them out. */
function archive(files: Record<string, string | Buffer>): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'drydock-archive-'));
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    writeFileSync(path.join(dir, name), text);
  }
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

const sha256 = (bytes: string | Buffer) => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
const blob = (digest: string) => `blobs/sha256/${digest.slice('sha256:'.length)}`;

/** A real layer: the tar of one file, as buildah writes a new layer (uncompressed). */
function layerTar(text: string): Buffer {
  const dir = mkdtempSync(path.join(tmpdir(), 'drydock-layer-'));
  writeFileSync(path.join(dir, 'hello.txt'), text);
  execFileSync('tar', ['-cf', path.join(dir, 'layer.tar'), '-C', dir, 'hello.txt']);
  return readFileSync(path.join(dir, 'layer.tar'));
}

/** The base as the engine holds it: two layers the archive carries as empty files. */
const BASE = { ref: 'node:22', layers: [sha256('base layer 0'), sha256('base layer 1')] };

/**
 * An archive laid out as drydock-build's export_image writes it: manifest.json first, then
 * blobs/sha256/: the config, an empty file for each of `empty`, the bytes of each of `stored`.
 */
function builtArchive(diffIds: string[], empty: string[], stored: Buffer[], files?: string[]): string {
  const config = JSON.stringify({ architecture: 'amd64', rootfs: { type: 'layers', diff_ids: diffIds } });
  const members: Record<string, string | Buffer> = {
    'manifest.json': JSON.stringify([
      { Config: blob(sha256(config)), RepoTags: [TAG], Layers: files ?? diffIds.map(blob) },
    ]),
    [blob(sha256(config))]: config,
  };
  for (const d of empty) members[blob(d)] = '';
  for (const bytes of stored) members[blob(sha256(bytes))] = bytes;
  return archive(members);
}

test("an archive of its base's layers as empty files and its own layers whole is loaded", async () => {
  const own = [layerTar('one'), layerTar('two')];
  const file = builtArchive([...BASE.layers, ...own.map(sha256)], BASE.layers, own);
  const other = { ref: 'debian:12', layers: [sha256('debian')] };
  expect(await archiveLayersProblem(file, [other, BASE])).toBeUndefined();
  // FROM scratch: no base, every layer in the archive.
  expect(await archiveLayersProblem(builtArchive(own.map(sha256), [], own), [])).toBeUndefined();
});

test("an archive claiming a layer beyond its base's without carrying it (another image's) is refused, naming it", async () => {
  const foreign = sha256(layerTar('another repository’s files'));
  const file = builtArchive([...BASE.layers, foreign], [...BASE.layers, foreign], []);
  expect(await archiveLayersProblem(file, [BASE])).toBe(
    `its layer 2 (${foreign}) is not in it (${blob(foreign)}: it holds 0 bytes of ${sha256('')}), and it is not of a base image`,
  );
  // Not even a file for it.
  const missing = builtArchive([...BASE.layers, foreign], BASE.layers, []);
  expect(await archiveLayersProblem(missing, [BASE])).toMatch(/its layer 2 \(sha256:[0-9a-f]{64}\) .*holds no file/);
});

test("an archive whose first layers are not its base's as the engine holds them is refused, naming where they part", async () => {
  const own = layerTar('one');
  const stranger = sha256('another image’s layer 1');
  const file = builtArchive([BASE.layers[0], stranger, sha256(own)], [BASE.layers[0], stranger], [own]);
  expect(await archiveLayersProblem(file, [BASE])).toBe(
    `its layer 0 (${BASE.layers[0]}) is not in it (${blob(BASE.layers[0])}: it holds 0 bytes of ${sha256('')}), ` +
      `and it is not of a base image: node:22's layer 1 is ${BASE.layers[1]}`,
  );
  // Given no base at all, its base's layers are not taken from the engine either.
  const whole = builtArchive([...BASE.layers, sha256(own)], BASE.layers, [own]);
  expect(await archiveLayersProblem(whole, [])).toMatch(/^its layer 0 /);
});

test('an archive whose layer bytes do not hash to their diff id is refused', async () => {
  const own = layerTar('one');
  const claimed = sha256(layerTar('something else'));
  // Other bytes filed under the claimed digest's name: the bytes are hashed, not the name read.
  const renamed = builtArchiveWith([...BASE.layers, claimed], BASE.layers, { [blob(claimed)]: own });
  expect(await archiveLayersProblem(renamed, [BASE])).toMatch(/its layer 2 .* it holds \d+ bytes of sha256:/);
  const lying = builtArchiveWith([...BASE.layers, claimed], BASE.layers, { 'own.tar': own });
  expect(await archiveLayersProblem(lying, [BASE])).toBe(
    `its layer 2 (${claimed}) is not in it (own.tar: it holds ${own.length} bytes of ${sha256(own)}), and it is not of a base image`,
  );
  // Gzipped, as buildah's push writes a layer: the tar inside must hash to its diff id.
  const gzip = (bytes: Buffer) => execFileSync('gzip', ['-c'], { input: bytes });
  const gzipped = builtArchiveWith([...BASE.layers, sha256(own)], BASE.layers, { 'own.tar.gz': gzip(own) });
  expect(await archiveLayersProblem(gzipped, [BASE])).toBeUndefined();
  const other = builtArchiveWith([...BASE.layers, claimed], BASE.layers, { 'own.tar.gz': gzip(own) });
  expect(await archiveLayersProblem(other, [BASE])).toBe(
    `its layer 2 (${claimed}) is not in it (own.tar.gz: it holds ${gzip(own).length} bytes of ${sha256(gzip(own))}, ` +
      `gzip of ${sha256(own)}), and it is not of a base image`,
  );
  // Not gzip after its first two bytes: refused, not taken for an empty layer.
  const broken = Buffer.concat([gzip(own).subarray(0, 10), Buffer.alloc(100)]);
  const cut = builtArchiveWith([...BASE.layers, sha256(own)], BASE.layers, { 'own.tar.gz': broken });
  expect(await archiveLayersProblem(cut, [BASE])).toMatch(/its layer 2 .*it holds 110 bytes of sha256:[0-9a-f]{64}\)/);
});

/** As builtArchive, the new layers filed under the names given. */
function builtArchiveWith(diffIds: string[], empty: string[], stored: Record<string, Buffer>): string {
  const config = JSON.stringify({ rootfs: { type: 'layers', diff_ids: diffIds } });
  const files = [...empty.map(blob), ...Object.keys(stored)];
  return archive({
    'manifest.json': JSON.stringify([{ Config: 'config.json', RepoTags: [TAG], Layers: files }]),
    'config.json': config,
    ...Object.fromEntries(empty.map((d) => [blob(d), ''])),
    ...stored,
  });
}

test('an archive naming a file twice, or whose config and manifest disagree, is refused', async () => {
  const own = layerTar('one');
  const dir = path.dirname(builtArchive([...BASE.layers, sha256(own)], BASE.layers, [own]));
  // The same member appended again: docker load would take the last, with other bytes.
  writeFileSync(path.join(dir, 'manifest.json'), JSON.stringify([{ Config: 'c.json', RepoTags: [TAG], Layers: [] }]));
  execFileSync('tar', ['-rf', path.join(dir, 'image.tar'), '-C', dir, 'manifest.json']);
  expect(await archiveLayersProblem(path.join(dir, 'image.tar'), [BASE])).toBe('it holds manifest.json twice');
  const short = builtArchive([...BASE.layers, sha256(own)], BASE.layers, [own], BASE.layers.map(blob));
  expect(await archiveLayersProblem(short, [BASE])).toBe('its config names 3 layers and its manifest.json 2');
});
