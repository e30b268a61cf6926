/**
 * The repo's environment as the sandbox: a declared Node.js from the npm
 * registry, pnpm through corepack and the egress proxy, a dev container whose
 * Dockerfile is built FROM a local image in the isolated builder (RUN as root
 * there, never on the host; docs/builder.md), the browser check of an image
 * with neither Node.js nor Chromium, an image without git, remoteUser root not
 * given and ${localEnv:…} never the worker's. Real
 * Docker, real registry (through the proxy, with this machine's CA).
 */
import { createHash } from 'node:crypto';
import { execFile } from 'node:child_process';
import { createServer } from 'node:http';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { SnapshotBuildResult } from '../../sandbox/contract';
import { DockerProvider } from '../../sandbox/docker/provider';
import { addRepo } from '../../cli/snapshots';
import { ENVIRONMENT_FROM_LABEL } from '../../sandbox/repo-image';
import { repoSlug, deleteSnapshotSchedules, SNAPSHOT_LABELS } from '../../sandbox/snapshots';
import { status, type SessionStatus } from '../../workflows/api';
import {
  containersOf,
  docker,
  makeFixtureRepo,
  newSessionId,
  runCli,
  runReaper,
  startSession,
  startStack,
  type FixtureRepo,
  type TestStack,
} from '../support/helpers';

/** An image with git, Python and pytest, and neither Node.js nor Chromium; built once per host. */
const NO_NODE_DOCKERFILE = `FROM debian:trixie-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      ca-certificates git python3 python3-pytest && rm -rf /var/lib/apt/lists/*
`;
const NO_NODE = `drydock-test-nonode:${createHash('sha256').update(NO_NODE_DOCKERFILE).digest('hex').slice(0, 12)}`;

let stack: TestStack;
const repos: FixtureRepo[] = [];

async function ensureNoNodeImage(): Promise<void> {
  if (
    await docker
      .getImage(NO_NODE)
      .inspect()
      .then(
        () => true,
        () => false,
      )
  )
    return;
  // The test's own trusted image, so it may use the host network (apt); repo builds never do.
  await new Promise<void>((resolve, reject) => {
    const child = execFile('docker', ['build', '--network', 'host', '-t', NO_NODE, '-'], (err) =>
      err ? reject(err) : resolve(),
    );
    child.stdin!.end(NO_NODE_DOCKERFILE);
  });
}

beforeAll(async () => {
  [stack] = await Promise.all([
    startStack({ DRYDOCK_APPROVAL_REQUIRED: [], DRYDOCK_EXTRA_CA_CERTS: '/etc/ssl/certs/ca-certificates.crt' }),
    ensureNoNodeImage(),
  ]);
}, 600_000);

afterAll(async () => {
  const slugs = repos.map((r) => repoSlug(r.url));
  for (const image of await docker.listImages()) {
    const ours = (image.RepoTags ?? []).some((t) => slugs.some((s) => t.includes(s)));
    if (ours)
      await docker
        .getImage(image.Id)
        .remove({ force: true })
        .catch(() => undefined);
  }
  for (const r of repos) await deleteSnapshotSchedules(stack.client, r.url, [stack.config.DRYDOCK_HOST_ID]);
  await stack?.stop();
});

async function fixture(files: Record<string, string>): Promise<FixtureRepo> {
  const repo = await makeFixtureRepo(files);
  repos.push(repo);
  return repo;
}

/** Registers the repo (setup from `setup`, else the repo's own) and builds its snapshot. */
async function buildSnapshot(repo: FixtureRepo, setup?: string, keep?: string): Promise<SnapshotBuildResult> {
  await addRepo(stack.client, stack.config, repo.url, {
    every: '1h',
    ...(setup ? { setup } : {}),
    ...(keep ? { keep } : {}),
    allow: ['registry.npmjs.org'],
  });
  return stack.client.workflow.execute('refreshSnapshot', {
    workflowId: newSessionId('env-snap'),
    taskQueue: stack.config.DRYDOCK_TASK_QUEUE,
    args: [{ repo: repo.url }],
  });
}

