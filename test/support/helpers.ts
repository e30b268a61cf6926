/** Shared test fixtures: git repos, workers, session ids, waiting on phases, approving. */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client, type WorkflowHandle, type WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import Docker from 'dockerode';
import { Pool } from 'pg';
import { loadConfig, type Config } from '../../platform/config';
import {
  connectClient as connectTemporalClient,
  connectWorker,
  TemporalConnectionError,
} from '../../platform/temporal-connection';
import { createLogger, type Logger } from '../../platform/log';
import { loadAuditKey } from '../../store/audit';
import { LABELS } from '../../sandbox/provider';
import { startServer } from '../../workers/serve';
import { createWorker, hostQueueOf, type DrydockWorker } from '../../workers/worker';
import type { Reaped } from '../../sandbox/contract';
import {
  decide,
  OUTCOMES,
  status,
  WORKFLOW_TYPE,
  type GatedAction,
  type DecideInput,
  type Phase,
  type SessionStatus,
} from '../../workflows/api';
import type { SessionInputDraft } from '../../workflows/input';
import { explain } from './waits';
import { ServeLog } from './page-answers';
import { startFakeProviders, type FakeProviders } from './fake-providers';

export const docker = new Docker();
export const projectRoot = path.resolve(__dirname, '..', '..');

export { freePort, temporalPorts } from './ports';

/** A fresh id per test, under this run's prefix (the teardown looks for leaks by it). */
export function newSessionId(name: string): string {
  return `${process.env.DRYDOCK_TEST_RUN}-${name}-${randomBytes(3).toString('hex')}`;
}

