/**
 * Full-stack sandboxes on real Temporal, Docker, git and PostgreSQL: a repo
 * whose tests need PostgreSQL 17 and Redis (images built here from Debian's
 * packages), declared in .drydock/config.yaml or through a dev container's
 * compose file. Setup's migration is in the snapshot; every session starts
 * from its own copy of it and none sees another's writes; a service killed
 * mid-session is named and the sandbox is replaced with its services, also while
 * drydock's own PostgreSQL is down; a replacement's database comes back with what the
 * session wrote into it up to its last checkpoint.
 */
import { chmod, mkdtemp, writeFile } from 'node:fs/promises';
import { PassThrough } from 'node:stream';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { addRepo } from '../../cli/snapshots';
import { ensureServiceImage } from '../../sandbox-images/service-images';
import { DockerServices, serviceContainerName } from '../../sandbox/docker/services';
import { SandboxStorageRoot } from '../../sandbox/docker/storage';
import { SnapshotRegistry } from '../../sandbox/snapshots';
import { openDatabase, type Database } from '../../store/db';
import type { SessionStatus } from '../../workflows/api';
import {
  containersOf,
  docker,
  freePort,
  makeFixtureRepo,
  newSessionId,
  pollUntil,
  scriptedSession,
  startServe,
  startSession,
  startStack,
  waitForStatus,
  type TestStack,
} from '../support/helpers';
import { chromium } from 'playwright-core';
import { inSandbox } from '../support/docker';
import { personalTokens } from '../support/identity';
import { PostgresServer } from '../support/postgres';
import {
  composeAsWritten,
  composeServices,
  configServices,
  PG_CLIENT,
  PG_READY,
  REDIS_CLIENT,
} from '../support/service-clients';
import { buildSnapshot, removeSnapshots } from '../support/snapshots';
import { startFakeProviders, toolResults, type FakeProviders } from '../support/fake-providers';

let stack: TestStack;
let model: FakeProviders;
let db: Database;
let snapshots: SnapshotRegistry;
let images: { postgres: string; redis: string };
const repos: string[] = [];
const MODEL_KEY = 'sk-fake-services';

beforeAll(async () => {
  images = { postgres: await ensureServiceImage('postgres'), redis: await ensureServiceImage('redis') };
  model = await startFakeProviders({ apiKey: MODEL_KEY });
  stack = await startStack({
    DRYDOCK_MODEL_BASE_URL: model.baseUrl,
    DRYDOCK_MODEL_API: 'anthropic',
    DRYDOCK_MODEL_API_KEY: MODEL_KEY,
  });
  db = await openDatabase(stack.config);
  snapshots = new SnapshotRegistry(db.pool);
}, 600_000);
afterAll(async () => {
  if (stack) await removeSnapshots(stack, repos);
  await db?.close();
  await stack?.stop();
  await model?.close();
});

/** A registered repo with the two clients and `files`, and its snapshot, built. */
async function snapshotOf(files: Record<string, string>, on: TestStack = stack) {
  const repo = await makeFixtureRepo({ 'pgq.js': PG_CLIENT, 'redisq.js': REDIS_CLIENT, ...files });
  repos.push(repo.url);
  await addRepo(on.client, on.config, repo.url, { every: '1h' });
  const built = await buildSnapshot(on, repo.url);
  expect(built).toMatchObject({ status: 'ready' });
  return { repo, built };
}

/** Runs a scripted session to its end; returns its final status and step outputs, and checks nothing is left. */
async function session(name: string, url: string, steps: string[]) {
  const id = newSessionId(name);
  const handle = await startSession(stack, id, scriptedSession(url, name, steps));
  await handle.result().catch(() => undefined);
  expect(await containersOf(id)).toHaveLength(0);
  const final: SessionStatus = await handle.query('status');
  const output = (n: number) =>
    (final.timeline.filter((t) => t.name.startsWith(`step ${n}`)).at(-1)?.outputTail ?? '').trim();
  return { id, final, output };
}

/**
 * The snapshot of a repo with `config` as its .drydock/config.yaml, built once for this file:
 * the tests that are about a session on it, not about its build, share it (every session
 * starts from its own copy of the snapshot's data).
 */
