/**
 * Dev container features as drydock reads and installs them
 * (sandbox/features.ts, sandbox/feature-registry.ts): the keys and options
 * of devcontainer.json, the options as the spec's environment variables,
 * the install order, the refusals (each naming the feature's field and what
 * to do), the steps of the builder's layer, and a feature's tar read as
 * files (a real tar from GNU tar).
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { featureStartResult } from '../../sandbox/activities/agent-app';
import { declaredStack } from '../../sandbox/activities/services';
import { filesOfTar, registryBase, resolveFeatures } from '../../sandbox/feature-registry';
import {
  FeatureError,
  featureEnvFile,
  featureRequests,
  featureSteps,
  installOrder,
  optionEnv,
  optionEnvName,
  parseFeatureMetadata,
  type FeatureMetadata,
  type ResolvedFeature,
} from '../../sandbox/features';
import { parseDevcontainer } from '../../sandbox/repo-image';
import { RepoTree } from '../../sandbox/repo-files';

const SOURCE = '.devcontainer/devcontainer.json';

function feature(key: string, metadata: Partial<FeatureMetadata> = {}, options = {}): ResolvedFeature {
  const [request] = featureRequests({ [key]: options }, SOURCE, '.devcontainer');
  return {
    request,
    metadata: { id: key, options: {}, containerEnv: {}, installsAfter: [], dependsOn: [], lifecycle: {}, ...metadata },
    pinned: 'sha256:x',
  };
}

describe("devcontainer.json's features", () => {
  test('an OCI reference with options, a version string, and a local folder', () => {
    const requests = featureRequests(
      {
        'ghcr.io/devcontainers/features/node:1': { version: '20', nvmInstallPath: 3 },
        'ghcr.io/devcontainers/features/python': 'latest',
        './local-tool': {},
      },
      SOURCE,
      '.devcontainer',
    );
    expect(requests[0]).toMatchObject({
      field: '.devcontainer/devcontainer.json: features["ghcr.io/devcontainers/features/node:1"]',
      options: { version: '20', nvmInstallPath: '3' },
      ref: { registry: 'ghcr.io', repository: 'devcontainers/features/node', tag: '1' },
    });
    expect(requests[1]).toMatchObject({ options: { version: 'latest' }, ref: { tag: 'latest' } });
    expect(requests[2]).toMatchObject({ folder: '.devcontainer/local-tool', options: {} });
  });

  test("an option given as a list is what the Dev Container CLI writes of it: its items joined by ','", () => {
    const [request] = featureRequests(
      { 'ghcr.io/rocker-org/devcontainer-features/apt-packages:1': { packages: ['gnupg2,vim', 'jq', 3, true] } },
      SOURCE,
      '.devcontainer',
    );
    expect(request.options).toEqual({ packages: 'gnupg2,vim,jq,3,true' });
    // A list holding anything but strings, numbers and booleans is not one the CLI writes sensibly.
    expect(() => featureRequests({ 'ghcr.io/x/y:1': { packages: [{ a: 1 }] } }, SOURCE, '.devcontainer')).toThrow(
      /features\["ghcr.io\/x\/y:1"\]\.packages: an option's value is a string or a boolean/,
    );
  });

  test("a root .devcontainer.json's local features are folders of the repo; outside it or the repo itself refused", () => {
    const [local] = featureRequests({ './features/tool': {} }, '.devcontainer.json', '.');
    expect(local).toMatchObject({ folder: 'features/tool', field: '.devcontainer.json: features["./features/tool"]' });
    expect(() => featureRequests({ '../up': {} }, '.devcontainer.json', '.')).toThrow(
      '.devcontainer.json: features["../up"]: a local feature is a folder inside ./ (the spec\'s rule)',
    );
    expect(() => featureRequests({ './': {} }, '.devcontainer.json', '.')).toThrow(
      /a local feature is a folder inside/,
    );
    expect(() => featureRequests({ './a/../../up': {} }, '.devcontainer.json', '.')).toThrow(/a folder inside \.\//);
    // Nor is the folder of a devcontainer.json itself a feature's.
    expect(() => featureRequests({ './': {} }, SOURCE, '.devcontainer')).toThrow(/a folder inside \.devcontainer\//);
  });

  test.each([
    [
      'https://example.com/feature.tgz',
      {},
      /features\["https:\/\/example.com\/feature.tgz"\]: .*name the feature by its OCI reference/,
    ],
    ['nodejs', {}, /features\["nodejs"\]: .*legacy short id.*\(ghcr.io\/devcontainers\/features\/nodejs:1 for most\)$/],
    ['../elsewhere', {}, /features\["..\/elsewhere"\]: a local feature is a folder inside .devcontainer\//],
    ['ghcr.io/x/y:1', ['a'], /features\["ghcr.io\/x\/y:1"\]: give the feature's options as an object/],
    [
      'ghcr.io/x/y:1',
      { o: { deep: 1 } },
      /features\["ghcr.io\/x\/y:1"\].o: an option's value is a string or a boolean/,
    ],
    ['ghcr.io/x/y:1:2', {}, /features\["ghcr.io\/x\/y:1:2"\]: .*not an image reference/],
    ['docker-in-docker', {}, /features\["docker-in-docker"\]: the feature asks for privileged .*: remove it/],
    [
      'ghcr.io/devcontainers/features/docker-outside-of-docker:1',
      {},
      /features\[.*docker-outside-of-docker:1"\]: the feature asks for mounts \(the host's Docker socket\)/,
    ],
    ['ghcr.io/devcontainers/features/docker-in-docker', {}, /asks for privileged/],
  ])('%s is refused, naming the field', (key, value, message) => {
    expect(() => featureRequests({ [key]: value }, SOURCE, '.devcontainer')).toThrow(message);
  });

  test('legacy short ids and capitals read as the Dev Container CLI reads them (golang is go; a reference downcased)', () => {
    const requests = featureRequests(
      { 'github-cli': 'latest', golang: {}, 'ghcr.io/NicoVIII/devcontainer-features/pnpm:1': {} },
      SOURCE,
      '.devcontainer',
    );
    expect(requests.map((r) => r.ref)).toEqual([
      { registry: 'ghcr.io', repository: 'devcontainers/features/github-cli', tag: '1' },
      { registry: 'ghcr.io', repository: 'devcontainers/features/go', tag: '1' },
      { registry: 'ghcr.io', repository: 'nicoviii/devcontainer-features/pnpm', tag: '1' },
    ]);
    expect(requests[0]).toMatchObject({ key: 'github-cli', options: { version: 'latest' } });
  });
});

test("a compose dev container's features go on its service's image, as the spec says", async () => {
  const declared = parseDevcontainer(
    JSON.stringify({
      dockerComposeFile: 'compose.yaml',
      service: 'app',
      features: { 'ghcr.io/devcontainers/features/node:1': 'lts' },
      overrideFeatureInstallOrder: ['ghcr.io/devcontainers/features/node'],
      containerUser: 'vscode',
    }),
    SOURCE,
  );
  const files: Record<string, string> = { '.devcontainer/compose.yaml': 'services:\n  app:\n    image: node:22\n' };
  const { environment } = await declaredStack((f) => Promise.resolve(files[f]), declared, undefined);
  expect(environment).toMatchObject({
    image: 'node:22',
    features: [{ key: 'ghcr.io/devcontainers/features/node:1', options: { version: 'lts' } }],
    featureOrder: ['ghcr.io/devcontainers/features/node'],
    containerUser: 'vscode',
  });
});

describe('options as environment variables', () => {
  test("the spec's names: non-word characters as _, no leading digits or _, upper case", () => {
    expect(optionEnvName('installZsh')).toBe('INSTALLZSH');
    expect(optionEnvName('node-gyp.deps')).toBe('NODE_GYP_DEPS');
    expect(optionEnvName('1st_option')).toBe('_ST_OPTION');
  });

  const options = {
    version: { type: 'string' as const, default: 'lts' },
    installTools: { type: 'boolean' as const, default: true },
    flavour: { type: 'string' as const, enum: ['a', 'b'] },
  };

  test('defaults from devcontainer-feature.json, then the values given', () => {
    expect(optionEnv(feature('ghcr.io/x/node:1', { options }))).toEqual({ VERSION: 'lts', INSTALLTOOLS: 'true' });
    expect(
      optionEnv(feature('ghcr.io/x/node:1', { options }, { version: '22', installTools: false, flavour: 'b' })),
    ).toEqual({ VERSION: '22', INSTALLTOOLS: 'false', FLAVOUR: 'b' });
  });

  test('an option the feature does not declare is refused, naming the feature and the option', () => {
    expect(() =>
      optionEnv(feature('ghcr.io/x/node:1', { id: 'node', options }, { nodeGypDependencies: true })),
    ).toThrow(
      '.devcontainer/devcontainer.json: features["ghcr.io/x/node:1"].nodeGypDependencies: the feature node has no ' +
        'option "nodeGypDependencies" (it declares: version, installTools, flavour): remove it or use one of those',
    );
  });

  test("an option named like an object's built-in property is undeclared too", () => {
    for (const name of ['constructor', 'toString', 'hasOwnProperty', '__proto__']) {
      const given = JSON.parse(`{"${name}": "x"}`) as Record<string, string>;
      expect(() => optionEnv(feature('ghcr.io/x/node:1', { id: 'node', options }, given))).toThrow(
        `the feature node has no option "${name}"`,
      );
    }
  });

  test('a value its type or enum does not allow is refused', () => {
    expect(() => optionEnv(feature('ghcr.io/x/n:1', { options }, { installTools: 'yes' }))).toThrow(
      /\.installTools: "yes" is not a boolean/,
    );
    expect(() => optionEnv(feature('ghcr.io/x/n:1', { options }, { flavour: 'c' }))).toThrow(
      /\.flavour: "c" is not one of the values the feature allows \(a, b\)/,
    );
  });
});

describe('install order', () => {
  const keys = (fs: ResolvedFeature[]) => fs.map((f) => f.request.key);

  test('as written, a feature after what it dependsOn and installsAfter, overrideFeatureInstallOrder first', () => {
    const a = feature('ghcr.io/f/a:1', { installsAfter: ['ghcr.io/f/c'] });
    const b = feature('ghcr.io/f/b:1');
    const c = feature('ghcr.io/f/c:2', { dependsOn: ['ghcr.io/f/b:1'] });
    const d = feature('ghcr.io/f/d:1', { installsAfter: ['ghcr.io/f/not-listed'] });
    expect(keys(installOrder([a, b, c, d]))).toEqual([
      'ghcr.io/f/b:1',
      'ghcr.io/f/c:2',
      'ghcr.io/f/a:1',
      'ghcr.io/f/d:1',
    ]);
    expect(keys(installOrder([a, b, c, d], ['ghcr.io/f/d']))).toEqual([
      'ghcr.io/f/d:1',
      'ghcr.io/f/b:1',
      'ghcr.io/f/c:2',
      'ghcr.io/f/a:1',
    ]);
  });

  test('a dependsOn the dev container does not list is refused, saying what to add', () => {
    const c = feature('ghcr.io/f/c:1', { dependsOn: ['ghcr.io/devcontainers/features/common-utils:2'] });
    expect(() => installOrder([c])).toThrow(
      '.devcontainer/devcontainer.json: features["ghcr.io/f/c:1"]: the feature depends on ' +
        'ghcr.io/devcontainers/features/common-utils:2 (dependsOn), which the dev container does not list: add ' +
        '"ghcr.io/devcontainers/features/common-utils:2": {} to features',
    );
  });

  test('features that wait for each other are refused, naming them', () => {
    const a = feature('ghcr.io/f/a:1', { installsAfter: ['ghcr.io/f/b'] });
    const b = feature('ghcr.io/f/b:1', { installsAfter: ['ghcr.io/f/a'] });
    expect(() => installOrder([a, b], [], SOURCE)).toThrow(
      /features ghcr.io\/f\/a:1, ghcr.io\/f\/b:1 wait for each other/,
    );
  });
});

describe("a feature's devcontainer-feature.json", () => {
  const field = 'features["ghcr.io/x/y:1"]';
  test('read for its options, containerEnv and order', () => {
    const text = JSON.stringify({
      id: 'y',
      version: '1.2.0',
      options: { version: { type: 'string', default: 'lts', proposals: ['lts'] } },
      containerEnv: { PATH: '/opt/y/bin:${PATH}' },
      installsAfter: ['ghcr.io/x/z'],
      customizations: { vscode: {} },
    });
    expect(parseFeatureMetadata(text, field)).toEqual({
      id: 'y',
      version: '1.2.0',
      options: { version: { type: 'string', default: 'lts', proposals: ['lts'] } },
      containerEnv: { PATH: '/opt/y/bin:${PATH}' },
      installsAfter: ['ghcr.io/x/z'],
      dependsOn: [],
      lifecycle: {},
    });
  });

  test('its lifecycle commands are read as setup (postAttachCommand, for an editor, is not run)', () => {
    const json = {
      id: 'y',
      postCreateCommand: 'y init',
      onCreateCommand: ['y', "it's"],
      updateContentCommand: { a: 'y a', b: ['y', 'b'] },
      postAttachCommand: 'y hello',
    };
    expect(parseFeatureMetadata(JSON.stringify(json), field).lifecycle).toEqual({
      onCreateCommand: `'y' 'it'\\''s'`,
      updateContentCommand: "(y a) && 'y' 'b'",
      postCreateCommand: 'y init',
    });
  });

  test("its postStartCommand is read as shell, for each start of a sandbox (not setup's)", () => {
    const json = { id: 'y', postCreateCommand: 'y init', postStartCommand: ['y', 'serve', '--port=1'] };
    const read = parseFeatureMetadata(JSON.stringify(json), field);
    expect(read.postStart).toBe(`'y' 'serve' '--port=1'`);
    expect(read.lifecycle).toEqual({ postCreateCommand: 'y init' });
    expect(parseFeatureMetadata(JSON.stringify({ id: 'y' }), field).postStart).toBeUndefined();
  });

  test.each([
    [{ id: 'dind', privileged: true }, /asks for privileged .* a sandbox is never privileged/],
    [{ id: 'y', mounts: [{ source: 'v', target: '/v', type: 'volume' }] }, /asks for mounts/],
    [{ id: 'y', postStartCommand: 'x'.repeat(20_000) }, /its postStartCommand .* is 20000 bytes; .* at most 16 KiB/],
    [{ id: 'y', postCreateCommand: 42 }, /devcontainer-feature.json: postCreateCommand/],
    [{ id: 'y', onCreateCommand: 'x'.repeat(20_000) }, /its onCreateCommand .* is 20000 bytes; .* at most 16 KiB/],
    [{ id: 'y', options: { o: { type: 'number' } } }, /devcontainer-feature.json: options.o.type/],
  ])('what a sandbox cannot honour is refused, naming the feature: %j', (json, message) => {
    expect(() => parseFeatureMetadata(JSON.stringify(json), field)).toThrow(message);
    expect(() => parseFeatureMetadata(JSON.stringify(json), field)).toThrow(FeatureError);
  });

  test('none at all is refused', () => {
    expect(() => parseFeatureMetadata(undefined, field)).toThrow(
      `${field}: the feature has no devcontainer-feature.json`,
    );
  });
});

describe("a sandbox start's result of the features' postStartCommands", () => {
  const starts = [
    { feature: 'ghcr.io/f/a:1', command: 'a start' },
    { feature: './b', command: 'b start' },
  ];
  test('all ran: ok', () => {
    expect(featureStartResult(starts, '2 1 0\n', 300_000)).toEqual({ ok: true });
  });
  test('one that failed is named, with the end of its output as plain text', () => {
    const printed = `1 1 3\n\x1b[31mno such thing\x1b[0m\n${'x'.repeat(5_000)}`;
    const result = featureStartResult(starts, printed, 300_000);
    expect(result).toMatchObject({ ok: false, feature: 'ghcr.io/f/a:1', why: 'exited with status 3' });
    expect(result.ok === false && result.output).toMatch(/^…x{2000}$/);
    expect(featureStartResult(starts, '2 1 127\nsh: b: not found\n', 300_000)).toEqual({
      ok: false,
      feature: './b',
      why: 'exited with status 127',
      output: 'sh: b: not found',
    });
  });
  test('one that did not end in time is named, and told how a daemon goes', () => {
    expect(featureStartResult(starts, '2 0 -\nlistening\n', 300_000)).toMatchObject({
      ok: false,
      feature: './b',
      why: expect.stringMatching(/^did not end within 300 s \(a daemon it starts goes in the background/),
      output: 'listening',
    });
  });
});

describe("the builder's steps", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'features-'));
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  test('each feature copied, its containerEnv set, install.sh run as root with its environment file', () => {
    const a = feature('ghcr.io/f/a:1', { containerEnv: { A_HOME: '/opt/a', PATH: '/opt/a/bin:${PATH}' } });
    const b = feature('./b');
    expect(featureSteps([a, b])).toEqual([
      'USER root',
      'COPY features/0/ /tmp/drydock-features/0/',
      'ENV A_HOME="/opt/a"',
      'ENV PATH="/opt/a/bin:${PATH}"',
      'RUN ["/bin/sh","-c","cd /tmp/drydock-features/0 && set -a && . ./devcontainer-features.env && set +a && chmod +x ./install.sh && ./install.sh"]',
      'COPY features/1/ /tmp/drydock-features/1/',
      'RUN ["/bin/sh","-c","cd /tmp/drydock-features/1 && set -a && . ./devcontainer-features.env && set +a && chmod +x ./install.sh && ./install.sh"]',
      'RUN ["/bin/sh","-c","rm -rf /tmp/drydock-features"]',
    ]);
    expect(featureSteps([])).toEqual([]);
  });

  test('the environment file gives install.sh its options and the users, homes read from /etc/passwd', async () => {
    const options = { greeting: { type: 'string' as const, default: 'hi' } };
    const f = feature('ghcr.io/f/a:1', { options }, { greeting: "it's $(not run)" });
    await writeFile(path.join(dir, 'env'), featureEnvFile(f, { remoteUser: 'root', containerUser: 'root' }));
    const out = execFileSync('sh', [
      '-c',
      `set -a; . ${dir}/env; set +a; sh -c 'echo "$GREETING|$_REMOTE_USER|$_REMOTE_USER_HOME|$_CONTAINER_USER_HOME"'`,
    ]).toString();
    expect(out.trim()).toBe("it's $(not run)|root|/root|/root");
  });

  test('with no remoteUser, install.sh is told the user of the sandbox uid 1000 (else root)', async () => {
    await writeFile(path.join(dir, 'env'), featureEnvFile(feature('ghcr.io/f/a:1'), { containerUser: 'root' }));
    const out = execFileSync('sh', ['-c', `set -a; . ${dir}/env; set +a; echo "$_REMOTE_USER|$_REMOTE_USER_HOME"`]);
    // This machine's user of uid 1000, as the image's would be read.
    const own = execFileSync('sh', ['-c', 'awk -F: \'$3 == 1000 { print $1 "|" $6 }\' /etc/passwd | head -n 1']);
    expect(out.toString().trim()).toBe(own.toString().trim() || 'root|/root');
  });
});

describe("a feature's tar", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'feature-tar-'));
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  const tarOf = (folder: string, format = 'posix') =>
    execFileSync('tar', ['-c', `--format=${format}`, '-f', '-', '-C', folder, '.']);

  test('files and folders, executable bits and long names kept', async () => {
    const long = `${'deep-'.repeat(30)}name.sh`;
    await mkdir(path.join(dir, 'f', 'lib'), { recursive: true });
    await writeFile(path.join(dir, 'f', 'install.sh'), '#!/bin/sh\necho hi\n', { mode: 0o755 });
    await writeFile(path.join(dir, 'f', 'lib', long), 'x');
    for (const format of ['posix', 'gnu']) {
      const tree = filesOfTar(tarOf(path.join(dir, 'f'), format), 'f');
      expect(tree.entries['install.sh']).toEqual({
        kind: 'file',
        mode: 0o755,
        data: Buffer.from('#!/bin/sh\necho hi\n'),
      });
      const lib = tree.entries.lib;
      expect(lib.kind === 'folder' && lib.entries[long]).toEqual({ kind: 'file', mode: 0o644, data: Buffer.from('x') });
    }
  });

  test('a link is refused, naming the entry', async () => {
    await mkdir(path.join(dir, 'f'));
    await symlink('/etc/passwd', path.join(dir, 'f', 'passwd'));
    expect(() => filesOfTar(tarOf(path.join(dir, 'f')), 'features["x"]')).toThrow(
      'features["x"]: the feature\'s entry "./passwd" is a link or a special file, which drydock does not copy',
    );
  });

  test('an entry that climbs out of the feature is refused', async () => {
    await mkdir(path.join(dir, 'f'));
    await writeFile(path.join(dir, 'escape'), 'x');
    const tar = execFileSync('tar', ['-c', '-P', '-f', '-', '-C', path.join(dir, 'f'), '../escape'], { stdio: 'pipe' });
    expect(() => filesOfTar(tar, 'features["x"]')).toThrow(/entry "..\/escape" is outside its folder/);
  });
});

test('a loopback registry is plain HTTP, any other HTTPS', () => {
  expect(registryBase('127.0.0.1:5000')).toBe('http://127.0.0.1:5000/v2/');
  expect(registryBase('localhost:5000')).toBe('http://localhost:5000/v2/');
  expect(registryBase('ghcr.io')).toBe('https://ghcr.io/v2/');
  expect(registryBase('127.0.0.1.example.com')).toBe('https://127.0.0.1.example.com/v2/');
});

describe('a registry that sends something else than asked for (a hostile one, on loopback)', () => {
  let server: Server;
  let host: string;
  let root: string;
  let answer: (url: string) => { status: number; body: Buffer; headers?: Record<string, string> };
  beforeAll(async () => {
    server = createServer((req, res) => {
      const { status, body, headers } = answer(req.url ?? '');
      res.writeHead(status, headers ?? {}).end(body);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise((resolve) => server.close(resolve)));
  beforeEach(async () => {
    root = await mkdtemp(path.join(tmpdir(), 'features-root-'));
  });
  afterEach(() => rm(root, { recursive: true, force: true }));

  let filesTar: Buffer;
  beforeAll(async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'feature-a-'));
    await writeFile(path.join(dir, 'devcontainer-feature.json'), '{"id": "a"}');
    await writeFile(path.join(dir, 'install.sh'), '#!/bin/sh\n', { mode: 0o755 });
    filesTar = execFileSync('tar', ['-c', '-f', '-', '-C', dir, '.']);
    await rm(dir, { recursive: true, force: true });
  });
  const digestOf = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;
  const manifestFor = (layer: Buffer, size = layer.length) =>
    Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        layers: [{ mediaType: 'application/vnd.devcontainers.layer.v1+tar', digest: digestOf(layer), size }],
      }),
    );
  const pull = (ref: string) =>
    resolveFeatures(
      featureRequests({ [ref]: {} }, 'd.json', '.devcontainer'),
      { root, repo: 'r', pull: { allowed: [host] } },
      new RepoTree('/nonexistent', 'HEAD'),
    );

  test('a manifest that is not the digest the reference pins is refused', async () => {
    const manifest = manifestFor(Buffer.from('x'));
    answer = () => ({ status: 200, body: manifest });
    const pinned = `sha256:${'0'.repeat(64)}`;
    await expect(pull(`${host}/f/a@${pinned}`)).rejects.toThrow(
      `d.json: features["${host}/f/a@${pinned}"]: the registry sent content of ${digestOf(manifest)}, not the ${pinned} asked for`,
    );
  });

  test('a layer whose content is not its digest is refused, and nothing is kept', async () => {
    const manifest = manifestFor(Buffer.from('the real layer'));
    answer = (url) => ({ status: 200, body: url.includes('/manifests/') ? manifest : Buffer.from('another layer') });
    await expect(pull(`${host}/f/a:1`)).rejects.toThrow(
      /the registry sent content of sha256:\w+, not the sha256:\w+ asked for/,
    );
    await expect(
      resolveFeatures(
        featureRequests({ [`${host}/f/a:1`]: {} }, 'd.json', '.devcontainer'),
        { root, repo: 'r' },
        new RepoTree('/nonexistent', 'HEAD'),
      ),
    ).rejects.toThrow(/was not pulled on this worker's host/);
  });

  test('a layer larger than the bound is refused before it is read', async () => {
    const manifest = manifestFor(Buffer.from('x'), 65 * 1024 ** 2);
    answer = () => ({ status: 200, body: manifest });
    await expect(pull(`${host}/f/a:1`)).rejects.toThrow(/the feature's layer is 68157440 bytes, more than 67108864/);
  });

  test("an image (not a feature's one tar layer) is refused", async () => {
    const manifest = Buffer.from(
      JSON.stringify({ layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip' }] }),
    );
    answer = () => ({ status: 200, body: manifest });
    await expect(pull(`${host}/f/a:1`)).rejects.toThrow(
      `${host}/f/a:1 is not a dev container feature (one layer of application/vnd.devcontainers.layer.v1+tar)`,
    );
  });

  test("a redirect to an address (the worker's own network) is not followed", async () => {
    answer = () => ({ status: 307, body: Buffer.from(''), headers: { location: 'http://127.9.0.1:1/blob' } });
    await expect(pull(`${host}/f/a:1`)).rejects.toThrow(
      /the registry redirected to http:\/\/127.9.0.1:1, which drydock does not follow/,
    );
  });

  test('a redirect within the registry is followed', async () => {
    const layer = filesTar;
    const manifest = manifestFor(layer);
    answer = (url) =>
      url.includes('/manifests/')
        ? { status: 200, body: manifest }
        : url.startsWith('/storage/')
          ? { status: 200, body: layer }
          : { status: 307, body: Buffer.from(''), headers: { location: `/storage${url}` } };
    const [got] = await pull(`${host}/f/a:1`);
    expect(got.feature.metadata.id).toBe('a');
  });

  test("a token service off the registry's domain is refused, and no request goes to it", async () => {
    answer = () => ({
      status: 401,
      body: Buffer.from(''),
      headers: { 'www-authenticate': 'Bearer realm="http://127.9.0.1:1/token",service="x"' },
    });
    await expect(pull(`${host}/f/a:1`)).rejects.toThrow(
      /the registry's token service 127.9.0.1:1 is not on its own domain/,
    );
  });
});