async function session(name: string, repo: FixtureRepo, run: string, extra: Record<string, unknown> = {}) {
  const id = newSessionId(name);
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: name,
    agent: { steps: [{ run }] },
    ...extra,
  });
  await handle.result().catch(() => undefined);
  expect(await containersOf(id)).toHaveLength(0);
  const final: SessionStatus = await handle.query(status);
  return { final, output: final.timeline.find((t) => t.name.startsWith('step 1'))?.outputTail ?? '' };
}

test('a repo that declares Node.js 22 (.nvmrc) runs on Node.js 22 from the npm registry, mounted first on PATH', async () => {
  const repo = await fixture({ '.nvmrc': '22\n' });
  const { final, output } = await session('node22', repo, 'node --version && command -v node');
  expect(final.phase).toBe('completed');
  expect(output).toMatch(/^v22\.\d+\.\d+$/m);
  expect(output).toContain('/opt/drydock-node/bin/node');
}, 300_000);

test('a packageManager: pnpm repo installs with pnpm (corepack through the proxy); sessions use it offline', async () => {
  const repo = await fixture({
    '.gitignore': 'node_modules/\n',
    'package.json': JSON.stringify({
      name: 'pnpm-fixture',
      private: true,
      packageManager: 'pnpm@9.15.0',
      dependencies: { 'is-number': '7.0.0' },
    }),
  });
  const built = await buildSnapshot(repo, 'pnpm install --no-frozen-lockfile');
  expect(built).toMatchObject({ status: 'ready' });
  const log = await readFile(path.join(stack.config.DRYDOCK_DATA_DIR, 'artifacts', built.buildId, 'setup.log'), 'utf8');
  expect(log).toMatch(/is-number 7\.0\.0/);
  const { final, output } = await session(
    'pnpm',
    repo,
    `pnpm --version && node -e "console.log('is-number', require('is-number')(5))" && ls node_modules/.pnpm`,
  );
  expect(final.phase).toBe('completed');
  expect(output).toMatch(/^9\.15\.0$/m);
  expect(output).toContain('is-number true');
  expect(output).toContain('is-number@7.0.0');
}, 300_000);

test('a dev container built FROM a local image, with its env and postCreateCommand, runs its pytest suite', async () => {
  const repo = await fixture({
    '.gitignore': '.setup-version\n.pytest_cache/\n__pycache__/\n',
    '.devcontainer/devcontainer.json': `{
      // built from the repo root, FROM an image given as an argument
      "build": { "dockerfile": "Dockerfile", "context": "..", "args": { "BASE": "${NO_NODE}" } },
      "containerEnv": { "APP_MODE": "pytest" },
      "postCreateCommand": "python3 -c 'import pytest; print(pytest.__version__)' > .setup-version",
    }`,
    '.devcontainer/Dockerfile': 'ARG BASE\nFROM ${BASE}\nCOPY requirements.txt /opt/app-requirements.txt\n',
    'requirements.txt': 'pytest\n',
    'test_app.py': `import os

def test_mode():
    assert os.environ["APP_MODE"] == "pytest"

def test_requirements_in_image():
    assert open("/opt/app-requirements.txt").read() == "pytest\\n"
`,
  });
  const built = await buildSnapshot(repo);
  expect(built).toMatchObject({ status: 'ready' });
  const { final, output } = await session(
    'pytest',
    repo,
    'cat .setup-version && python3 -m pytest -q -p no:cacheprovider',
  );
  expect(final.phase).toBe('completed');
  expect(output).toMatch(/^\d+\.\d+\.\d+$/m);
  expect(output).toMatch(/2 passed/);
}, 600_000);

