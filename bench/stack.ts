/**
 * The drydock stack a benchmark measures, brought up and torn down the same
 * way every time: a Temporal dev server (headless, SQLite in memory) on a
 * free loopback port, or with BENCH_TEMPORAL=postgres the server built from Go
 * modules on its own PostgreSQL (infra/temporal-pg.sh); the embedded PGlite
 * database and the worker's state in a fresh temp folder, the sandbox base
 * image, a drydock worker on its own task queue and host id, with
 * BENCH_HOSTS=2 a second host (`drydock worker` as a process, on a second
 * Docker engine of infra/docker-host.sh), and optionally a worker for the
 * bench-only workflows (bench/workflows). `stop()` removes everything it made:
 * containers and volumes labelled with its host id, the temp folder, the
 * server. `benchMain` runs a benchmark, prints its tables and exits.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import {
  bundleWorkflowCode,
  DefaultLogger,
  NativeConnection,
  Runtime,
  Worker,
  type WorkflowBundleWithSourceMap,
} from '@temporalio/worker';
import { loadConfig, type Config } from '../platform/config';
import { createLogger } from '../platform/log';
import { LABELS } from '../sandbox';
import { ensureSearchAttributes, startDevServer } from '../platform/temporal';
import { ensureBaseImage } from '../sandbox-images/base-image';
import { createWorker, hostQueueOf } from '../workers/worker';
import { dockerHost } from '../test/support/docker-hosts';
import { freePort, projectRoot } from '../test/support/helpers';
import { startTemporalPg } from '../test/support/temporal-pg';
import { processesCpu, processTreeCpu } from './host';
import { machineInfo, say } from './table';

const run = promisify(execFile);

// ---------------------------------------------------------------- clean-up

const cleanups: (() => Promise<unknown>)[] = [];

/** Runs `fn` when the benchmark ends (last registered first), also on Ctrl-C and errors. */
export function atExit(fn: () => Promise<unknown>): void {
  cleanups.push(fn);
}

let cleaning: Promise<void> | undefined;

/** Once, however many paths (an error, a signal) ask for it; each waits for the end. */
function runCleanups(): Promise<void> {
  cleaning ??= (async () => {
    while (cleanups.length) {
      const fn = cleanups.pop()!;
      await fn().catch((err: Error) => say(`clean-up: ${err.message}`));
    }
  })();
  return cleaning;
}

/** A temp folder removed at exit. */
export async function tempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), `drydock-bench-${prefix}-`));
  atExit(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * Runs one benchmark: the machine table (unless BENCH_MACHINE=0, set by
 * bench/index.ts which prints it once), then the markdown `main` returns;
 * cleans up and exits 0, or 1 with the error.
 */
export function benchMain(title: string, main: () => Promise<string>): void {
  const started = Date.now();
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    // A second signal (the terminal's and a parent's forwarded one) must not cut the clean-up short.
    process.on(signal, () => {
      if (cleaning) return;
      say(`${signal}: cleaning up`);
      void runCleanups().finally(() => process.exit(130));
    });
  }
  // Work still in flight fails once the clean-up closes its connections: that must not end the clean-up.
  const stray = (err: unknown) => {
    say(`${cleaning ? 'during clean-up' : 'error'}: ${(err as Error)?.message ?? String(err)}`);
    if (!cleaning) void runCleanups().finally(() => process.exit(1));
  };
  process.on('uncaughtException', stray);
  process.on('unhandledRejection', stray);
  const body = async () => {
    const machine = process.env.BENCH_MACHINE === '0' ? '' : `${await machineInfo()}\n\n`;
    const text = await main();
    return `## ${title}\n\n${machine}${text}\n\n_${title}: ${Math.round((Date.now() - started) / 1000)} s in all._\n`;
  };
  void body()
    .then(
      async (text) => {
        await runCleanups();
        process.stdout.write(text);
        return 0;
      },
      async (err: Error) => {
        await runCleanups();
        console.error(`bench: ${err.stack ?? err.message}`);
        return 1;
      },
    )
    .then((code) => process.exit(code));
}

// ---------------------------------------------------------------- the stack

export { freePort };

