/**
 * bench/environments-corpus.ts: drydock's own readers on a repo folder as
 * published (accepted, or refused with reasons that name their field), and the
 * reasons normalised so the same rule counts once.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { measure, namesField, reasonOf } from '../../bench/environments-corpus';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'corpus-'));
});
afterEach(() => rm(dir, { recursive: true, force: true }));

async function repo(files: Record<string, string>): Promise<string> {
  const folder = await mkdtemp(path.join(dir, 'owner__name-'));
  for (const [file, text] of Object.entries(files)) {
    await mkdir(path.dirname(path.join(folder, file)), { recursive: true });
    await writeFile(path.join(folder, file), text);
  }
  return folder;
}

test('a dev container naming an image is accepted, with the image taken as present', async () => {
  const folder = await repo({ '.devcontainer/devcontainer.json': '{ "image": "node:22" } // as published' });
  expect(await measure(folder)).toEqual([expect.objectContaining({ kind: 'devcontainer', problems: [] })]);
});

test("a dev container's registry features are read like its images; a tarball feature is refused, naming its field", async () => {
  const accepted = await repo({
    '.devcontainer/devcontainer.json': '{ "image": "node:22", "features": { "ghcr.io/x/y:1": {} } }',
  });
  expect(await measure(accepted)).toEqual([expect.objectContaining({ problems: [] })]);
  const features = await repo({
    '.devcontainer/devcontainer.json': '{ "image": "node:22", "features": { "https://x.example/f.tgz": {} } }',
  });
  const run = await repo({
    '.devcontainer/devcontainer.json': '{ "build": { "dockerfile": "Dockerfile" } }',
    '.devcontainer/Dockerfile': 'FROM node:22 AS build\nRUN apt-get update\nFROM build\nCOPY --from=build /x /x\n',
  });
  const [[f], [r]] = await Promise.all([measure(features), measure(run)]);
  expect(f.problems.map(reasonOf)).toEqual([
    expect.stringMatching(/^features\["…"\]: drydock installs features from an OCI registry/),
  ]);
  expect(r.problems).toEqual([]);
  expect(f.problems.every(namesField)).toBe(true);
});

test("a Dockerfile whose FROM the worker cannot read is refused naming its line, as the builder's path refuses it", async () => {
  const folder = await repo({
    '.devcontainer/devcontainer.json': '{ "build": { "dockerfile": "Dockerfile" } }',
    '.devcontainer/Dockerfile': 'ARG VERSION\nFROM node:${VERSION}\nRUN true\n',
  });
  const [d] = await measure(folder);
  expect(d.problems).toEqual([expect.stringMatching(/Dockerfile, line 2: .*the ARG VERSION has no value/)]);
  expect(d.problems.map(reasonOf)).toEqual([expect.stringMatching(/^Dockerfile /)]);
  expect(d.problems.every(namesField)).toBe(true);
});

test('a root compose file no dev container names is read as one naming it would have it read', async () => {
  const folder = await repo({
    'docker-compose.yml':
      'services:\n  app:\n    image: node:22\n  db:\n    image: postgres:17\n    ports: ["5433:5432"]\n' +
      '  replica:\n    image: postgres:17\n    ports: ["5434:5432"]\n',
  });
  const [c] = await measure(folder);
  expect(c).toMatchObject({ kind: 'compose', file: 'docker-compose.yml' });
  // Published ports are accepted (each service is at its container port); two on one port clash.
  expect(c.problems.map(reasonOf)).toEqual([
    expect.stringMatching(/^services\.\*\.ports: replica listens on port N as db does/),
  ]);
  expect(c.problems.every(namesField)).toBe(true);
});

test("what is accepted but read differently in a sandbox is kept as the file's notes (remoteUser root, an unset ${localEnv})", async () => {
  const folder = await repo({
    '.devcontainer/devcontainer.json': '{ "image": "x", "remoteUser": "root", "remoteEnv": { "K": "${localEnv:K}" } }',
  });
  const [d] = await measure(folder);
  expect(d.problems).toEqual([]);
  expect(d.notes?.map(reasonOf)).toEqual([
    expect.stringMatching(/^remoteUser: root is not given/),
    expect.stringMatching(/^remoteEnv\.K: \$\{…\} is empty/),
  ]);
});

test('a file that is not valid JSON names its position, not a field', async () => {
  const folder = await repo({ '.devcontainer/devcontainer.json': '{ "image": ' });
  const [d] = await measure(folder);
  expect(d.problems).toEqual([expect.stringMatching(/not valid JSON with comments/)]);
  expect(namesField(d.problems[0])).toBe(false);
});