test('an image without Node.js or Chromium passes the browser check through the browser container', async () => {
  const repo = await fixture({
    '.devcontainer/devcontainer.json': JSON.stringify({ image: NO_NODE }),
    'index.html': '<!doctype html><title>plain</title><h1>Hello drydock</h1>',
  });
  const { final, output } = await session(
    'nonode-browser',
    repo,
    'for c in node chromium; do command -v $c >/dev/null || echo "no $c"; done',
    {
      verify: {
        browser: {
          start: 'python3 -m http.server 3000 --bind 127.0.0.1',
          url: 'http://localhost:3000/',
          readyTimeout: '20s',
          checks: [{ path: '/', expectText: 'Hello drydock' }],
        },
      },
    },
  );
  expect(output).toContain('no node');
  expect(output).toContain('no chromium');
  expect(final.verification?.browser).toMatchObject({ outcome: 'passed', checks: [{ path: '/', ok: true }] });
  expect(final.phase).toBe('completed');
}, 600_000);

test("an image without git gets drydock's own, last on PATH, and the session's checkpoints and commit work", async () => {
  const repo = await fixture({ '.devcontainer/devcontainer.json': '{ "image": "debian:trixie-slim" }' });
  const { final, output } = await session('nogit', repo, 'command -v git && git --version && echo edited >> README.md');
  expect(output).toContain('/opt/drydock/git/bin/git');
  expect(output).toMatch(/^git version /m);
  expect(final.phase).toBe('completed');
  expect(final.agent?.diffstat).toMatch(/README\.md/);
}, 600_000);

test("remoteUser root is not given and ${localEnv:…} is never the worker's: the session runs as uid 1000, the variable empty", async () => {
  const repo = await fixture({
    '.devcontainer/devcontainer.json': JSON.stringify({
      image: 'debian:trixie-slim',
      remoteUser: 'root',
      // The worker's own HOME (and any credential in its environment) never reaches a sandbox.
      remoteEnv: { FROM_MACHINE: '${localEnv:HOME}', WITH_DEFAULT: '${localEnv:NOPE:fallback}' },
    }),
  });
  const { final, output } = await session('root-localenv', repo, 'id -u; echo "[$FROM_MACHINE][$WITH_DEFAULT]"');
  expect(final.phase).toBe('completed');
  expect(output).toMatch(/^1000\n\[\]\[fallback\]$/m);
}, 600_000);