export function git(args: string[], cwd?: string): string {
  return execFileSync('git', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

export interface FixtureRepo {
  /** `file://` URL of the bare repo. */
  url: string;
  bare: string;
  /** Writes the files in the work tree, commits and pushes to main; resolves with the commit. */
  commit(files: Record<string, string>, message?: string): Promise<string>;
}

/**
 * An empty bare repo (the "remote", its ref updates logged so a test can count
 * pushes) and a work tree that commits to it.
 */
async function newRepo(prefix: string): Promise<FixtureRepo> {
  const dir = await mkdtemp(path.join(tmpdir(), prefix));
  const bare = path.join(dir, 'remote.git');
  const work = path.join(dir, 'work');
  git(['init', '--quiet', '--bare', '--initial-branch=main', bare]);
  git(['config', 'core.logAllRefUpdates', 'always'], bare);
  git(['init', '--quiet', '--initial-branch=main', work]);
  const commit = async (files: Record<string, string>, message = 'change') => {
    for (const [file, content] of Object.entries(files)) {
      await mkdir(path.dirname(path.join(work, file)), { recursive: true });
      await writeFile(path.join(work, file), content);
    }
    git(['add', '.'], work);
    git(['-c', 'user.name=fixture', '-c', 'user.email=f@x', 'commit', '--quiet', '-m', message], work);
    git(['push', '--quiet', bare, 'main'], work);
    return git(['rev-parse', 'HEAD'], work).trim();
  };
  return { url: `file://${bare}`, bare, commit };
}

/** A repo holding one commit on main: README.md and a `check.sh` test script, and any `extra` files. */
export async function makeFixtureRepo(extra: Record<string, string> = {}): Promise<FixtureRepo> {
  const repo = await newRepo('drydock-repo-');
  await repo.commit(
    { 'README.md': '# fixture\n', 'check.sh': '#!/bin/sh\ngrep -q "hello" README.md\n', ...extra },
    'initial',
  );
  return repo;
}

/**
 * A repo holding a small web app (node, no dependencies): `node server.js`
 * serves "/" (a heading "Hello drydock"), "/about" (a large red block), and
 * "/broken" (a console error and a missing image); PORT defaults to 3000.
 */
export async function makeWebAppRepo(): Promise<FixtureRepo> {
  const repo = await newRepo('drydock-webapp-');
  await repo.commit({ 'server.js': WEB_APP }, 'web app');
  return repo;
}

const WEB_APP = `const http = require('node:http');
const pages = {
  '/': '<h1 id="title">Hello drydock</h1><p>Welcome aboard.</p>',
  '/about': '<h1>About</h1><p style="background:#c00;color:#fff;height:400px">A red page about us.</p>',
  '/broken': '<h1>Broken</h1><img src="/missing.png"><script>console.error("widget failed to load")</script>',
};
http
  .createServer((req, res) => {
    const body = pages[req.url];
    res.writeHead(body ? 200 : 404, { 'content-type': 'text/html' });
    res.end(body ? '<!doctype html><title>fixture</title>' + body : 'not found');
  })
  .listen(process.env.PORT || 3000, '127.0.0.1', () => console.log('listening'));
`;

/** Whether a bare repo has this branch (a push reached it). */
export function remoteHasBranch(bare: string, branch: string): boolean {
  try {
    git(['rev-parse', '--verify', '--quiet', `refs/heads/${branch}`], bare);
    return true;
  } catch {
    return false;
  }
}

/** The audit key of the run's workers and CLI (global-setup writes it). */
export const testAuditKey = (): Buffer => loadAuditKey(testConfig());

/** Test configuration: the dev server of global-setup, a task queue of the caller's choosing. */
export function testConfig(overrides: Partial<Config> = {}): Config {
  return { ...loadConfig(), DRYDOCK_DATA_DIR: path.join(process.env.DRYDOCK_TEST_DIR!, 'data'), ...overrides };
}

export interface TestStack {
  client: Client;
  config: Config;
  stop(): Promise<void>;
}

/**
 * The SDK's own log lines only for errors, so test output stays readable: its warnings are
 * mostly the activity failures the tests cause on purpose, each with a stack.
 */
export function quietSdkLogs(): void {
  try {
    Runtime.install({ logger: new DefaultLogger('ERROR') });
  } catch {
    // already installed in this process
  }
}

/** An in-process worker on its own task queue, and a client. */
export async function startStack(overrides: Partial<Config> = {}, log?: Logger): Promise<TestStack> {
  quietSdkLogs();
  const taskQueue = `q-${randomBytes(4).toString('hex')}`;
  const config = testConfig({ DRYDOCK_TASK_QUEUE: taskQueue, DRYDOCK_HOST_ID: `h-${taskQueue}`, ...overrides });
  const connection = await connectWorker(config);
  const worker: DrydockWorker = await createWorker({
    config,
    connection,
    log: log ?? createLogger(config.LOG_LEVEL),
    workflowBundle: { code: await readFile(process.env.DRYDOCK_TEST_BUNDLE!, 'utf8') },
  });
  const running = worker.run();
  const client = await connectPatiently(config);
  return {
    client,
    config,
    async stop() {
      worker.shutdown();
      await running;
      await connection.close();
      await client.connection.close();
    },
  };
}

/** The model stand-in and a stack whose worker sends every agent CLI's model calls to it through the gateway. */
export interface CliStack {
  fake: FakeProviders;
  stack: TestStack;
  stop(): Promise<void>;
}

/**
 * The agent CLIs' tests' setup: the stand-in of every protocol, demanding
 * `key`, as the worker's Anthropic endpoint (Claude Code) and its OpenAI one
 * (Codex, opencode), with `extra` settings.
 */
export async function startCliStack(key: string, extra: Partial<Config> = {}): Promise<CliStack> {
  const fake = await startFakeProviders({ apiKey: key });
  const stack = await startStack({
    DRYDOCK_ANTHROPIC_BASE_URL: fake.url,
    DRYDOCK_ANTHROPIC_API_KEY: key,
    DRYDOCK_MODEL_BASE_URL: fake.baseUrl,
    DRYDOCK_MODEL_API_KEY: key,
    ...extra,
  }).catch(async (err: unknown) => {
    await fake.close();
    throw err;
  });
  return {
    fake,
    stack,
    async stop() {
      await stack.stop();
      await fake.close();
    },
  };
}

/** Settings for a plain connection to `address` (default namespace, no auth). */
export const clientSettings = (address: string) => ({
  TEMPORAL_ADDRESS: address,
  TEMPORAL_NAMESPACE: 'default',
  temporalAuth: {},
});

/** A client of the suite's Temporal server (or of `address`); close it with `client.connection.close()`. */
export async function connectClient(address = process.env.TEMPORAL_ADDRESS!): Promise<Client> {
  return connectPatiently(clientSettings(address));
}

/**
 * A client connection, tried again for up to a minute: the product gives up after 5 s (a person
 * waits on it), but a lane's dev server on a busy 2-core machine once did not answer for that
 * long (session 26, between two files), and a whole file failed in its first hook.
 */
async function connectPatiently(settings: Parameters<typeof connectTemporalClient>[0]): Promise<Client> {
  const since = Date.now();
  for (;;) {
    try {
      return await connectTemporalClient(settings);
    } catch (err) {
      if (!(err instanceof TemporalConnectionError) || Date.now() - since > 60_000) throw err;
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
  }
}

/** Starts an agentSession on the task queue of `config` (a test stack's, or a worker process's env). */
export function startSession(
  stack: { client: Client; config: Pick<Config, 'DRYDOCK_TASK_QUEUE'> },
  sessionId: string,
  input: SessionInputDraft | Record<string, unknown>,
): Promise<WorkflowHandleWithFirstExecutionRunId> {
  return stack.client.workflow.start(WORKFLOW_TYPE, {
    workflowId: sessionId,
    taskQueue: stack.config.DRYDOCK_TASK_QUEUE,
    args: [input],
  });
}

/** A scripted session input on the repo at `url`: one shell step per command. */
export function scriptedSession(
  url: string,
  task: string,
  run: string | string[],
  extra: Record<string, unknown> = {},
) {
  return { repo: { url }, task, agent: { steps: [run].flat().map((command) => ({ run: command })) }, ...extra };
}

/** Ends the sessions a file started (cancels those still running) and waits for each to close. */
export async function endSessions(client: Client, ids: string[]): Promise<void> {
  for (const id of ids) {
    const handle = client.workflow.getHandle(id);
    if ((await handle.describe().catch(() => undefined))?.status.name === 'RUNNING') await handle.cancel();
    await handle.result().catch(() => undefined);
  }
}

/**
 * Polls the status query until `until` holds; fails with the last status and the
 * workflow's state after `timeoutMs`, or as soon as the session has ended without
 * it (a failed session is not waited on until a time-out hides why it failed).
 */
export async function waitForStatus(
  handle: WorkflowHandle,
  until: (s: SessionStatus) => boolean,
  timeoutMs = 60_000,
): Promise<SessionStatus> {
  const deadline = Date.now() + timeoutMs;
  let last: SessionStatus | undefined;
  for (;;) {
    last = await handle.query(status).catch(() => last);
    if (last && until(last)) return last;
    const ended = !!last && (OUTCOMES as readonly string[]).includes(last.phase) && (await hasClosed(handle));
    if (ended) {
      last = await handle.query(status).catch(() => last); // its final status
      if (until(last!)) return last!;
    }
    if (ended || Date.now() > deadline) {
      const why = ended ? `the session ended ${last!.phase}` : `not within ${timeoutMs / 1000}s`;
      throw new Error(
        `status never matched (${why}); last: ${JSON.stringify(last, null, 1)}\n${await explain(handle)}`,
      );
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

const hasClosed = (handle: WorkflowHandle) =>
  handle.describe().then(
    (d) => d.status.name !== 'RUNNING',
    () => false,
  );

/** Polls `read` until `ready` holds; fails with what it waited for and the last value read after `ms`. */
export async function pollUntil<T>(
  read: () => Promise<T>,
  ready: (t: T) => boolean,
  what: string,
  ms: number,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const now = await read().catch(() => undefined);
    if (now !== undefined && ready(now)) return now;
    if (Date.now() > deadline) throw new Error(`never: ${what}; last: ${JSON.stringify(now)?.slice(0, 3000)}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Every run of a workflow id as visibility lists them, once none is listed running (it lags a result). */
export function closedRunsOf(client: Client, workflowId: string): Promise<{ runId: string; status: string }[]> {
  const list = async () => {
    const found: { runId: string; status: string }[] = [];
    for await (const wf of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) {
      found.push({ runId: wf.runId, status: wf.status.name });
    }
    return found;
  };
  return pollUntil(
    list,
    (runs) => runs.every((r) => r.status !== 'RUNNING'),
    `the runs of ${workflowId} closed`,
    30_000,
  );
}

/** Waits for the running workflows a schedule started (a snapshot build ready in the registry still tears down). */
export async function scheduledRunsEnded(client: Client, scheduleId: string): Promise<void> {
  const running = client.workflow.list({
    query: `TemporalScheduledById = '${scheduleId}' AND ExecutionStatus = 'Running'`,
  });
  for await (const wf of running) await client.workflow.getHandle(wf.workflowId).result();
}

/**
 * Shell that waits, in a sandbox, until the test says go (`touch /tmp/go` there), at most 2 minutes:
 * a step that must still run while the test looks at it, however slow the machine.
 */
export const GO_GATE = 'for i in $(seq 600); do [ -e /tmp/go ] && break; sleep 0.2; done';
/** Shell that waits (at most 10 s) until something listens on 127.0.0.1:3128 (/proc/net/tcp: 0C38, state 0A). */
export const LISTENING_3128 =
  "for i in $(seq 100); do grep -q ':0C38 00000000:0000 0A' /proc/net/tcp && break; sleep 0.1; done";

export const inPhase = (phase: Phase) => (s: SessionStatus) => s.phase === phase;

/** The arguments of the `decide` update that approves `action` as `by` (bound to `change` when given). */
export const approveAs = (by: string, action: GatedAction, change?: string): { args: [DecideInput] } => ({
  args: [{ decision: 'approve', action, by, ...(change ? { change } : {}) }],
});

/** Waits for the push to await approval, approves it as `by`, and resolves with the final status. */
export async function approvePush(handle: WorkflowHandle, by = 'alice', timeoutMs = 120_000): Promise<SessionStatus> {
  await waitForStatus(handle, inPhase('awaiting_approval'), timeoutMs);
  await handle.executeUpdate(decide, approveAs(by, 'push'));
  return (await handle.result()) as SessionStatus;
}

/** Runs the reaper of the stack's host once, as its schedule would. */
export function runReaper(stack: TestStack): Promise<Reaped[]> {
  return stack.client.workflow.execute('reapSandboxes', {
    workflowId: newSessionId('reap'),
    taskQueue: stack.config.DRYDOCK_TASK_QUEUE,
    args: [{ hostQueue: hostQueueOf(stack.config) }],
  });
}

/** Containers (any state) of a session. */
/** The `data` of a session's audit rows of one kind, in order (the test database, DATABASE_URL). */
export async function auditData(sessionId: string, kind: string): Promise<Record<string, unknown>[]> {
  const pool = new Pool({ connectionString: process.env.DATABASE_URL });
  const { rows } = await pool
    .query('select data from audit_events where session_id = $1 and kind = $2 order by seq', [sessionId, kind])
    .finally(() => pool.end());
  return rows.map((r: { data: Record<string, unknown> }) => r.data);
}

export async function containersOf(sessionId: string): Promise<Docker.ContainerInfo[]> {
  return docker.listContainers({ all: true, filters: { label: [`${LABELS.session}=${sessionId}`] } });
}

/** Runs the drydock CLI; resolves with its exit code and output. */
export function runCli(
  args: string[],
  env: Record<string, string>,
  stdin = '',
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(path.join(projectRoot, 'bin', 'drydock'), args, { env: { ...process.env, ...env } });
    child.stdin.on('error', () => undefined); // a CLI that ends before reading it (EPIPE): its exit code says why
    child.stdin.end(stdin);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

/** `drydock serve` in-process on a free port, against the stack's Temporal and task queue. */
export async function startServe(
  stack: TestStack,
  overrides: Partial<Config> = {},
): Promise<{ url: string; config: Config; log: ServeLog; close(): Promise<void> }> {
  const config = { ...stack.config, DRYDOCK_HTTP_HOST: '127.0.0.1', DRYDOCK_HTTP_PORT: 0, ...overrides };
  // Its log is kept, so a wait on a page that runs out can say what the server did (page-answers.ts).
  const log = new ServeLog(config.LOG_LEVEL);
  const server = await startServer({ config, client: stack.client, log: log.logger });
  return { url: server.url, config, log, close: () => server.close() };
}

/**
 * A bare repo prepared for snapshots: a lockfile, and `.drydock/setup.sh`
 * that leaves a marker in node_modules (ignored by git) counting its runs and
 * copying the lockfile it installed. `commit` pushes a change to main.
 */
export async function makeSnapshotRepo(setupScript = DEFAULT_SETUP): Promise<FixtureRepo> {
  const repo = await newRepo('drydock-snaprepo-');
  await repo.commit(
    {
      'README.md': '# app\n',
      '.gitignore': 'node_modules/\n',
      'package-lock.json': '{ "lockfileVersion": 3, "generation": 1 }\n',
      '.drydock/setup.sh': setupScript,
    },
    'initial',
  );
  return repo;
}

/** Setup that proves whether it ran: one line per run in node_modules/.drydock/setup-runs. */
export const DEFAULT_SETUP = `set -e
mkdir -p node_modules/.drydock
echo "run at $(git rev-parse HEAD)" >> node_modules/.drydock/setup-runs
cp package-lock.json node_modules/.drydock/installed-lock
`;

/**
 * The embedded PGlite database of a fresh data dir, served by a child process
 * (test/support/pglite-server.ts) and opened here through its port file, with `pg`.
 * The data dir starts as a copy of a migrated one (embeddedTemplate): a new one's
 * initdb and migrations took 10 to 14 s on a busy machine, and over the 60 s a
 * file's set-up allows in the load check (npm run test:load); a copy starts in a third of that.
 */
export async function openEmbeddedDatabase(): Promise<import('../../store/db').Database & { dataDir: string }> {
  const { openDatabase } = await import('../../store/db');
  const dataDir = await mkdtemp(path.join(tmpdir(), 'drydock-pglite-'));
  await cp(await embeddedTemplate(), dataDir, { recursive: true });
  const server = await servePglite(dataDir);
  const db = await openDatabase({ DRYDOCK_DATA_DIR: dataDir, DATABASE_URL: undefined });
  return {
    ...db,
    /** The data dir whose pglite.port names the server: a config with it reaches the same database. */
    dataDir,
    async close() {
      await db.close();
      await stopPglite(server);
    },
  };
}

/** pglite-server.ts on a data dir, once it says it is ready. */
async function servePglite(dataDir: string): Promise<ChildProcess> {
  const server = spawn(path.join(projectRoot, 'node_modules', '.bin', 'tsx'), [
    path.join(__dirname, 'pglite-server.ts'),
    dataDir,
  ]);
  server.stderr.pipe(process.stderr);
  await new Promise<void>((resolve, reject) => {
    server.stdout.on('data', (c: Buffer) => c.toString().includes('ready') && resolve());
    server.once('exit', (code) => reject(new Error(`pglite-server exited with ${code}`)));
  });
  return server;
}

/** Closes the server's database cleanly (it stops when its stdin closes). */
async function stopPglite(server: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => server.once('exit', resolve));
  server.stdin!.end();
  await exited;
}

let template: Promise<string> | undefined;

/**
 * A PGlite data dir migrated to this checkout's store/migrations and closed, made
 * once in data/test-cache (named by the migrations' and PGlite's hash), which
 * openEmbeddedDatabase copies: the copy starts with neither initdb nor migrations.
 */
function embeddedTemplate(): Promise<string> {
  return (template ??= (async () => {
    const migrations = path.join(projectRoot, 'store', 'migrations');
    const hash = createHash('sha256');
    for (const name of (await readdir(migrations)).sort()) {
      hash.update(name).update(await readFile(path.join(migrations, name)));
    }
    hash.update(await readFile(path.join(projectRoot, 'node_modules', '@electric-sql', 'pglite', 'package.json')));
    const dir = path.join(projectRoot, 'data', 'test-cache', `pglite-${hash.digest('hex').slice(0, 16)}`);
    if (existsSync(dir)) return dir;
    await mkdir(path.dirname(dir), { recursive: true });
    // Those made for earlier migrations are not needed again (one being made is left to its maker).
    const earlier = (n: string) => /^pglite-[0-9a-f]{16}$/.test(n) && n !== path.basename(dir);
    for (const old of (await readdir(path.dirname(dir))).filter(earlier)) {
      await rm(path.join(path.dirname(dir), old), { recursive: true, force: true });
    }
    const making = await mkdtemp(`${dir}-making-`);
    await stopPglite(await servePglite(making));
    await rm(path.join(making, 'pglite.port'), { force: true });
    // Another jest worker may have made it meanwhile: then its copy is kept and this one dropped.
    await rename(making, dir).catch(() => rm(making, { recursive: true, force: true }));
    return dir;
  })());
}
