/**
 * The deployment, brought up the way infra/compose describes it but with plain
 * `docker run --network host` (this engine has no bridge network, and no compose
 * plugin is installed): the images infra/images.sh builds, the compose folder's
 * own scripts (PostgreSQL init, Temporal schema and set-up), the control plane
 * (PostgreSQL, Temporal on PostgreSQL, `drydock serve`) and a worker for each of
 * two Docker engines (both worker containers run on the first engine; each drives
 * its own engine through that engine's socket), with the privileges worker.yaml
 * gives it for the sandboxes' loop-mounted storage, read from that file. A session
 * goes through serve's API to its approval, is approved there, and its branch is
 * pushed. Throwaway ports and folders; everything it started is removed at the end.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { version } from '../../package.json';
import { secondDockerHost } from '../support/docker-hosts';
import { freePort, git, makeFixtureRepo, newSessionId, projectRoot, temporalPorts } from '../support/helpers';
import { own } from '../support/leftovers';

const run = promisify(execFile);
const compose = path.join(projectRoot, 'infra/compose');
const PREFIX = `drydock-deploytest-${randomBytes(3).toString('hex')}`;
const TOKEN_A = 'alice-deploy-0123456789abcdef';
const TOKEN_B = 'bob-deploy-0123456789abcdef01';
const started: { name: string; dockerHost?: string }[] = [];

/** `docker <args>` on one engine (the machine's by default); stdout. */
async function docker(args: string[], dockerHost = process.env.DOCKER_HOST): Promise<string> {
  const env = { ...process.env, ...(dockerHost ? { DOCKER_HOST: dockerHost } : {}) };
  const { stdout } = await run('docker', args, { env, maxBuffer: 64 << 20 });
  return stdout.trim();
}

/** A long-running container on the host network, removed in afterAll. */
async function container(
  role: string,
  image: string,
  options: { env: Record<string, string>; mounts?: string[]; flags?: string[]; dockerHost?: string; args?: string[] },
): Promise<string> {
  const name = `${PREFIX}-${role}`;
  started.push({ name, dockerHost: options.dockerHost });
  await docker(
    [
      'run',
      '-d',
      '--name',
      name,
      '--network',
      'host',
      ...Object.entries(options.env).flatMap(([k, v]) => ['-e', `${k}=${v}`]),
      ...(options.mounts ?? []).flatMap((m) => ['-v', m]),
      ...(options.flags ?? []),
      image,
      ...(options.args ?? []),
    ],
    options.dockerHost,
  );
  return name;
}

/** A one-shot step (the schema, the namespace set-up): runs to completion or throws with its output. */
async function step(image: string, script: string, env: Record<string, string>): Promise<string> {
  const args = ['run', '--rm', '--network', 'host', '--entrypoint', '/bin/sh'];
  for (const [k, v] of Object.entries(env)) args.push('-e', `${k}=${v}`);
  args.push('-v', `${path.join(compose, script)}:/scripts/${script}:ro`, image, `/scripts/${script}`);
  return docker(args);
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, seconds = 120): Promise<T> {
  for (let i = 0; i < seconds * 2; i++) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`${what} did not happen within ${seconds} s`);
}

/**
 * What infra/compose/worker.yaml gives the worker for sandbox/docker/storage.ts (loop mounts that
 * reach the host), as `docker run` flags, and the options of its data folder's bind.
 */
function workerPrivileges(): { flags: string[]; dataBind: string } {
  const worker = parse(readFileSync(path.join(compose, 'worker.yaml'), 'utf8')).services.worker;
  const volumes: string[] = worker.volumes;
  const flags = [
    ...(worker.cap_add as string[]).flatMap((c) => ['--cap-add', c]),
    ...(worker.security_opt as string[]).flatMap((o) => ['--security-opt', o]),
    ...(worker.device_cgroup_rules as string[]).flatMap((r) => ['--device-cgroup-rule', r]),
    ...volumes.filter((v) => v === '/dev:/dev').flatMap((v) => ['-v', v]),
  ];
  const dataBind = volumes.find((v) => v.startsWith('/var/lib/drydock:/var/lib/drydock'))!.split(':')[2];
  expect(dataBind).toBe('rshared');
  return { flags, dataBind };
}

let shared: string;
let images: { drydock: string; temporal: string; postgresql: string };
let serveUrl: string;
let temporalAddress: string;
let fixture: Awaited<ReturnType<typeof makeFixtureRepo>>;