describe("a repo's Dockerfile is built in the isolated builder, never on the host", () => {
  test("ADD <url> of the host's loopback reaches nothing: the build fails, the host is never asked", async () => {
    const asked: string[] = [];
    const host = createServer((req, res) => {
      asked.push(req.url ?? '');
      res.end('what only the host can reach');
    });
    await new Promise<void>((resolve) => host.listen(0, '127.0.0.1', resolve));
    const port = (host.address() as { port: number }).port;
    try {
      const repo = await fixture({
        '.devcontainer/devcontainer.json': '{ "build": { "dockerfile": "Dockerfile" } }',
        '.devcontainer/Dockerfile': `FROM debian:trixie-slim\nADD http://127.0.0.1:${port}/latest/meta-data /leak\n`,
      });
      const { final } = await session('add-url', repo, 'cat /leak');
      expect(final.phase).toBe('failed');
      expect(final.error).toContain('.devcontainer/devcontainer.json: the build failed');
      expect(asked).toEqual([]);
    } finally {
      host.close();
    }
  }, 600_000);

  test('RUN runs as root in the builder; the session on its image runs as the sandbox user; `drydock run` shows the build', async () => {
    const repo = await fixture({
      // The sleep holds the step for several of the follower's polls, on any machine.
      Dockerfile: 'FROM debian:trixie-slim\nRUN sleep 8 && id -u > /built-by && touch /ran-as-root\n',
      '.drydock/config.yaml': 'environment:\n  dockerfile: Dockerfile\n',
    });
    // Started as a person would, with the CLI: a cold start builds the environment, and the follower says where.
    const id = newSessionId('run-root');
    const ran = await runCli(
      ['run', '--repo', repo.url, '--id', id, '--task', 'run-root', '--step', 'cat /built-by; id -u; ls /ran-as-root'],
      {
        TEMPORAL_ADDRESS: stack.config.TEMPORAL_ADDRESS,
        DATABASE_URL: stack.config.DATABASE_URL!,
        DRYDOCK_TASK_QUEUE: stack.config.DRYDOCK_TASK_QUEUE,
      },
    );
    expect(ran.stderr).toMatch(/^ {2}building Dockerfile: STEP \d\/\d: RUN sleep 8 && id -u/m);
    // Provisioning finds the image it built (its first attempt once took the inspect from before the build).
    expect(ran.stderr).not.toContain('is not on the host after its load');
    expect(await containersOf(id)).toHaveLength(0);
    const final: SessionStatus = await stack.client.workflow.getHandle(id).query(status);
    expect(final.phase).toBe('completed');
    expect(ran.code).toBe(0);
    expect(final.timeline.find((t) => t.name.startsWith('step 1'))?.outputTail).toMatch(/^0\n1000\n\/ran-as-root$/m);
  }, 600_000);

  test("another repository's snapshot is no repo's image, named or FROM", async () => {
    // An image labelled as drydock labels a snapshot of another repository.
    const stolen = `drydock-snap-other-test:${newSessionId('snap').slice(-6)}`;
    const labels = ['drydock.image=snapshot', 'drydock.snapshot.repo=file:///other/repo.git'];
    await new Promise<void>((resolve, reject) => {
      const args = ['build', '-q', '--network', 'none', ...labels.flatMap((l) => ['--label', l]), '-t', stolen, '-'];
      const child = execFile('docker', args, (err) => (err ? reject(err) : resolve()));
      child.stdin!.end(`FROM ${stack.config.DRYDOCK_BASE_IMAGE}\n`);
    });
    try {
      const named = await fixture({ '.devcontainer/devcontainer.json': JSON.stringify({ image: stolen }) });
      const from = await fixture({
        '.devcontainer/devcontainer.json': '{ "build": { "dockerfile": "Dockerfile" } }',
        '.devcontainer/Dockerfile': `FROM ${stolen}\n`,
      });
      for (const [name, repo] of [
        ['named', named],
        ['from', from],
      ] as const) {
        const { final } = await session(`snapshot-${name}`, repo, 'ls /workspace');
        expect([name, final.phase]).toEqual([name, 'failed']);
        expect(final.error).toContain(`image ${stolen} was made by drydock from a repository (a snapshot)`);
      }
    } finally {
      await docker.getImage(stolen).remove({ force: true });
    }
  }, 180_000);
});