const shared = new Map<string, ReturnType<typeof snapshotOf>>();
function sharedSnapshotOf(config: string): ReturnType<typeof snapshotOf> {
  let built = shared.get(config);
  if (!built) {
    built = snapshotOf({ '.drydock/config.yaml': config });
    built.catch(() => shared.delete(config));
    shared.set(config, built);
  }
  return built;
}

const QUERY = 'node pgq.js "select name from items order by name" && node redisq.js GET greeting';
const WRITE = `node pgq.js "insert into items values ('written')" && node redisq.js SET greeting written`;

async function everySessionStartsFromTheSnapshot(url: string) {
  // Two sessions at once: each sees setup's data, writes its own, and never the other's.
  const [a, b] = await Promise.all([
    session('svc-a', url, [QUERY, WRITE, QUERY]),
    session('svc-b', url, [QUERY, 'sleep 1', QUERY]),
  ]);
  // A failure says in the test's output why: its error and its timeline with each step's output.
  const story = (s: typeof a) =>
    s.final.phase === 'completed' || s.final.timeline.map((t) => `${t.name}: ${t.outputTail ?? t.detail ?? ''}`);
  for (const s of [a, b])
    expect([s.id, s.final.phase, s.final.error, story(s)]).toEqual([s.id, 'completed', undefined, true]);
  expect(a.output(1)).toBe('seeded\nseeded');
  expect(a.output(3)).toBe('seeded\nwritten\nwritten');
  expect(b.output(3)).toBe('seeded\nseeded');
  // A later session starts from the snapshot again, not from anything a session wrote.
  const c = await session('svc-c', url, [QUERY]);
  expect(c.output(1)).toBe('seeded\nseeded');
}

test('PostgreSQL 17 and Redis declared in .drydock/config.yaml: setup migrates once, every session gets its own copy', async () => {
  const { built } = await sharedSnapshotOf(configServices(images));
  const row = (await snapshots.build(built.buildId))!;
  expect(row.services).toEqual([
    { name: 'db', image: images.postgres, dataImage: expect.stringMatching(/^drydock-data-.*:db$/) },
    { name: 'cache', image: images.redis, dataImage: expect.stringMatching(/^drydock-data-.*:cache$/) },
  ]);
  expect(row.setupSource).toBe('.drydock/config.yaml');
  await everySessionStartsFromTheSnapshot(built.repo);
}, 600_000);

test('the same through a dev container with a compose file (dockerComposeFile, service, runServices)', async () => {
  const dev = process.env.DRYDOCK_BASE_IMAGE!;
  const { built } = await snapshotOf(composeServices({ ...images, dev }));
  expect((await snapshots.build(built.buildId))!.services?.map((s) => s.name)).toEqual(['db', 'cache']);
  await everySessionStartsFromTheSnapshot(built.repo);
}, 600_000);

test('a compose stack as written: the database by its service name, an init SQL file and a secret from the repo, env_files, two files, a profile left out', async () => {
  const dev = process.env.DRYDOCK_BASE_IMAGE!;
  const { built } = await snapshotOf(composeAsWritten({ postgres: images.postgres, dev }));
  expect((await snapshots.build(built.buildId))!.services?.map((s) => s.name)).toEqual(['db']);
  const s = await session('svc-compose', built.repo, [
    'echo "$DB_HOST:$DB_PORT" && getent hosts db database app',
    'node pgq.js "select name from items order by name"',
  ]);
  expect(s.final.phase).toBe('completed');
  expect(s.output(1).split(/\s+/)).toEqual(['db:5432', '127.0.0.1', 'db', '127.0.0.1', 'database', '127.0.0.1', 'app']);
  expect(s.output(2)).toBe('database is 127.0.0.1\nfrom init.sql\nsecret s3cret');
}, 600_000);

/** Starts a session whose first step lasts `seconds`, and kills its database service while that step runs. */
async function killServiceInStep1(on: TestStack, url: string, name: string, seconds: number) {
  const id = newSessionId(name);
  const handle = await startSession(
    on,
    id,
    scriptedSession(url, name, [`node pgq.js "select 1" && touch /tmp/up && sleep ${seconds}`, QUERY]),
  );
  // Kill the database while step 1 runs: the step ends, the service is found dead, the sandbox goes.
  const first = await waitForStatus(handle, (s) => s.phase === 'agent' && Boolean(s.sandbox), 120_000);
  const db = serviceContainerName(first.sandbox!.name, 'db');
  await pollUntil(
    async () => (await docker.getContainer(db).inspect()).State.Running,
    (running) => running === true,
    `${db} running`,
    60_000,
  );
  // Past the step's own query, so the step ends by its sleep, not by the kill.
  await pollUntil(
    () => inSandbox(first.sandbox!.name, 'test -f /tmp/up && echo up'),
    (out) => out.includes('up'),
    'step 1 past its query',
    60_000,
  );
  await docker.getContainer(db).kill();
  return { id, handle };
}

