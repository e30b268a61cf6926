/** A repo's environment (sandbox/repo-image.ts, sandbox/toolchains.ts): dev container parsing and Node.js declarations. */
import {
  dockerfileEnvironment,
  expandedEnv,
  hostLayer,
  onBuildProblem,
  parseDevcontainer,
} from '../../sandbox/repo-image';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  HELPER_NODE_VERSION,
  nodeRequestOf,
  nodeVersionProblem,
  pickNodeVersion,
  Toolchains,
} from '../../sandbox/toolchains';
import { buildSettings, refuseUnsupported, setupsOf, type EnvironmentDeps } from '../../sandbox/activities/environment';
import type { SandboxProvider } from '../../sandbox/provider';

const FILE = '.devcontainer/devcontainer.json';

describe('parseDevcontainer', () => {
  test('reads a build with comments, trailing commas, args, env, user and the lifecycle commands in order', () => {
    const env = parseDevcontainer(
      `{
        // the app's dev container
        "build": { "dockerfile": "Dockerfile", "context": "..", "args": { "BASE": "x" }, },
        "containerEnv": { "APP_MODE": "test" },
        "remoteUser": "vscode",
        "postCreateCommand": "make setup",
        "onCreateCommand": ["npm", "ci", "it's"],
        "updateContentCommand": { "a": "echo a", "b": ["echo", "b"] },
      }`,
      FILE,
    );
    expect(env).toEqual({
      source: FILE,
      dockerfile: '.devcontainer/Dockerfile',
      context: '',
      args: { BASE: 'x' },
      containerEnv: { APP_MODE: 'test' },
      remoteUser: 'vscode',
      lifecycle: {
        onCreateCommand: `'npm' 'ci' 'it'\\''s'`,
        updateContentCommand: "(echo a) && 'echo' 'b'",
        postCreateCommand: 'make setup',
      },
    });
    expect(setupsOf(env, [])).toEqual({ setup: `'npm' 'ci' 'it'\\''s' && (echo a) && 'echo' 'b' && make setup` });
  });

  test("features' lifecycle commands go before the dev container's own, hook by hook, as the Dev Container CLI runs them", () => {
    const env = parseDevcontainer(
      '{"image": "x", "onCreateCommand": "own-create", "postCreateCommand": "own-post"}',
      FILE,
    );
    // In install order: a's postCreateCommand, then b's onCreateCommand and postCreateCommand.
    const features = [{ postCreateCommand: 'a-post' }, { onCreateCommand: 'b-create', postCreateCommand: 'b-post' }];
    expect(setupsOf(env, features)).toEqual({
      setup: 'b-create && own-create && a-post && b-post && own-post',
      featureSetup: 'b-create && a-post && b-post',
    });
    // No commands of its own: the features' alone, to go before a setup from elsewhere (withFeatureSetup).
    expect(setupsOf(parseDevcontainer('{"image": "x"}', FILE), features)).toEqual({
      featureSetup: 'b-create && a-post && b-post',
    });
    expect(setupsOf(undefined, [])).toEqual({});
  });

  test('an image alone', () => {
    expect(parseDevcontainer('{"image": "debian:trixie-slim"}', FILE)).toEqual({
      source: FILE,
      image: 'debian:trixie-slim',
      args: {},
      containerEnv: {},
    });
  });

  test.each([
    [
      // A short id the Dev Container CLI has no legacy name for (node, golang… it maps: features.test.ts).
      '{"image": "x", "features": {"my-tool": {}}}',
      /features\["my-tool"\]: drydock installs features from an OCI registry .* name the feature by its OCI reference/,
    ],
    ['{}', /give image, build.dockerfile or dockerComposeFile/],
    // It was interpolated into drydock's own RUN line as root: a user name or uid, nothing else.
    ['{"image": "x", "remoteUser": "x\\"; touch /pwned; echo \\""}', /remoteUser: a user name or uid/],
    ['{"image": "x", "remoteUser": "$(id)"}', /remoteUser: a user name or uid/],
    [
      '{"build": {"dockerfile": "../../Dockerfile"}}',
      /build.dockerfile "..\/..\/Dockerfile" is outside the repository/,
    ],
    ['{"image": 3}', /devcontainer.json: image: /],
    ['{"image": "x",, }', /not valid JSON with comments/],
  ])('refuses %s, naming the file and field', (text, message) => {
    expect(() => parseDevcontainer(text, FILE)).toThrow(message);
  });

  test('a plain Dockerfile builds from its folder', () => {
    expect(dockerfileEnvironment('docker/Dockerfile')).toMatchObject({
      dockerfile: 'docker/Dockerfile',
      context: 'docker',
    });
    expect(dockerfileEnvironment('Dockerfile')).toMatchObject({ context: '' });
  });
});