describe("a service's image is no repository's and no image id (T4-M1)", () => {
  test("another repository's snapshot or data image, or an image id, is refused as a service's image", async () => {
    // Images labelled as drydock labels another repository's snapshot and one of its services' data.
    const suffix = newSessionId('svc').slice(-6);
    const stolen = `drydock-snap-other-svc:${suffix}`;
    const data = `drydock-data-drydock-snap-other-svc-${suffix}:db`;
    await localImage(stolen, ['LABEL drydock.image=snapshot drydock.snapshot.repo=file:///other/repo.git']);
    await localImage(data, ['LABEL drydock.image=service-data drydock.snapshot.repo=file:///other/repo.git']);
    const idPrefix = (await docker.getImage(stack.config.DRYDOCK_BASE_IMAGE!).inspect()).Id.slice(7, 19);
    try {
      for (const [name, image, why] of [
        ['snapshot', stolen, `image ${stolen} was made by drydock from a repository (a snapshot)`],
        ['data', data, `image ${data} was made by drydock from a repository (a snapshot)`],
        ['id', idPrefix, `${idPrefix} reads as an image id (or the start of one)`],
      ] as const) {
        const repo = await fixture({
          '.drydock/config.yaml': `services:\n  x:\n    image: "${image}"\n    command: ["cat", "/etc/hostname"]\n`,
        });
        const { final } = await session(`service-${name}`, repo, 'true');
        expect([name, final.phase]).toEqual([name, 'failed']);
        expect(final.error).toContain(`services.x.image: ${why}`);
      }
    } finally {
      for (const image of [stolen, data]) await docker.getImage(image).remove({ force: true });
    }
  }, 240_000);

  test("a repo Dockerfile's drydock.snapshot.services LABEL is not its snapshot's record: drydock writes its own", async () => {
    const forged = JSON.stringify([
      { name: 'evil', image: stack.config.DRYDOCK_BASE_IMAGE, command: ['sleep', '600'] },
    ]);
    const repo = await fixture({
      '.devcontainer/devcontainer.json': '{ "build": { "dockerfile": "Dockerfile" } }',
      // A small base: the Dockerfile goes through the isolated builder, which is handed its base whole.
      '.devcontainer/Dockerfile': `FROM debian:trixie-slim\nLABEL drydock.snapshot.services='${forged}'\n`,
      '.drydock/setup.sh': 'true\n',
    });
    const built = await buildSnapshot(repo);
    expect(built).toMatchObject({ status: 'ready' });
    const labels = (await docker.getImage(built.image!).inspect()).Config.Labels ?? {};
    expect([labels['drydock.snapshot.services'], labels['drydock.snapshot.env']]).toEqual(['[]', '{}']);
    const { final } = await session('forged-services', repo, 'true');
    expect(final.phase).toBe('completed');
  }, 600_000);
});

/** A local image built FROM the base image with `lines`, on no network; removed by the caller. */
async function localImage(tag: string, lines: string[]): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const child = execFile('docker', ['build', '-q', '--network', 'none', '-t', tag, '-'], (err) =>
      err ? reject(err) : resolve(),
    );
    child.stdin!.end([`FROM ${stack.config.DRYDOCK_BASE_IMAGE}`, ...lines, ''].join('\n'));
  });
}

test('an image with ONBUILD triggers is refused, named or FROM, before any build runs them (T4-M2)', async () => {
  const triggered = `drydock-onbuild-test:${newSessionId('onbuild').slice(-6)}`;
  await localImage(triggered, ['ONBUILD RUN touch /onbuild-ran']);
  try {
    const named = await fixture({ '.devcontainer/devcontainer.json': JSON.stringify({ image: triggered }) });
    const from = await fixture({
      '.devcontainer/devcontainer.json': '{ "build": { "dockerfile": "Dockerfile" } }',
      '.devcontainer/Dockerfile': `FROM ${triggered}\n`,
    });
    for (const [name, repo] of [
      ['named', named],
      ['from', from],
    ] as const) {
      const { final } = await session(`onbuild-${name}`, repo, 'ls /onbuild-ran');
      expect([name, final.phase]).toEqual([name, 'failed']);
      expect(final.error).toContain(
        `image ${triggered} has 1 ONBUILD trigger(s) (the first: "RUN touch /onbuild-ran")`,
      );
    }
  } finally {
    await docker.getImage(triggered).remove({ force: true });
  }
}, 180_000);

/** The host's volumes holding a file of this name: an image's VOLUME content copied into one. */
async function volumesHolding(file: string): Promise<string[]> {
  const volumes = (await docker.listVolumes()).Volumes ?? [];
  return volumes.filter((v) => existsSync(path.join(v.Mountpoint, file))).map((v) => v.Name);
}