/** pgq.js that connects to the Unix socket PGSOCK names when set (else TCP, as pgq.js). */
const PG_SOCKET_CLIENT = PG_CLIENT.replace(
  "net.connect(5432, '127.0.0.1',",
  "net.connect(process.env.PGSOCK ? { path: process.env.PGSOCK } : { port: 5432, host: '127.0.0.1' },",
);

test("drydock/postgres:17 as the docs write it: command [postgres, -c, …] is honoured, and its socket folder is the sandbox's too", async () => {
  expect(images.postgres).toBe('drydock/postgres:17');
  const config = `setup: node pgq.js "create table items (name text); insert into items values ('seeded')"
services:
  db:
    image: drydock/postgres:17
    environment: { POSTGRES_HOST_AUTH_METHOD: trust, POSTGRES_DB: app }
    command: [postgres, -c, max_connections=50]
    data: [/var/lib/postgresql/data]
    healthcheck: { test: "${PG_READY}", interval: 200ms, retries: 600 }
`;
  const { built } = await snapshotOf({ '.drydock/config.yaml': config, 'pgq.js': PG_SOCKET_CLIENT });
  const { final, output } = await session('svc-contract', built.repo, [
    'node pgq.js "show max_connections"',
    'PGSOCK=/var/run/postgresql/.s.PGSQL.5432 node pgq.js "select name from items"',
    'ls -A /var/run/postgresql/ | grep -c "s.PGSQL.5432"',
    'PGSOCK=/tmp/.s.PGSQL.5432 node pgq.js "select count(*) from items"',
  ]);
  // Step 2 over the Unix socket, no host given; step 3 sees the socket and its lock file; step 4
  // reaches it where PostgreSQL's own default puts it.
  expect([final.phase, final.error, [1, 2, 3, 4].map(output)]).toEqual([
    'completed',
    undefined,
    ['50', 'seeded', '2', '1'],
  ]);
}, 600_000);

test("the image's entrypoint contract: a command of flags, init .sql and .sh files at the first start, any other command as it is", async () => {
  const init = await mkdtemp(path.join(tmpdir(), 'drydock-initdb-'));
  await writeFile(
    path.join(init, '10-schema.sql'),
    "create table seeded (v text); insert into seeded values ('from sql');\n",
  );
  await writeFile(
    path.join(init, '20-more.sh'),
    `psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -qc "insert into seeded values ('from sh')"\n`,
  );
  await chmod(init, 0o755);
  const name = `drydock-pg-contract-${Date.now().toString(36)}`;
  const container = await docker.createContainer({
    name,
    Image: images.postgres,
    // A port of its own, as the deployment's PostgreSQL is run: init scripts that name no port still reach
    // the init server (the official image's contract; deployment-run failed without it).
    Cmd: ['-c', 'max_connections=42', '-p', '5433'],
    Env: ['POSTGRES_HOST_AUTH_METHOD=trust', 'POSTGRES_DB=app'],
    HostConfig: { NetworkMode: 'none', Binds: [`${init}:/docker-entrypoint-initdb.d:ro`] },
  });
  try {
    await container.start();
    const psql = async (sql: string) =>
      (await inSandbox(name, `psql -U postgres -d app -p 5433 -tAc "${sql}"`, 'postgres')).trim();
    const logs = async () => (await container.logs({ stdout: true, stderr: true })).toString();
    await pollUntil(logs, (l) => /init done; starting postgres/.test(l), 'the first start', 120_000);
    await pollUntil(
      () => psql('show max_connections'),
      (out) => out === '42',
      'max_connections',
      60_000,
    );
    expect(await psql('select v from seeded order by v')).toBe('from sh\nfrom sql');
    expect(await logs()).toMatch(/running \/docker-entrypoint-initdb\.d\/10-schema\.sql/);
  } finally {
    await container.remove({ force: true, v: true });
  }
  // Any other command runs as it is (here: the server's version, no init).
  const version = await docker.run(images.postgres, ['postgres', '--version'], new PassThrough(), {
    HostConfig: { NetworkMode: 'none', AutoRemove: true },
  });
  expect(version[0].StatusCode).toBe(0);
}, 300_000);