beforeAll(async () => {
  const { stdout } = await run('bash', [path.join(projectRoot, 'infra/images.sh')], { maxBuffer: 16 << 20 });
  const [drydock, temporal, postgresql] = stdout.trim().split('\n');
  images = { drydock, temporal, postgresql };
  expect(drydock).toBe(`drydock:${version}`);

  const [pgPort, temporalPort, httpPort] = [await freePort(), await temporalPorts(), await freePort()];
  const passwords = {
    POSTGRES_PASSWORD: 'pg-pw',
    TEMPORAL_DB_PASSWORD: 'temporal-pw',
    DRYDOCK_DB_PASSWORD: 'drydock-pw',
  };
  await container('postgresql', postgresql, {
    env: passwords,
    mounts: [`${compose}/postgres-init.sh:/docker-entrypoint-initdb.d/10-drydock.sh:ro`],
    args: ['-p', String(pgPort)],
  });
  await until('PostgreSQL accepting connections', async () =>
    (await docker(['exec', `${PREFIX}-postgresql`, 'pg_isready', '-h', '127.0.0.1', '-p', String(pgPort)]))
      ? 1
      : undefined,
  );
  const db = { POSTGRES_SEEDS: '127.0.0.1', DB_PORT: String(pgPort) };
  expect(await step(temporal, 'temporal-schema.sh', { ...db, SQL_PASSWORD: passwords.TEMPORAL_DB_PASSWORD })).toContain(
    'temporal-schema: done',
  );
  await container('temporal', temporal, {
    env: {
      ...db,
      POSTGRES_USER: 'temporal',
      POSTGRES_PWD: passwords.TEMPORAL_DB_PASSWORD,
      BIND_ON_IP: '127.0.0.1',
      FRONTEND_GRPC_PORT: String(temporalPort),
      DYNAMIC_CONFIG_FILE_PATH: 'config/dynamicconfig/drydock.yaml',
    },
    mounts: [`${compose}/dynamicconfig:/etc/temporal/config/dynamicconfig:ro`],
  });
  const address = `127.0.0.1:${temporalPort}`;
  temporalAddress = address;
  expect(
    await step(temporal, 'temporal-setup.sh', {
      TEMPORAL_ADDRESS: address,
      TEMPORAL_NAMESPACE: 'default',
      TEMPORAL_RETENTION: '24h',
    }),
  ).toContain('namespace default ready');

  fixture = await makeFixtureRepo();
  shared = await mkdtemp(path.join(tmpdir(), 'drydock-deploy-'));
  own(shared); // removed at the end of the run (or by the next one, if this one is killed)
  // A shared mount, as systemd makes / on a host: the workers' loop mounts under it reach
  // this namespace, where the engines mount the sandboxes' overlays on them.
  await run('mount', ['--bind', shared, shared]);
  await run('mount', ['--make-rshared', shared]);
  const auditKey = path.join(shared, 'audit-key');
  await writeFile(auditKey, randomBytes(32).toString('hex'), { mode: 0o600 });
  const common = {
    TEMPORAL_ADDRESS: address,
    TEMPORAL_NAMESPACE: 'default',
    DATABASE_URL: `postgres://drydock:${passwords.DRYDOCK_DB_PASSWORD}@127.0.0.1:${pgPort}/drydock`,
    DRYDOCK_TASK_QUEUE: PREFIX,
    DRYDOCK_AUDIT_KEY_FILE: auditKey,
    DRYDOCK_ARTIFACTS_DIR: path.join(shared, 'artifacts'),
    // The fixture is a file:// repo, which only development mode accepts.
    DRYDOCK_DEV_MODE: '1',
    LOG_LEVEL: 'warn',
  };
  // Folders bound at identical paths, as in worker.yaml: the engine resolves the sandboxes' mounts on the host.
  const same = (dir: string) => `${dir}:${dir}`;
  const privileges = workerPrivileges();
  await container('serve', images.drydock, {
    env: {
      ...common,
      DRYDOCK_HOST_ID: 'control',
      DRYDOCK_DATA_DIR: path.join(shared, 'serve'),
      DRYDOCK_HTTP_HOST: '127.0.0.1',
      DRYDOCK_HTTP_PORT: String(httpPort),
      DRYDOCK_API_TOKENS: `alice=${TOKEN_A},bob=${TOKEN_B}`,
      DRYDOCK_REPOS: `acme/fixture=${fixture.url}`,
    },
    mounts: [same(shared)],
    args: ['serve'],
  });
  const second = await secondDockerHost();
  for (const [host, dockerHost] of [
    ['docker-a', process.env.DOCKER_HOST ?? 'unix:///var/run/docker.sock'],
    ['docker-b', second.dockerHost],
  ]) {
    const socket = dockerHost.replace(/^unix:\/\//, '');
    const dataDir = path.join(shared, host);
    await container(`worker-${host}`, images.drydock, {
      env: {
        ...common,
        DOCKER_HOST: dockerHost,
        DRYDOCK_HOST_ID: host,
        DRYDOCK_DATA_DIR: dataDir,
        DRYDOCK_EGRESS_DIR: path.join(dataDir, 'egress'),
        DRYDOCK_AGENTS_DIR: path.join(dataDir, 'agents'),
        DRYDOCK_BASE_IMAGE: process.env.DRYDOCK_BASE_IMAGE!,
        // The worker fetches Node.js builds from the npm registry; this network intercepts TLS.
        NODE_EXTRA_CA_CERTS: '/etc/drydock/extra-ca.pem',
      },
      mounts: [
        same(socket),
        `${same(shared)}:${privileges.dataBind}`,
        same(path.dirname(fixture.bare)),
        '/etc/ssl/certs/ca-certificates.crt:/etc/drydock/extra-ca.pem:ro',
      ],
      flags: privileges.flags,
      args: ['worker'],
    });
  }
  serveUrl = `http://127.0.0.1:${httpPort}`;
  await until('drydock serve ready', async () => ((await fetch(`${serveUrl}/readyz`)).ok ? 1 : undefined));
}, 900_000);

afterAll(async () => {
  for (const { name, dockerHost } of started.reverse()) {
    if (process.env.DRYDOCK_KEEP_DEPLOY) continue;
    await docker(['rm', '-f', '-v', name], dockerHost).catch(() => undefined);
  }
  // The shared mount, and any sandbox storage a failed session left mounted under it.
  if (shared && !process.env.DRYDOCK_KEEP_DEPLOY) await run('umount', ['--recursive', '--lazy', shared]);
}, 120_000);

async function api(route: string, token: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(`${serveUrl}${route}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: await response.json() };
}

test('a session through drydock serve in a container, run by a containerized worker, approved there and pushed', async () => {
  const sessionId = newSessionId('deploy');
  const created = await api('/api/sessions', TOKEN_A, {
    sessionId,
    repo: 'acme/fixture',
    task: 'say hello',
    agent: { steps: [{ run: 'echo hello >> README.md' }] },
    verify: { test: 'sh check.sh' },
  });
  expect(created.status).toBe(201);
  const waiting = await until(
    'the session awaiting approval or ended',
    async () => {
      const { body } = await api(`/api/sessions/${sessionId}`, TOKEN_B);
      return /awaiting_approval|failed|cancelled|rejected|completed/.test(body.phase) ? body : undefined;
    },
    300,
  );
  // With its error, so a failed session says why (its workers' logs go with their containers).
  expect(`${waiting.phase}${waiting.error ? `: ${waiting.error}` : ''}`).toBe('awaiting_approval');
  const approved = await api(`/api/sessions/${sessionId}/decide`, TOKEN_B, {
    decision: 'approve',
    change: waiting.pendingApproval?.change,
  });
  expect(approved).toMatchObject({ status: 200, body: { decision: 'approve', action: 'push', by: 'machine:bob' } });
  const done = await until('the session completed', async () => {
    const { body } = await api(`/api/sessions/${sessionId}`, TOKEN_B);
    return body.phase === 'completed' ? body : undefined;
  });
  expect(git(['rev-parse', `drydock/${sessionId}`], fixture.bare).trim()).toBe(done.pushed.commit);
  expect(git(['show', `drydock/${sessionId}:README.md`], fixture.bare)).toContain('hello');
}, 600_000);

test("each host's worker polls its own task queue (<queue>@<host id>) on the PostgreSQL-backed Temporal", async () => {
  for (const host of ['docker-a', 'docker-b', 'docker-c']) {
    const described = await docker([
      'exec',
      `${PREFIX}-temporal`,
      'temporal',
      'task-queue',
      'describe',
      '--address',
      temporalAddress,
      '--task-queue',
      `${PREFIX}@${host}`,
      '-o',
      'json',
    ]);
    // docker-c runs no worker: the check can tell a polled queue from an idle one.
    expect(`${host}: ${/"identity":\s*"[^"]+"/.test(described)}`).toBe(`${host}: ${host !== 'docker-c'}`);
  }
});
