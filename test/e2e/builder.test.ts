/**
 * drydock's isolated builder (sandbox/builder.ts, docs/builder.md): a repo's
 * Dockerfile built whole (RUN with apt-get from Debian's archive and https
 * to the npm registry, through the egress proxy with the extra CA; a
 * multi-stage build with COPY --from) and its setup.root as the
 * environment's last layer, then a session on it as the sandbox user. And
 * what a build cannot do: reach the host's network, its Docker socket or a
 * host path (a symlink in the context included), start from an image it was
 * not given (a bare \r hiding a FROM), or run past its time limit. Real
 * Docker, gVisor (runsc-builder), real Debian archive and npm registry.
 */
import { execFileSync } from 'node:child_process';
import { createServer } from 'node:http';
import { chmod, mkdir, mkdtemp, readFile, readdir, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { addRepo } from '../../cli/snapshots';
import { createLogger } from '../../platform/log';
import pino from 'pino';
import {
  buildIsolated,
  IsolatedBuildFailed,
  PACKAGE_REGISTRIES,
  REPO_STAGE,
  removeBuilderContainer,
} from '../../sandbox/builder';
import { repoSlug, deleteSnapshotSchedules } from '../../sandbox/snapshots';
import { ensureBuilderImage } from '../../sandbox-images/builder-image';
import { status, type SessionStatus } from '../../workflows/api';
import {
  containersOf,
  docker,
  makeFixtureRepo,
  newSessionId,
  runCli,
  startSession,
  startStack,
  type FixtureRepo,
  type TestStack,
} from '../support/helpers';

const BASE = 'debian:trixie-slim';
const log = createLogger('silent');
let builderImage: string;
let baseId: string;
const work: string[] = [];
/**
 * The worker's cache folder for the builds that are not about it (as a worker's builds have
 * one): the base is saved once for them, not once a build. The cache's own test has its own.
 */
let sharedCache: string;
/** The quickest whole build of this file so far (buildDirect), ms: what the hanging build's time limit is sized by. */
let quickestBuildMs = Infinity;

beforeAll(async () => {
  builderImage = await ensureBuilderImage(() => undefined);
  baseId = execFileSync('docker', ['image', 'inspect', '-f', '{{.Id}}', BASE]).toString().trim();
  sharedCache = await mkdtemp(path.join(tmpdir(), 'drydock-builder-cache-'));
  work.push(sharedCache);
}, 600_000);

afterAll(async () => {
  for (const dir of work) await rm(dir, { recursive: true, force: true });
});

async function contextOf(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-builder-test-'));
  work.push(dir);
  for (const [name, text] of Object.entries(files)) await writeFile(path.join(dir, name), text);
  return dir;
}

/** Builds `dockerfile` in the isolated builder FROM debian:trixie-slim; returns the tag loaded on the host. */
async function buildDirect(
  name: string,
  dockerfile: string,
  context: string,
  timeoutMs?: number,
  cacheDir = sharedCache,
): Promise<string> {
  const tag = `drydock-builder-test-${name}:${newSessionId('b').slice(-8).toLowerCase()}`;
  const started = Date.now();
  await buildIsolated({
    builderImage,
    tag,
    labels: { 'drydock.image': 'environment' },
    repo: { dockerfile, context, args: {} },
    layer: `FROM ${REPO_STAGE}\n`,
    bases: [{ ref: BASE, id: baseId }],
    egress: PACKAGE_REGISTRIES,
    ...(timeoutMs ? { limits: { timeoutMs } } : {}),
    cacheDir,
    owner: `test ${name}`,
    log,
  }).catch((err: unknown) => {
    // What the builder said, so that a failure in CI says which step failed and why.
    if (err instanceof IsolatedBuildFailed) err.message += `; its output ends:\n${err.output.slice(-4000)}`;
    throw err;
  });
  quickestBuildMs = Math.min(quickestBuildMs, Date.now() - started);
  return tag;
}

/** A file of an image, or '' when it has none (cat in a container with no network). */
function readFromImage(tag: string, file: string): string {
  const argv = ['run', '--rm', '--network', 'none', '--entrypoint', 'sh', tag, '-c', `cat ${file} 2>/dev/null || true`];
  return execFileSync('docker', argv).toString();
}

/**
 * A fault the engine gives under load, made on demand: a `docker` first on PATH that answers
 * the first `times` of `docker rm -f <name>` of a container that exists with the engine's
 * error (as gVisor's kill past the engine's deadline did at load 56) and leaves it; all else
 * goes to the real docker. Undone by the returned function; `failed()` counts the refusals.
 */
async function failingRemovals(times: number): Promise<{ failed: () => Promise<number>; undo: () => void }> {
  const real = execFileSync('sh', ['-c', 'command -v docker']).toString().trim();
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-docker-shim-'));
  work.push(dir);
  const count = path.join(dir, 'count');
  await writeFile(count, '0');
  await writeFile(
    path.join(dir, 'docker'),
    [
      '#!/bin/bash',
      `if [ "$1" = rm ] && [ "$2" = -f ] && [ "$(cat ${count})" -lt ${times} ] && ${real} container inspect "$3" >/dev/null 2>&1; then`,
      `  echo $(( $(cat ${count}) + 1 )) > ${count}`,
      '  echo "Error response from daemon: cannot remove container \"/$3\": could not kill: context deadline exceeded" >&2',
      '  exit 1',
      'fi',
      `exec ${real} "$@"`,
      '',
    ].join('\n'),
  );
  await chmod(path.join(dir, 'docker'), 0o755);
  const before = process.env.PATH;
  process.env.PATH = `${dir}:${before}`;
  return {
    failed: async () => Number((await readFile(count, 'utf8')).trim()),
    undo: () => {
      process.env.PATH = before;
    },
  };
}

const removeImage = (tag: string) =>
  docker
    .getImage(tag)
    .remove({ force: true })
    .catch(() => undefined);

describe('a snapshot of a repo whose Dockerfile and setup.root install OS packages', () => {
  let stack: TestStack;
  let repo: FixtureRepo;
  beforeAll(async () => {
    stack = await startStack({
      DRYDOCK_APPROVAL_REQUIRED: [],
      DRYDOCK_EXTRA_CA_CERTS: '/etc/ssl/certs/ca-certificates.crt',
    });
  }, 600_000);
  afterAll(async () => {
    if (repo) {
      for (const image of await docker.listImages()) {
        if ((image.RepoTags ?? []).some((t) => t.includes(repoSlug(repo.url)))) await removeImage(image.Id);
      }
      await deleteSnapshotSchedules(stack.client, repo.url, [stack.config.DRYDOCK_HOST_ID]);
    }
    await stack?.stop();
  });

  test('apt-get and npm through the egress proxy, COPY --from a stage, setup.root as root; the session runs as the sandbox user', async () => {
    repo = await makeFixtureRepo({
      '.devcontainer/devcontainer.json': '{ "build": { "dockerfile": "Dockerfile" } }',
      // A multi-stage Dockerfile: a stage fetches with curl over https (npm's registry), the last copies from it.
      // No ca-certificates package: curl trusts the bundle the builder hands each RUN step (CURL_CA_BUNDLE,
      // the extra CA included), and that package's postinst alone takes 1.5 minutes under gVisor here.
      '.devcontainer/Dockerfile': [
        '# syntax=docker/dockerfile:1',
        `FROM ${BASE} AS apt`,
        'RUN apt-get update',
        'FROM apt AS fetch',
        'RUN apt-get install -y --no-install-recommends curl \\',
        ' && curl -fsS https://registry.npmjs.org/is-number/7.0.0 -o /is-number.json',
        'FROM apt',
        'RUN apt-get install -y --no-install-recommends jq && rm -rf /var/lib/apt/lists/*',
        'COPY --from=fetch /is-number.json /opt/is-number.json',
        'COPY marker.txt /opt/marker.txt',
        '',
      ].join('\n'),
      '.devcontainer/marker.txt': 'from the context\n',
      '.drydock/config.yaml': [
        'setup:',
        '  command: jq -r .name /opt/is-number.json > .setup-saw',
        '  root: apt-get update && apt-get install -y --no-install-recommends tree && rm -rf /var/lib/apt/lists/*',
        '',
      ].join('\n'),
      '.gitignore': '.setup-saw\n',
    });
    await addRepo(stack.client, stack.config, repo.url, { every: '1h', allow: ['registry.npmjs.org'] });
    // Built as a person would, with the CLI: it says where the build is while it waits (each phase, each
    // step of the Dockerfile it reached while polling: curl's install lasts many polls), then the result.
    const built = await runCli(['snapshot', 'build', repo.url], {
      TEMPORAL_ADDRESS: stack.config.TEMPORAL_ADDRESS,
      DATABASE_URL: stack.config.DATABASE_URL!,
      DRYDOCK_TASK_QUEUE: stack.config.DRYDOCK_TASK_QUEUE,
    });
    expect(built).toMatchObject({ code: 0, stdout: expect.stringMatching(/^snapshot ready: /) });
    expect(built.stderr).toMatch(/^snapshot build drydock-snapshot-\S+ started$/m);
    expect(built.stderr).toMatch(
      /^\[\d+ s\] building \.devcontainer\/devcontainer\.json: \[2\/3\] STEP 2\/2: RUN apt-get install -y --no-install-recommends curl/m,
    );

    const id = newSessionId('builder-session');
    const handle = await startSession(stack, id, {
      repo: { url: repo.url },
      task: 'use what the build installed',
      agent: { steps: [{ run: 'id -u; jq --version; tree --version; cat .setup-saw /opt/marker.txt' }] },
    });
    await handle.result().catch(() => undefined);
    expect(await containersOf(id)).toHaveLength(0);
    const final: SessionStatus = await handle.query(status);
    const output = final.timeline.find((t) => t.name.startsWith('step 1'))?.outputTail ?? '';
    expect(final.phase).toBe('completed');
    expect(output).toMatch(/^1000$/m);
    expect(output).toMatch(/^jq-1\./m);
    expect(output).toMatch(/^tree v\d/m);
    expect(output).toMatch(/^is-number$/m);
    expect(output).toContain('from the context');
  }, 900_000);
});

test("a base is saved once: the next build takes its archive from the worker's cache, by image id", async () => {
  const cacheDir = await mkdtemp(path.join(tmpdir(), 'drydock-builder-cache-'));
  work.push(cacheDir);
  const archive = path.join(cacheDir, 'bases', `${baseId.replace(/^sha256:/, '')}.tar`);
  const context = await contextOf({ 'n.txt': 'one\n' });
  const first = await buildDirect('cache1', `FROM ${BASE}\nCOPY n.txt /n\n`, context, undefined, cacheDir);
  const saved = await stat(archive);
  await writeFile(path.join(context, 'n.txt'), 'two\n');
  const second = await buildDirect('cache2', `FROM ${BASE}\nCOPY n.txt /n\n`, context, undefined, cacheDir);
  try {
    expect([readFromImage(first, '/n'), readFromImage(second, '/n')]).toEqual(['one\n', 'two\n']);
    // The same file, not saved again: one archive in the cache.
    expect((await stat(archive)).ino).toBe(saved.ino);
    expect(await readdir(path.join(cacheDir, 'bases'))).toEqual([path.basename(archive)]);
  } finally {
    for (const tag of [first, second]) await removeImage(tag);
  }
}, 900_000);

test('the same content under another tag is not built again: the image is tagged; gone from the engine, it is built anew', async () => {
  const cacheDir = await mkdtemp(path.join(tmpdir(), 'drydock-builder-cache-'));
  work.push(cacheDir);
  const context = await contextOf({ 'n.txt': 'reused\n' });
  const dockerfile = `FROM ${BASE}\nRUN echo ran > /ran\nCOPY n.txt /n\n`;
  const idOf = (tag: string) => execFileSync('docker', ['image', 'inspect', '-f', '{{.Id}}', tag]).toString().trim();
  const first = await buildDirect('reuse1', dockerfile, context, undefined, cacheDir);
  const second = await buildDirect('reuse2', dockerfile, context, undefined, cacheDir);
  let third = '';
  try {
    // Built twice, the ids would differ (each layer's time); tagged, it is the first's image.
    expect(idOf(second)).toBe(idOf(first));
    expect(readFromImage(second, '/n')).toBe('reused\n');
    const firstId = idOf(first);
    for (const tag of [first, second]) await removeImage(tag);
    third = await buildDirect('reuse3', dockerfile, context, undefined, cacheDir);
    expect(idOf(third)).not.toBe(firstId);
    expect(readFromImage(third, '/ran')).toBe('ran\n');
  } finally {
    for (const tag of [first, second, third].filter(Boolean)) await removeImage(tag);
  }
}, 900_000);

test("two builds of one content at once (a schedule's refresh beside a person's) both end with its image", async () => {
  const context = await contextOf({ 'n.txt': 'same\n' });
  const tag = `drydock-builder-test-twice:${newSessionId('b').slice(-8).toLowerCase()}`;
  // One repo's environment: the same owner and tag, so the same builder container's name.
  const build = () =>
    buildIsolated({
      builderImage,
      tag,
      labels: { 'drydock.image': 'environment' },
      repo: { dockerfile: `FROM ${BASE}\nCOPY n.txt /n\n`, context, args: {} },
      layer: `FROM ${REPO_STAGE}\n`,
      bases: [{ ref: BASE, id: baseId }],
      egress: PACKAGE_REGISTRIES,
      cacheDir: sharedCache,
      owner: 'test twice',
      log,
    });
  try {
    const [first, second] = await Promise.allSettled([build(), build()]);
    expect([first.status, second.status]).toEqual(['fulfilled', 'fulfilled']);
    expect(readFromImage(tag, '/n')).toBe('same\n');
  } finally {
    await removeImage(tag);
  }
}, 900_000);

describe('what a build cannot reach', () => {
  test("the host's network, its Docker socket and a host path (a symlink in the context) stay out of reach", async () => {
    const asked: string[] = [];
    const host = createServer((req, res) => {
      asked.push(req.url ?? '');
      res.end('only the host serves this');
    });
    await new Promise<void>((resolve) => host.listen(0, '127.0.0.1', resolve));
    const port = (host.address() as { port: number }).port;
    const secretDir = await mkdtemp(path.join(tmpdir(), 'drydock-host-secret-'));
    work.push(secretDir);
    await writeFile(path.join(secretDir, 'secret'), 'host secret\n');
    const context = await contextOf({});
    await mkdir(path.join(context, 'links'));
    await symlink(path.join(secretDir, 'secret'), path.join(context, 'links', 'leak'));
    const dockerfile = [
      `FROM ${BASE}`,
      // Direct, on the builder's loopback: nothing of the host is there.
      `RUN bash -c '(exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null && echo reached || echo unreachable' > /direct`,
      // Through the egress proxy: loopback is not on the build's allowlist.
      `RUN bash -c 'exec 3<>/dev/tcp/127.0.0.1/3128; printf "GET http://127.0.0.1:${port}/ HTTP/1.0\\r\\n\\r\\n" >&3; head -1 <&3' > /proxied 2>&1 || true`,
      'RUN (ls -l /var/run/docker.sock /run/docker.sock 2>&1 || true) > /socket',
      `RUN (cat ${path.join(secretDir, 'secret')} 2>&1 || true) > /path`,
      'COPY links/ /links/',
      'RUN (cat /links/leak 2>&1 || true) > /symlink',
      '',
    ].join('\n');
    try {
      const tag = await buildDirect('reach', dockerfile, context);
      try {
        expect(readFromImage(tag, '/direct')).toMatch(/unreachable/);
        expect(readFromImage(tag, '/proxied')).toMatch(/^HTTP\/1\.[01] 403/);
        expect(readFromImage(tag, '/socket')).toMatch(/No such file or directory/);
        expect(readFromImage(tag, '/path')).toMatch(/No such file or directory/);
        expect(readFromImage(tag, '/symlink')).not.toContain('host secret');
      } finally {
        await removeImage(tag);
      }
      expect(asked).toEqual([]);
    } finally {
      host.close();
    }
  }, 600_000);

  test('a bare \\r hiding a FROM cannot start from an image the builder was not given', async () => {
    // An image on the host the build was not given (another repository's, say), with a file of its own.
    const other = `drydock-builder-test-other:${newSessionId('o').slice(-8).toLowerCase()}`;
    const maker = `drydock-builder-test-maker-${newSessionId('m').slice(-8).toLowerCase()}`;
    execFileSync('docker', [
      'run',
      '--name',
      maker,
      '--network',
      'none',
      BASE,
      'sh',
      '-c',
      'echo other > /other-marker',
    ]);
    execFileSync('docker', ['commit', maker, other]);
    execFileSync('docker', ['rm', maker]);
    try {
      const dockerfile = `FROM ${BASE}\nRUN echo one > /one \rFROM ${other}\nRUN echo two > /two\n`;
      const outcome = await buildDirect('cr', dockerfile, await contextOf({})).then(
        (tag) => ({ tag }),
        (err: unknown) => ({ err }),
      );
      if ('tag' in outcome) {
        // buildah read the \r as part of a line: nothing came of the hidden FROM.
        const marker = readFromImage(outcome.tag, '/other-marker');
        await removeImage(outcome.tag);
        expect(marker).toBe('');
      } else {
        expect(outcome.err).toBeInstanceOf(IsolatedBuildFailed);
        expect((outcome.err as IsolatedBuildFailed).output).toMatch(/image not known|not found|does not resolve/i);
      }
    } finally {
      await removeImage(other);
    }
  }, 600_000);

  // A RUN that hangs (sleep: a busy loop held a core of a busy suite's two for a minute, the same kill).
  test('a build that hangs is stopped at its time limit, the error says so, and a failed removal is tried again', async () => {
    // The first removal past the time limit fails, as it did once under load: the build must not run on.
    const shim = await failingRemovals(1);
    // Twice a whole build of this file and 10 s, within 40 to 90 s (90 when none ran before, as
    // with -t): time to reach the RUN (starting the builder, loading the base) under load.
    const limitS = Number.isFinite(quickestBuildMs)
      ? Math.min(90, Math.max(40, Math.ceil((2 * quickestBuildMs) / 1000) + 10))
      : 90;
    const failed = await buildDirect('loop', `FROM ${BASE}\nRUN sleep 3600\n`, await contextOf({}), limitS * 1000)
      .then(() => undefined)
      .catch((err: unknown) => err)
      .finally(shim.undo);
    expect(await shim.failed()).toBe(1);
    expect(failed).toBeInstanceOf(IsolatedBuildFailed);
    expect((failed as IsolatedBuildFailed).timedOut).toBe(true);
    // Stopped in the RUN, not before it.
    expect((failed as IsolatedBuildFailed).output).toMatch(/STEP 2\/2: RUN sleep 3600/);
    // Its first line; the builder's output follows it (buildDirect).
    expect((failed as Error).message.split(';')[0]).toBe(
      `the build ran past its time limit of ${limitS} s and was stopped: the worker's DRYDOCK_BUILD_TIMEOUT sets it (at most 30m)`,
    );
    const left = await docker.listContainers({ all: true, filters: { label: ['drydock.builder=test loop'] } });
    expect(left).toEqual([]);
  }, 600_000);

  test('a builder the engine will not remove: tried again, and given up on in the log after its tries', async () => {
    const name = `drydock-build-test-${newSessionId('r').slice(-8).toLowerCase()}`;
    execFileSync('docker', ['run', '-d', '--name', name, '--network', 'none', BASE, 'sleep', 'infinity']);
    const lines: string[] = [];
    const said = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
    const known = () =>
      execFileSync('docker', ['ps', '-aq', '--filter', `name=^${name}$`])
        .toString()
        .trim() !== '';
    try {
      // Two refusals, three tries: removed at the third, and the log says the two that failed.
      let shim = await failingRemovals(2);
      const second = await removeBuilderContainer(name, said, { tries: 3, pauseMs: 100 }).finally(shim.undo);
      expect(second).toBe(true);
      expect(known()).toBe(false);
      expect(lines.filter((l) => l.includes('the builder was not removed yet'))).toHaveLength(2);
      // Refused every time: it gives up after its tries, saying so and what the engine said.
      execFileSync('docker', ['run', '-d', '--name', name, '--network', 'none', BASE, 'sleep', 'infinity']);
      lines.length = 0;
      shim = await failingRemovals(99);
      const given = await removeBuilderContainer(name, said, { tries: 3, pauseMs: 100 }).finally(shim.undo);
      expect(given).toBe(false);
      expect(known()).toBe(true);
      const last = JSON.parse(lines.at(-1) ?? '{}') as { msg?: string; said?: string; tries?: number };
      expect(last).toMatchObject({ msg: expect.stringMatching(/^gave up removing the builder container/), tries: 3 });
      expect(last.said).toMatch(/could not kill: context deadline exceeded/);
    } finally {
      execFileSync('docker', ['rm', '-f', name]);
    }
  }, 120_000);
});