const quiet = { trace() {}, debug() {}, info() {}, warn() {}, error: console.error, log() {} };
let sessionBundle: Promise<WorkflowBundleWithSourceMap> | undefined;
let benchBundle: Promise<WorkflowBundleWithSourceMap> | undefined;

export interface BenchStack {
  client: Client;
  config: Config;
  /** The drydock worker's shared queue (`agentSession` runs here) and its host queue. */
  taskQueue: string;
  hostQueue: string;
  /** The sandbox base image. */
  image: string;
  dataDir: string;
  /** Temporal: what it is, and readers of its CPU ms by part (the server; its PostgreSQL). */
  temporal: { name: string; cpu: Record<string, () => number> };
  /** The second host, with BENCH_HOSTS=2. */
  secondHost?: SecondHost;
  /** The queue of the bench workflows and their activities, when asked for. */
  benchQueue?: string;
  stop(): Promise<void>;
}

export interface StackOptions {
  /** Overrides of the worker's configuration (e.g. DRYDOCK_APPROVAL_REQUIRED: []). */
  config?: Partial<Config>;
  /**
   * Also run the bench workflows (bench/workflows) on a queue of their own,
   * with these activities.
   */
  benchActivities?: Record<string, (...args: any[]) => Promise<unknown>>;
  /**
   * drydock's own database (audit trail, metrics, snapshot registry):
   * "pglite", the embedded default of `npm start`, or "postgres", a
   * throwaway cluster of Debian's PostgreSQL like `npm test`'s (fsync off).
   * Default: env BENCH_DB, else "pglite".
   */
  database?: 'pglite' | 'postgres';
  /** Temporal: the CLI's dev server, or the server of infra/temporal-pg.sh. Default: env BENCH_TEMPORAL, else "dev". */
  temporal?: 'dev' | 'postgres';
  /** Docker hosts, each with its worker: 1, or 2 (needs the PostgreSQL database). Default: env BENCH_HOSTS, else 1. */
  hosts?: 1 | 2;
}

export interface SecondHost {
  hostId: string;
  /** Its engine's DOCKER_HOST and data root. */
  dockerHost: string;
  dataRoot: string;
  /** Reads the CPU ms of its worker process. */
  workerCpu: () => number;
}

export function temporalOf(opts: Pick<StackOptions, 'temporal'> = {}): 'dev' | 'postgres' {
  const t = opts.temporal ?? process.env.BENCH_TEMPORAL ?? 'dev';
  if (t !== 'dev' && t !== 'postgres') throw new Error(`BENCH_TEMPORAL: "dev" or "postgres", not "${t}"`);
  return t;
}

export function hostsOf(opts: Pick<StackOptions, 'hosts'> = {}): 1 | 2 {
  const n = opts.hosts ?? Number(process.env.BENCH_HOSTS ?? 1);
  if (n !== 1 && n !== 2) throw new Error(`BENCH_HOSTS: 1 or 2, not "${process.env.BENCH_HOSTS}"`);
  return n;
}

export function databaseOf(opts: Pick<StackOptions, 'database'> = {}): 'pglite' | 'postgres' {
  const db = opts.database ?? process.env.BENCH_DB ?? 'pglite';
  if (db !== 'pglite' && db !== 'postgres') throw new Error(`BENCH_DB: "pglite" or "postgres", not "${db}"`);
  return db;
}

/** A throwaway PostgreSQL cluster (test/support/postgres.ts); stopped and removed at exit. */
async function startPostgres(): Promise<string> {
  const { PostgresServer } = await import('../test/support/postgres');
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-bench-pg-'));
  const server = new PostgresServer(dir, await freePort());
  atExit(() => rm(dir, { recursive: true, force: true }));
  atExit(() => server.stop());
  await server.start();
  return server.url;
}

let runtimeInstalled = false;