describe('Node.js declarations', () => {
  test('.nvmrc first, then .node-version, then engines.node', () => {
    expect(nodeRequestOf({ nvmrc: 'v22.12.0\n', nodeVersion: '20', packageJson: '{}' })).toEqual({
      range: '22.12.0',
      source: '.nvmrc',
    });
    expect(nodeRequestOf({ nodeVersion: '# pinned\n20\n' })).toEqual({ range: '20', source: '.node-version' });
    expect(nodeRequestOf({ packageJson: '{"engines": {"node": ">=22.12"}}' })).toEqual({
      range: '>=22.12',
      source: 'package.json engines.node',
    });
    expect(nodeRequestOf({ packageJson: '{"name": "x"}' })).toBeUndefined();
    expect(() => nodeRequestOf({ nvmrc: 'lts/*' })).toThrow(/\.nvmrc: "lts\/\*" is not a Node.js version/);
  });

  test('the newest release of the lowest fitting major', () => {
    const versions = ['20.19.0', '22.11.0', '22.12.0', '22.23.5', '24.1.0'];
    expect(pickNodeVersion('>=22.12', versions)).toBe('22.23.5');
    expect(pickNodeVersion('22', versions)).toBe('22.23.5');
    expect(pickNodeVersion('^20 || ^24', versions)).toBe('20.19.0');
    expect(pickNodeVersion('>=30', versions)).toBeUndefined();
  });

  test("a declaration gets the same Node.js on every host: the helpers' own when it fits, whatever else the host holds", async () => {
    const root = await mkdtemp(path.join(tmpdir(), 'drydock-toolchains-'));
    const build = (v: string) => path.join(root, `node-${v}-corepack-0.36.0`);
    try {
      // This host fetched 18 for another repo before: a loose range must not take it here and 22 elsewhere.
      for (const v of ['18.20.4', HELPER_NODE_VERSION]) await mkdir(build(v));
      // The registry is asked only for what the host has not (here it cannot be).
      const chains = new Toolchains(root);
      Object.assign(chains, { versions: () => Promise.reject(new Error('registry asked')) });
      expect(await chains.node({ range: '>=6', source: 'package.json engines.node' })).toBe(build(HELPER_NODE_VERSION));
      expect(await chains.node({ range: '^18', source: '.nvmrc' })).toBe(build('18.20.4'));
      await expect(chains.node({ range: '^20', source: '.nvmrc' })).rejects.toThrow('registry asked');
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  test('a setup that failed on the engine says so plainly', () => {
    const npm9 = `npm ERR! code EBADENGINE
npm ERR! engine Unsupported engine
npm ERR! notsup Required: {"node":">=22.12"}
npm ERR! notsup Actual:   {"npm":"9.2.0","node":"v20.19.2"}`;
    const npmWarn = `npm warn EBADENGINE Unsupported engine {
npm warn EBADENGINE   package: 'x@1.0.0',
npm warn EBADENGINE   required: { node: '>=22.12' },
npm warn EBADENGINE   current: { node: 'v20.19.2', npm: '9.2.0' }`;
    const pnpm = ' ERR_PNPM_UNSUPPORTED_ENGINE  Unsupported environment\nExpected version: >=22.12\nGot: v20.19.2';
    const plain = 'the repo asks for Node.js >=22.12; the sandbox has 20.19; declare it in .nvmrc or a dev container';
    for (const output of [npm9, npmWarn, pnpm]) expect(nodeVersionProblem(output)).toBe(plain);
    expect(nodeVersionProblem('npm ERR! 404 Not Found')).toBeUndefined();
  });
});

test("an image with ONBUILD triggers is no repo's base: named, with what to do (T4-M2)", () => {
  expect(onBuildProblem('debian:trixie-slim', {})).toBeUndefined();
  expect(onBuildProblem('debian:trixie-slim', { onBuild: [] })).toBeUndefined();
  expect(onBuildProblem('app-base:1', { onBuild: ['ADD http://169.254.169.254/ /x', 'RUN id'] })).toBe(
    'image app-base:1 has 2 ONBUILD trigger(s) (the first: "ADD http://169.254.169.254/ /x"), which any build on it ' +
      "runs before the repo's own steps: use an image without ONBUILD, or put what the triggers do in setup",
  );
});

describe("drydock's layer over a named image, made with no build on the host (hostLayer)", () => {
  test("containerEnv is expanded as ENV lines expand it: the image's variables, then the earlier ones", () => {
    const image = ['PATH=/usr/local/bin:/usr/bin', 'LANG=C.UTF-8', 'EMPTY='];
    expect(
      expandedEnv(
        {
          PATH: '/opt/tool/bin:$PATH',
          TOOL: '${PATH}/tool',
          LOCALE: '${LANG:-en}.${MISSING:-x}.${EMPTY:-y}.${LANG:+set}${EMPTY:+never}',
          UNKNOWN: 'a$NOPE-b',
          PLAIN: 'cost $5, 100%',
        },
        image,
      ),
    ).toEqual([
      'PATH=/opt/tool/bin:/usr/local/bin:/usr/bin',
      'TOOL=/opt/tool/bin:/usr/local/bin:/usr/bin/tool',
      'LOCALE=C.UTF-8.x.y.set',
      'UNKNOWN=a-b',
      'PLAIN=cost $5, 100%',
    ]);
  });

  test("the sandbox user owns /workspace and its home, runs as uid 1000 there, and HOME is drydock's", () => {
    const env = { ...parseDevcontainer('{ "image": "x", "containerEnv": { "HOME": "/root", "A": "1" } }', FILE) };
    expect(hostLayer(env, ['PATH=/bin'])).toEqual({
      folders: ['/workspace', '/home/drydock'],
      owner: 1000,
      env: ['HOME=/home/drydock', 'A=1'],
      user: '1000:1000',
      workdir: '/workspace',
      cmd: ['sleep', 'infinity'],
    });
  });
});

test("the worker's DRYDOCK_BUILD_TIMEOUT is every build's time limit (its environment's, its services')", () => {
  const deps = { log: console, egressRoot: '/x/egress' } as unknown as EnvironmentDeps;
  expect(buildSettings({ ...deps, buildTimeoutMs: 1_200_000 }, 'https://h/r.git', []).limits).toEqual({
    timeoutMs: 1_200_000,
  });
  expect(buildSettings(deps, 'https://h/r.git', []).limits).toBeUndefined(); // BUILD_LIMITS' 8 minutes
});

test('on Kubernetes a declared environment is refused before anything is built, saying what the operator can do', () => {
  const kubernetes = {
    name: 'kubernetes',
    capabilities: { buildsImages: false, services: true, lateCompanions: false },
  } as unknown as SandboxProvider;
  const stack = { services: [] };
  const devcontainer = parseDevcontainer('{"build": {"dockerfile": "Dockerfile"}}', FILE);
  expect(() => refuseUnsupported(kubernetes, devcontainer, stack)).toThrow(
    `the repo declares its environment (${FILE}), and the kubernetes sandbox provider builds no images and runs ` +
      'none but DRYDOCK_BASE_IMAGE (no dev container, Dockerfile, feature or --environment image:<ref>): give the ' +
      "worker a registry its nodes pull from (DRYDOCK_K8S_BUILD_REGISTRY), where its Docker engine's isolated " +
      "builder pushes the repo's environment, or run the repo on that image with 'drydock repo add <url> " +
      "--environment base' (what its environment would install goes in DRYDOCK_BASE_IMAGE, or in setup), or on a " +
      'worker with DRYDOCK_SANDBOX_PROVIDER=docker, whose isolated builder builds it',
  );
  // A compose dev container: its services too need the dev container ignored, and declared in the repo file.
  const compose = parseDevcontainer('{"dockerComposeFile": "compose.yaml", "service": "app"}', FILE);
  expect(() => refuseUnsupported(kubernetes, compose, stack)).toThrow(
    /--environment base' .*; its compose services with it: add --ignore-devcontainer, and declare them under services: in .drydock\/config.yaml, or on a worker/,
  );
  // No environment declared (the base image, or --environment base): nothing to refuse.
  expect(() => refuseUnsupported(kubernetes, undefined, stack)).not.toThrow();
  // With a build engine and registry (DRYDOCK_K8S_BUILD_REGISTRY) a Dockerfile is built; a compose dev container,
  // a service's build: and nothing else stay refused, each naming what to do.
  const withBuilds = {
    ...kubernetes,
    services: {},
    environmentBuilds: { engine: {}, publish: async () => '' },
  } as unknown as SandboxProvider;
  expect(() => refuseUnsupported(withBuilds, devcontainer, stack)).not.toThrow();
  expect(() => refuseUnsupported(withBuilds, compose, stack)).toThrow(
    /builds no compose dev container: .*--environment dockerfile' or in .drydock\/config.yaml; its compose services with it: add --ignore-devcontainer/,
  );
  const built = { services: [{ name: 'api', source: 'compose.yaml: services.api', build: {} }] };
  expect(() => refuseUnsupported(withBuilds, undefined, built as never)).toThrow(
    'the repo declares a service built from the repository (compose.yaml: services.api.build), and the kubernetes ' +
      'sandbox provider builds no service images: name an image instead (pinned by digest, from an allowed registry)',
  );
});