test("a service paused for its data's copy is not named unhealthy (the engine says so of any paused container, and after it until its next check)", async () => {
  const sandbox = `drydock-${newSessionId('svc-paused')}`;
  const container = await docker.createContainer({
    name: serviceContainerName(sandbox, 'cache'),
    Image: images.redis,
    // Checks 3 s apart: the moment after the unpause, before the next check, is long enough to read.
    Healthcheck: { Test: ['CMD', 'redis-cli', 'ping'], Interval: 3e9, Retries: 3 },
    HostConfig: { NetworkMode: 'none' },
  });
  const services = new DockerServices(
    docker,
    new SandboxStorageRoot(docker, await mkdtemp(path.join(tmpdir(), 'svc-'))),
  );
  try {
    await container.start();
    await pollUntil(
      () => services.state(sandbox, 'cache'),
      (s) => s?.health === 'healthy',
      'healthy',
      60_000,
    );
    await container.pause();
    // What a step's service check reads while keepServiceData copies: Docker's own status is "unhealthy".
    expect((await container.inspect()).State.Health?.Status).toBe('unhealthy');
    expect(await services.state(sandbox, 'cache')).toMatchObject({ running: true, health: 'starting' });
    await container.unpause();
    // Running again, and the engine still says "unhealthy" (no check has run since): no check failed.
    expect((await container.inspect()).State.Health).toMatchObject({ Status: 'unhealthy', FailingStreak: 0 });
    expect(await services.state(sandbox, 'cache')).toMatchObject({ running: true, health: 'starting' });
    await pollUntil(
      () => services.state(sandbox, 'cache'),
      (s) => s?.health === 'healthy',
      'healthy again',
      60_000,
    );
  } finally {
    await container.remove({ force: true, v: true });
  }
}, 180_000);

test('a service killed mid-session is named, and the sandbox is replaced with its services and their data', async () => {
  const { repo } = await sharedSnapshotOf(configServices(images));
  // 10 s: the kill lands after a poll's docker exec, seconds on a busy machine (the replacement runs step 1 again).
  const { id, handle } = await killServiceInStep1(stack, repo.url, 'svc-killed', 10);
  const final: SessionStatus = await handle.result();
  expect(final.phase).toBe('completed');
  const replaced = final.timeline.find((t) => t.name.startsWith('re-provision'));
  expect(replaced?.name).toMatch(/service db exited \(code 137/);
  expect(
    final.timeline
      .filter((t) => t.name.startsWith('step 2'))
      .at(-1)
      ?.outputTail?.trim(),
  ).toBe('seeded\nseeded');
  expect(await containersOf(id)).toHaveLength(0);
}, 600_000);

test("the sandbox killed after a checkpoint: the replacement's database has what the session wrote before it", async () => {
  const { repo } = await sharedSnapshotOf(configServices({ postgres: images.postgres }));
  const id = newSessionId('svc-kept');
  const handle = await startSession(
    stack,
    id,
    scriptedSession(repo.url, 'svc-kept', [
      `node pgq.js "insert into items values ('written')"`,
      // Killed while this runs (after step 1's checkpoint); in the replacement it runs again.
      'touch /tmp/up && sleep 15',
      'node pgq.js "select name from items order by name"',
    ]),
  );
  const first = await waitForStatus(handle, (s) => s.timeline.some((t) => t.name.startsWith('step 2')), 180_000);
  const lost = first.sandbox!.name;
  await pollUntil(
    () => inSandbox(lost, 'test -f /tmp/up && echo up'),
    (out) => out.includes('up'),
    'step 2 running',
    60_000,
  );
  await docker.getContainer(lost).kill();
  const final: SessionStatus = await handle.result();
  expect(final.phase).toBe('completed');
  const replaced = final.timeline.find((t) => t.name.startsWith('re-provision'));
  expect(replaced?.detail).toMatch(/from the checkpoint after step-1 with the data of db$/);
  expect(final.sandbox!.name).not.toBe(lost);
  const step3 = final.timeline.filter((t) => t.name.startsWith('step 3')).at(-1);
  expect(step3?.outputTail?.trim()).toBe('seeded\nwritten');
  expect(await containersOf(id)).toHaveLength(0);
}, 600_000);

test("the built-in loop reads a service's log with service_logs: its last lines, plain text; an unknown name answered with the names", async () => {
  const { repo } = await sharedSnapshotOf(configServices({ postgres: images.postgres }));
  const id = newSessionId('svc-logs-tool');
  const before = model.requests.length;
  model.script([
    // An error PostgreSQL writes to its log, with an escape sequence (ESC ] … BEL) in the value it quotes.
    { toolCalls: [{ name: 'run', arguments: { command: `node pgq.js "select E'\\033]0;t\\007x'::int"; true` } }] },
    {
      toolCalls: [
        { name: 'service_logs', arguments: { service: 'db', lines: 3 } },
        { name: 'service_logs', arguments: { service: 'nope' } },
      ],
    },
    { text: 'Read the log.' },
  ]);
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'read the database log',
    agent: { kind: 'openai', model: 'fake-1' },
  });
  await handle.result().catch(() => undefined);
  const requests = model.requests.slice(before);
  expect(requests[0].tools).toContain('service_logs');
  const [db, unknown] = toolResults(requests[2]).slice(-2);
  expect(db).toContain('invalid input syntax for type integer');
  expect(db.trim().split('\n').length).toBeLessThanOrEqual(3);
  expect(db).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f]/);
  expect(unknown).toBe('error: no service "nope" in this sandbox: its logs are "db"');
  expect(await containersOf(id)).toHaveLength(0);
  await serviceLogOnTheConsole(id);
}, 600_000);