test("an image's VOLUME is a bounded tmpfs in the sandbox, not a volume on the host's disk (T4-L3)", async () => {
  const withVolume = `drydock-volume-test:${newSessionId('volume').slice(-6)}`;
  // A file of the image in the VOLUME: a volume made for it on the host would hold a copy.
  const marker = `drydock-volume-marker-${withVolume.slice(-6)}`;
  await localImage(withVolume, [
    'USER root',
    `RUN mkdir -p /srv/data && chmod 1777 /srv/data && touch /srv/data/${marker}`,
    'VOLUME /srv/data',
  ]);
  try {
    const repo = await fixture({ '.devcontainer/devcontainer.json': JSON.stringify({ image: withVolume }) });
    const { final, output } = await session(
      'volume',
      repo,
      // As large as /tmp (limits.tmp): a bigger write fails there as in /tmp.
      'awk \'$2 == "/srv/data" { print $3 }\' /proc/mounts; touch /srv/data/x && echo writable; ' +
        'head -c 20000000 /dev/zero > /srv/data/big 2>/dev/null || echo bounded',
      { limits: { tmp: '8m' } },
    );
    expect(final.phase).toBe('completed');
    expect(output.trim().split('\n')).toEqual(['tmpfs', 'writable', 'bounded']);
    // Nor one left on the host by the session or by drydock's own look into the image (whether it is
    // musl's: a container made, read and removed).
    expect(await new DockerProvider(docker).imageHasFile(withVolume, '/lib/ld-musl-x86_64.so.1')).toBe(false);
    expect(await volumesHolding(marker)).toEqual([]);
  } finally {
    await docker.getImage(withVolume).remove({ force: true });
  }
}, 180_000);

test('without a declaration nothing changes: the base image and its own Node.js', async () => {
  const repo = await fixture({});
  const { final, output } = await session(
    'plain',
    repo,
    'node --version; python3 -m venv .venv && .venv/bin/pip --version',
  );
  expect(final.phase).toBe('completed');
  expect(output).toMatch(/^v20\./m);
  expect(output).toMatch(/^pip \d+/m);
}, 120_000);

test('an environment image a newer one replaced goes once no sandbox uses it; the ones in use stay', async () => {
  const dockerfile = (generation: number) => `FROM debian:trixie-slim\nENV GENERATION=${generation}\n`;
  const repo = await fixture({
    '.devcontainer/devcontainer.json': '{ "build": { "dockerfile": "Dockerfile" } }',
    '.devcontainer/Dockerfile': dockerfile(1),
  });
  const labels = async (image: string) => (await docker.getImage(image).inspect()).Config.Labels ?? {};
  const exists = (image: string) =>
    docker
      .getImage(image)
      .inspect()
      .then(
        () => true,
        () => false,
      );
  /** The snapshot's environment image and what it was built from. */
  const imagesOf = async (built: SnapshotBuildResult) => {
    const env = (await labels(built.image!))[SNAPSHOT_LABELS.environment];
    return { env, from: (await labels(env))[ENVIRONMENT_FROM_LABEL] };
  };

  const first = await buildSnapshot(repo, 'true', '1');
  const old = await imagesOf(first);
  expect(old.env).toMatch(/^drydock-env-/);
  // Built whole in the isolated builder: no image of the repo's own under it, its Dockerfile at the commit.
  expect(old.from).toMatch(/^\.devcontainer\/Dockerfile@[0-9a-f]{40}$/);
  // A sandbox still on the old environment (a cold session's) holds it.
  const holder = await docker.createContainer({ Image: old.env, Cmd: ['true'] });
  let current: { env: string; from: string };
  try {
    await repo.commit({ '.devcontainer/Dockerfile': dockerfile(2) }, 'generation 2');
    const second = await buildSnapshot(repo, 'true', '1');
    current = await imagesOf(second);
    expect(current.env).not.toBe(old.env);
    expect(second.removed).toEqual([first.image]); // the old environment is in use
    expect(await exists(old.env)).toBe(true);
  } finally {
    await holder.remove({ force: true });
  }
  // Nothing uses it now: the reaper's run removes it, and nothing the newest snapshot stands on.
  await runReaper(stack);
  expect(await exists(old.env)).toBe(false);
  expect(await exists(current.env)).toBe(true);
}, 900_000);
