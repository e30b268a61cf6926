/**
 * Workers as separate processes, so a test can kill one for real: `bin/drydock
 * worker`, or test/support/fault-worker.ts (the same worker with a hook that holds it
 * after a chosen activity, or holds its steps' drydock-run at a chosen point).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { startFakeProviders, type FakeProviderOptions, type FakeProviders } from './fake-providers';
import { connectClient, projectRoot } from './helpers';
import { own, ownProcess } from './leftovers';

export interface WorkerProcess {
  child: ChildProcess;
  /**
   * Resolves when it polls; rejects with its log's tail when it exits first or
   * does not poll within READY_MS, so a test never waits on it until jest's bare time-out.
   */
  ready: Promise<void>;
  /** Resolves when it holds after DRYDOCK_TEST_HOLD_AFTER's activity, with the call it holds. */
  held: Promise<HeldCall>;
  exited: Promise<number | null>;
  /** Resolves once its stderr (its log) matches `pattern`. */
  logged(pattern: RegExp): Promise<RegExpExecArray>;
  /** The last `chars` of its log, for a failure's message. */
  logTail(chars?: number): string;
  /** SIGKILL, resolved once it has exited (at once if it already had). */
  kill(): Promise<void>;
}

/** The activity call a fault worker holds after (see test/support/fault-worker.ts). */
export interface HeldCall {
  workflowId: string;
  runId: string;
  activityId: string;
  attempt: number;
}

/** The variables a worker process needs; any others may be added. */
export type WorkerEnv = Record<string, string> & {
  TEMPORAL_ADDRESS: string;
  DRYDOCK_TASK_QUEUE: string;
  DRYDOCK_HOST_ID: string;
  DRYDOCK_DATA_DIR: string;
};

/** A task queue of its own for a test: `<prefix>-<random>`. */
export const newQueue = (prefix: string) => `${prefix}-${randomBytes(4).toString('hex')}`;

/** A worker on `queue` against the suite's Temporal server, host `<queue>-host` unless `extra` names one, own data dir. */
export async function workerEnv(queue: string, extra: Record<string, string> = {}): Promise<WorkerEnv> {
  const host = extra.DRYDOCK_HOST_ID ?? `${queue}-host`;
  return {
    TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS!,
    DRYDOCK_TASK_QUEUE: queue,
    DRYDOCK_HOST_ID: host,
    DRYDOCK_DATA_DIR: await ownedTempDir(`drydock-${host}-`),
    LOG_LEVEL: 'info',
    ...extra,
  };
}

/** A temp folder of this run: a later run removes it (a worker's tools and mirrors are hundreds of MB). */
async function ownedTempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), prefix));
  own(dir);
  return dir;
}

const started = new Set<ChildProcess>();

/** How long a worker may take to poll: one that bundles the workflows first took 30 s on a busy machine. */
export const READY_MS = 90_000;

/** Starts test/support/fault-worker.ts, or `bin/drydock worker` with `cli`. */
export function startWorkerProcess(
  env: Record<string, string>,
  opts: { holdAfter?: string; holdRunner?: string; cli?: boolean } = {},
): WorkerProcess {
  const holds = {
    ...(opts.holdAfter ? { DRYDOCK_TEST_HOLD_AFTER: opts.holdAfter } : {}),
    ...(opts.holdRunner ? { DRYDOCK_TEST_HOLD_RUNNER: opts.holdRunner } : {}),
  };
  const child = opts.cli
    ? spawn(path.join(projectRoot, 'bin', 'drydock'), ['worker'], {
        env: { ...process.env, ...env },
        stdio: ['ignore', 'ignore', 'pipe'],
      })
    : spawn(process.execPath, [path.join(projectRoot, 'bin', 'bundled.js'), path.join(__dirname, 'fault-worker.ts')], {
        env: { ...process.env, ...env, ...holds },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
  started.add(child);
  ownProcess(child.pid); // killed by the next run if this one is killed
  // Read stderr always: a full pipe would block the worker.
  let output = '';
  const seen = (line: RegExp) =>
    new Promise<RegExpExecArray>((resolve) => {
      const check = () => {
        const match = line.exec(output);
        if (match) resolve(match);
      };
      child.stderr!.on('data', check);
      check();
    });
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const logTail = (chars = 4000) => output.slice(-chars);
  const ready = pollingWithin(seen(/worker polling/), exited, logTail);
  return {
    child,
    ready,
    held: seen(/holding after \S+ (.*)\n/).then((m) => JSON.parse(m[1]) as HeldCall),
    exited,
    logged: seen,
    logTail,
    async kill() {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** `polling`, or an error with the log's tail when the process exits first or READY_MS pass. */
function pollingWithin(
  polling: Promise<unknown>,
  exited: Promise<number | null>,
  logTail: () => string,
): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const failed = (why: string) => new Error(`the worker ${why} before it polled; its log's end:\n${logTail()}`);
  const ready = Promise.race([
    polling.then(() => undefined),
    exited.then((code) => Promise.reject(failed(`exited with ${code}`))),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(failed(`took more than ${READY_MS / 1000}s`)), READY_MS);
      timer.unref();
    }),
  ]).finally(() => clearTimeout(timer));
  ready.catch(() => undefined); // a test that never awaits it (it kills the worker early) leaves no unhandled rejection
  return ready;
}

/** SIGKILL to every worker process started so far (for afterEach and finally blocks). */
export function killWorkerProcesses(): void {
  for (const child of started) child.kill('SIGKILL');
  started.clear();
}

/** A model stand-in, a worker process's environment whose built-in loop calls it, and a client: a crash drill's setup. */
export interface ModelDrill {
  model: FakeProviders;
  env: WorkerEnv;
  client: Client;
  /** Closes the client and the stand-in (the drill kills its workers itself). */
  close(): Promise<void>;
}

/**
 * The stand-in with a key of its own (`sk-<prefix>-…`, which it demands) and
 * the environment of a worker on a queue of its own that reaches it, speaking `api`.
 */
export async function modelDrill(
  prefix: string,
  api: 'anthropic' | 'openai' | 'compatible',
  fake: FakeProviderOptions = {},
): Promise<ModelDrill> {
  const key = `sk-${prefix}-${randomBytes(8).toString('hex')}`;
  const model = await startFakeProviders({ apiKey: key, ...fake });
  const env = await workerEnv(newQueue(prefix), {
    DRYDOCK_MODEL_BASE_URL: model.baseUrl,
    DRYDOCK_MODEL_API: api,
    DRYDOCK_MODEL_API_KEY: key,
  });
  const client = await connectClient();
  return {
    model,
    env,
    client,
    async close() {
      await client.connection.close();
      await model.close();
    },
  };
}