/** The session's page in a real Chromium, signed in: its service log as the last checkpoint kept it; no token, no log. */
async function serviceLogOnTheConsole(id: string) {
  const { alice } = await personalTokens('alice');
  const serve = await startServe(stack);
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-background-networking', '--disable-dev-shm-usage', '--disable-gpu'],
  });
  try {
    const page = await browser.newPage();
    await page.goto(serve.url);
    await page.fill('input[name=token]', alice);
    await page.click('button[type=submit]');
    await page.goto(`${serve.url}/sessions/${id}`);
    const log = page.locator('#service-logs pre[data-service=db]');
    expect(await log.textContent()).toContain('invalid input syntax for type integer');
    const whole = await page.locator('#service-logs a').getAttribute('href');
    expect(whole).toBe(`/artifacts/${id}/services/db.log`);
    // Signed in, the whole log kept; without a token, not a line of it (the sign-in page).
    await page.goto(`${serve.url}${whole}`);
    expect(await page.content()).toContain('invalid input syntax for type integer');
    expect(await (await fetch(`${serve.url}${whole}`)).text()).not.toContain('invalid input syntax');
  } finally {
    await browser.close();
    await serve.close();
  }
}

test("a service killed while drydock's PostgreSQL is down: the step's checkpoint waits for the store, the service is named, nothing goes unhandled", async () => {
  const server = new PostgresServer(await mkdtemp(path.join(tmpdir(), 'drydock-pg-svc-')), await freePort());
  await server.start();
  const own = await startStack({ DATABASE_URL: server.url });
  // The worker runs in this process: a rejection nobody awaited shows here.
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => void unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  try {
    const { repo } = await snapshotOf({ '.drydock/config.yaml': configServices(images) }, own);
    // 12 s, the store's outage below: the step ends while it is down wherever the kill landed in it.
    const { id, handle } = await killServiceInStep1(own, repo.url, 'svc-store-down', 12);
    // Step 1 ends with its service dead and its checkpoint unsaved: both fail that try.
    await server.stop();
    await new Promise((r) => setTimeout(r, 12_000));
    await server.start();
    const final: SessionStatus = await handle.result();
    expect(final.phase).toBe('completed');
    expect(final.timeline.find((t) => t.name.startsWith('re-provision'))?.name).toMatch(/service db exited/);
    expect(unhandled).toEqual([]);
    expect(await containersOf(id)).toHaveLength(0);
    await removeSnapshots(own, [repo.url]);
  } finally {
    process.off('unhandledRejection', onUnhandled);
    await own.stop();
    await server.stop();
  }
}, 600_000);