export async function startStack(opts: StackOptions = {}): Promise<BenchStack> {
  if (!runtimeInstalled) {
    // Signals are benchMain's: it stops the workers as part of its clean-up.
    Runtime.install({ logger: new DefaultLogger('WARN'), shutdownSignals: [] });
    runtimeInstalled = true;
  }
  const image = await ensureBaseImage(say);
  const hosts = hostsOf(opts);
  if (hosts === 2 && databaseOf(opts) !== 'postgres') {
    throw new Error("BENCH_HOSTS=2 needs BENCH_DB=postgres: PGlite is one process's database");
  }
  const databaseUrl = databaseOf(opts) === 'postgres' ? await startPostgres() : undefined;
  const dataDir = await tempDir('data');
  const id = randomBytes(3).toString('hex');
  const stops: (() => Promise<unknown>)[] = [];
  const stop = async () => {
    while (stops.length) await bounded(stops.pop()!).catch((err: Error) => say(`stop: ${err.message}`));
  };
  atExit(stop);
  const { address, temporal } = await startTemporal(opts, dataDir, stops);
  say(`${temporal.name} on ${address}; worker data in ${dataDir}`);
  const config: Config = {
    ...loadConfig({ ...process.env, DATABASE_URL: databaseUrl }),
    TEMPORAL_ADDRESS: address,
    DRYDOCK_DATA_DIR: dataDir,
    DRYDOCK_TASK_QUEUE: `bench-${id}`,
    DRYDOCK_HOST_ID: `bench-${id}`,
    DRYDOCK_BASE_IMAGE: image,
    // As `drydock up`: unregistered file:// repos may be used, and the audit key is made in the data folder.
    DRYDOCK_DEV_MODE: true,
    LOG_LEVEL: 'warn',
    ...opts.config,
  };
  stops.push(() => removeLeftovers(config.DRYDOCK_HOST_ID));
  const clientConnection = await Connection.connect({ address });
  stops.push(() => clientConnection.close());
  await ensureSearchAttributes(clientConnection, 'default');
  const client = new Client({ connection: clientConnection });
  const connection = await NativeConnection.connect({ address });
  stops.push(() => connection.close());
  sessionBundle ??= bundleWorkflowCode({ workflowsPath: require.resolve('../workflows'), logger: quiet });
  const worker = await createWorker({
    config,
    connection,
    log: createLogger(config.LOG_LEVEL),
    workflowBundle: await sessionBundle,
  });
  const running = worker.run();
  stops.push(async () => {
    worker.shutdown();
    await running;
  });
  const secondHost =
    hosts === 2 ? await startSecondHost({ ...config, DATABASE_URL: databaseUrl }, image, stops) : undefined;
  let benchQueue: string | undefined;
  if (opts.benchActivities) {
    benchQueue = `bench-${id}-workflows`;
    benchBundle ??= bundleWorkflowCode({ workflowsPath: require.resolve('./workflows'), logger: quiet });
    const benchWorker = await Worker.create({
      connection,
      taskQueue: benchQueue,
      workflowBundle: await benchBundle,
      activities: opts.benchActivities,
    });
    const benchRunning = benchWorker.run();
    stops.push(async () => {
      benchWorker.shutdown();
      await benchRunning;
    });
  }
  return {
    client,
    config,
    taskQueue: config.DRYDOCK_TASK_QUEUE,
    hostQueue: hostQueueOf(config),
    image,
    dataDir,
    temporal,
    secondHost,
    benchQueue,
    stop,
  };
}

/** The Temporal server of `opts`, stopped by `stops`; its address, and readers of its CPU. */
async function startTemporal(
  opts: StackOptions,
  dataDir: string,
  stops: (() => Promise<unknown>)[],
): Promise<{ address: string; temporal: BenchStack['temporal'] }> {
  if (temporalOf(opts) === 'postgres') {
    say('Temporal on PostgreSQL (infra/temporal-pg.sh): building if needed, starting');
    const server = await startTemporalPg(await tempDir('temporal-pg'));
    stops.push(() => server.stop());
    return {
      address: server.address,
      temporal: {
        name: 'Temporal server on PostgreSQL (infra/temporal-pg.sh)',
        cpu: {
          'Temporal server': processesCpu([server.pids.server]),
          "Temporal's PostgreSQL": processTreeCpu(server.pids.postgres),
        },
      },
    };
  }
  const address = `127.0.0.1:${await freePort()}`;
  const server = await startDevServer({ address, logFile: path.join(dataDir, 'temporal.log') });
  stops.push(() => stopServer(server));
  return {
    address,
    temporal: { name: 'Temporal dev server', cpu: { 'Temporal dev server': processesCpu([server.pid!]) } },
  };
}

/**
 * A second Docker host: infra/docker-host.sh's engine "bench-b" (the base image
 * copied over once), and `drydock worker` as a process driving it, on the same
 * queue and database as the first, with host id `<first>-b`.
 */
async function startSecondHost(config: Config, image: string, stops: (() => Promise<unknown>)[]): Promise<SecondHost> {
  say('second Docker host: infra/docker-host.sh bench-b, the base image copied over once');
  const engine = await dockerHost('bench-b', image);
  const hostId = `${config.DRYDOCK_HOST_ID}-b`;
  const dataDir = await tempDir('data-b');
  const child = spawn(path.join(projectRoot, 'bin', 'drydock'), ['worker'], {
    env: {
      ...process.env,
      DOCKER_HOST: engine.dockerHost,
      TEMPORAL_ADDRESS: config.TEMPORAL_ADDRESS,
      DATABASE_URL: config.DATABASE_URL,
      DRYDOCK_TASK_QUEUE: config.DRYDOCK_TASK_QUEUE,
      DRYDOCK_HOST_ID: hostId,
      DRYDOCK_DATA_DIR: dataDir,
      DRYDOCK_BASE_IMAGE: image,
      DRYDOCK_AUDIT_KEY_FILE: config.DRYDOCK_AUDIT_KEY_FILE ?? path.join(config.DRYDOCK_DATA_DIR, 'audit-key'),
      DRYDOCK_DEV_MODE: '1', // as the first host's: the bench's file:// repo is not registered
      DRYDOCK_APPROVAL_REQUIRED: config.DRYDOCK_APPROVAL_REQUIRED.join(',') || 'none',
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let output = '';
  child.stderr!.on('data', (c: Buffer) => (output = (output + c.toString()).slice(-20_000)));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  stops.push(() => removeLeftovers(hostId, engine.dockerHost));
  stops.push(async () => {
    child.kill('SIGTERM');
    await exited;
  });
  // Up to 5 minutes: at load 48 its start (tsx compiling the worker, bundling the workflows) took over one.
  for (let i = 0; !output.includes('worker polling'); i++) {
    if (child.exitCode !== null || i > 3_000) throw new Error(`the second host's worker did not start:\n${output}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const info = JSON.parse(
    (
      await run('docker', ['info', '--format', '{{json .DockerRootDir}}'], {
        env: { ...process.env, DOCKER_HOST: engine.dockerHost },
      })
    ).stdout,
  ) as string;
  return { hostId, dockerHost: engine.dockerHost, dataRoot: info, workerCpu: processesCpu([child.pid!]) };
}

/** How long one step of stopping may take before the next goes ahead (a worker stuck on a hung query). */
const STOP_STEP_MS = 60_000;

function bounded(step: () => Promise<unknown>): Promise<unknown> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise((resolve) => {
    timer = setTimeout(() => {
      say(`stop: a step is still busy after ${STOP_STEP_MS / 1000} s; going on without it`);
      resolve(undefined);
    }, STOP_STEP_MS);
  });
  return Promise.race([step(), late]).finally(() => clearTimeout(timer));
}

async function stopServer(server: ChildProcess): Promise<void> {
  if (server.exitCode !== null || server.signalCode !== null) return;
  const exited = new Promise((resolve) => server.once('exit', resolve));
  server.kill('SIGTERM');
  const timer = setTimeout(() => server.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

/** Containers and volumes a crashed or interrupted run left on this host id; says how many. */
async function removeLeftovers(hostId: string, dockerHost = process.env.DOCKER_HOST): Promise<void> {
  const filter = `label=${LABELS.host}=${hostId}`;
  const env = { ...process.env, ...(dockerHost ? { DOCKER_HOST: dockerHost } : {}) };
  const ids = async (args: string[]) =>
    (await run('docker', args, { env })).stdout
      .split('\n')
      .map((s) => s.trim())
      .filter(Boolean);
  const containers = await ids(['ps', '-aq', '--filter', filter]);
  if (containers.length) {
    say(`removing ${containers.length} container(s) left by this run`);
    await run('docker', ['rm', '-f', '-v', ...containers], { env });
  }
  const volumes = await ids(['volume', 'ls', '-q', '--filter', filter]);
  if (volumes.length) await run('docker', ['volume', 'rm', '-f', ...volumes], { env });
}
