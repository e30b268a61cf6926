/**
 * A chaos soak: sessions run while the test, at seeded random moments,
 * `kill -9`s the worker (a supervisor here restarts it, as systemd or
 * Kubernetes would), `docker kill`s sandboxes (one of them as a step starts)
 * and the PostgreSQL service beside a sandbox, restarts Temporal (the dev
 * server; Temporal on PostgreSQL, its database with it, in the long modes)
 * and drydock's own PostgreSQL. Some sessions' repos declare a PostgreSQL
 * service their steps query; some fill their sandbox's disk. Every session
 * must reach its expected outcome (completed, rejected, or for a full disk
 * failed saying so), each approved one push once, no worker may exit by
 * itself, no container or volume may be left and the audit chain must verify.
 * A report (faults and outcomes by kind, pushes, leftovers, the worker's
 * memory) is printed and written to data/chaos/.
 *
 * The seed is printed; DRYDOCK_CHAOS_SEED=<seed> replays the same choices.
 * DRYDOCK_CHAOS_MODE: ci (the default: 4 sessions over 30 s), long (`npm run
 * chaos`: 8 over 240 s) or release (`npm run chaos:release`: 40 over 25 min);
 * DRYDOCK_CHAOS_SESSIONS and DRYDOCK_CHAOS_SPREAD_S (the seconds over which
 * they start) override the mode's.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import type Docker from 'dockerode';
import { containersOn, copyImage, dockerHost, type DockerHost } from '../support/docker-hosts';
import { appendFileSync, chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client, WorkflowExecutionAlreadyStartedError, type WorkflowHandle } from '@temporalio/client';
import { AuditTrail } from '../../store/audit';
import { openDatabase } from '../../store/db';
import { Redactor } from '../../platform/scrub';
import { ensureSearchAttributes, startDevServer } from '../../platform/temporal';
import {
  approve,
  decide,
  MEMO_KEY,
  reject,
  status,
  type LastKnown,
  type Outcome,
  type SessionStatus,
} from '../../workflows/api';
import { getStatus } from '../../platform/sessions';
import { ownProcess } from '../support/leftovers';
import { PostgresServer } from '../support/postgres';
import { startTemporalPg } from '../support/temporal-pg';
import { freePortRange } from '../support/ports';
import { configServices, PG_CLIENT } from '../support/service-clients';
import { ensureServiceImage } from '../../sandbox-images/service-images';
import { LABELS } from '../../sandbox/provider';
import {
  clientSettings,
  containersOf,
  docker,
  freePort,
  git,
  makeFixtureRepo,
  newSessionId,
  projectRoot,
  testAuditKey,
  testConfig,
} from '../support/helpers';
import { connectTemporal } from '../../platform/temporal-connection';

const SEED = Number(process.env.DRYDOCK_CHAOS_SEED ?? randomBytes(4).readUInt32BE());
const MODES = {
  ci: { sessions: 4, spreadS: 30 },
  long: { sessions: 8, spreadS: 240 },
  release: { sessions: 40, spreadS: 1500 },
} as const;
const MODE = (process.env.DRYDOCK_CHAOS_MODE ?? 'ci') as keyof typeof MODES;
if (!(MODE in MODES)) throw new Error(`DRYDOCK_CHAOS_MODE: one of ${Object.keys(MODES).join(', ')}`);
const SESSIONS = Number(process.env.DRYDOCK_CHAOS_SESSIONS ?? MODES[MODE].sessions);
const SPREAD_MS = Number(process.env.DRYDOCK_CHAOS_SPREAD_S ?? MODES[MODE].spreadS) * 1000;
/** Temporal on PostgreSQL (its server and database restarted) in the long modes; the dev server in CI. */
const TEMPORAL_ON_PG = MODE !== 'ci';
const FINAL: Outcome[] = ['completed', 'failed', 'rejected', 'cancelled', 'timed_out'];

/** mulberry32: a small seeded generator, so a seed replays the same faults. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const random = seeded(SEED);
const between = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What happened, in order, for the report (and a failure's message). */
const events: string[] = [];
const started = Date.now();
const note = (what: string) => events.push(`${((Date.now() - started) / 1000).toFixed(1)}s ${what}`);
/** Faults injected, by kind, for the report. */
const faults: Record<string, number> = {};
const fault = (kind: string, what: string) => {
  faults[kind] = (faults[kind] ?? 0) + 1;
  note(what);
};

/**
 * Keeps one worker process (test/support/fault-worker.ts) running: restarts it after
 * `kill()` once `restartAfterMs` has passed, and after any exit it did not
 * cause, which it records in `ownExits`.
 */
class Supervisor {
  child?: ChildProcess;
  readonly ownExits: string[] = [];
  kills = 0;
  /** The killed workers' resident memory (MiB) just before each kill: growth shows over a run. */
  readonly rssAtKills: number[] = [];
  /** When the current worker started (ms since the epoch). */
  startedAt = 0;
  private stopping = false;
  private killing = false;
  /** Lost: not restarted until `back()`. */
  private held = false;
  /** Not before this time (ms since the epoch): a worker down for a while. */
  private restartAt = 0;

  constructor(
    readonly env: Record<string, string>,
    readonly logFile: string,
  ) {}

  /** Until the current worker polls (a worker starting while the server is down would fail to connect). */
  async ready(): Promise<void> {
    while (!this.child || this.killing || !this.polling) await sleep(200);
  }

  private polling = false;

  start(): void {
    this.polling = false;
    this.startedAt = Date.now();
    const child = spawn(
      process.execPath,
      [path.join(__dirname, '..', '..', 'bin', 'bundled.js'), path.join(__dirname, '..', 'support', 'fault-worker.ts')],
      {
        env: { ...process.env, ...this.env },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    this.child = child;
    ownProcess(child.pid);
    // Its last output, so an exit it did not cause names its reason in the report.
    let tail = '';
    child.stderr!.on('data', (c: Buffer) => {
      appendFileSync(this.logFile, c);
      tail = (tail + c.toString()).slice(-1_500);
      if (c.toString().includes('worker polling')) this.polling = true;
    });
    child.once('exit', (code, signal) => {
      this.polling = false;
      if (this.stopping) return;
      if (!this.killing) {
        this.ownExits.push(
          `pid ${child.pid} exited by itself (code ${code}, signal ${signal}); its last output: ${tail}`,
        );
        note(`worker ${child.pid} exited by itself`);
      }
      this.killing = false;
      if (this.held) return;
      setTimeout(() => this.stopping || this.start(), Math.max(0, this.restartAt - Date.now()));
    });
  }

  /** `kill -9`, then a restart after `downMs`; false when no worker runs to kill. */
  kill(downMs: number): boolean {
    if (!this.child || this.child.exitCode !== null || this.child.signalCode !== null || this.killing) return false;
    this.killing = true;
    this.kills++;
    const rss = rssMiB(this.child.pid);
    if (rss !== undefined) this.rssAtKills.push(rss);
    this.restartAt = Date.now() + downMs;
    note(`kill -9 worker ${this.child.pid} (down ${(downMs / 1000).toFixed(1)} s)`);
    this.child.kill('SIGKILL');
    return true;
  }

  /** `kill -9`, and no restart until `back()`: its host is lost. */
  lose(): boolean {
    this.held = true;
    return this.kill(0);
  }

  back(): void {
    this.held = false;
    this.start();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    const child = this.child;
    if (child && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
    }
  }
}

/** A step's start on an engine: its `drydock-run` exec in a sandbox of one of the soak's sessions. */
interface StepStart {
  /** The sandbox container's id and name. */
  container: string;
  name: string;
  session: string;
  /** How many steps of this session started on this engine, this one included. */
  nth: number;
}

/** Calls `then` at each step start on `engine`; resolves once the engine streams its events to us. */
async function onStepStarts(engine: Docker, sessionIds: Set<string>, then: (s: StepStart) => void) {
  const execs = new Map<string, number>();
  const watch = (await engine.getEvents({ filters: { event: ['exec_start'] } })) as NodeJS.ReadableStream & {
    destroy(): void;
  };
  let buffer = '';
  watch.on('data', (c: Buffer) => {
    buffer += c.toString();
    const lines = buffer.split('\n');
    buffer = lines.pop()!;
    for (const line of lines.filter(Boolean)) {
      const e = JSON.parse(line) as { Action: string; Actor: { ID: string; Attributes: Record<string, string> } };
      const session = e.Actor.Attributes['drydock.session'];
      if (!e.Action.includes('drydock-run') || !sessionIds.has(session)) continue;
      execs.set(session, (execs.get(session) ?? 0) + 1);
      then({ container: e.Actor.ID, name: e.Actor.Attributes.name, session, nth: execs.get(session)! });
    }
  });
  return { stop: () => watch.destroy() };
}

/** Kills the container of the next step that starts, `count` times. */
async function killAtStepStart(sessionIds: Set<string>, count: number) {
  let kills = 0;
  const watch = await onStepStarts(docker, sessionIds, (step) => {
    if (kills >= count) return;
    kills++;
    fault('sandbox killed at a step start', `docker kill ${step.name} as a step starts`);
    void docker
      .getContainer(step.container)
      .kill()
      .catch(() => undefined);
  });
  return { stop: watch.stop, kills: () => kills };
}

/** A `docker kill` of one running sandbox of these sessions; false when none runs. */
async function killRandomSandbox(sessionIds: Set<string>): Promise<boolean> {
  const running = (await docker.listContainers({ filters: { label: ['drydock.session'] } })).filter(
    (c) => sessionIds.has(c.Labels['drydock.session']) && !c.Names[0].includes('-svc-'),
  );
  if (running.length === 0) return false;
  const victim = running[between(0, running.length)];
  fault('sandbox killed', `docker kill ${victim.Names[0]}`);
  await docker
    .getContainer(victim.Id)
    .kill()
    .catch(() => undefined);
  return true;
}

/**
 * Kills the PostgreSQL service beside the sandbox of a service session as its `nth` step
 * starts (its nth `drydock-run` exec: past setup, so the step, which queries it, is the one
 * it fails), `count` times in all. Resolves once the engine streams its events to us.
 */
async function killServiceAtStep(sessionIds: Set<string>, nth: number, count: number) {
  let kills = 0;
  const watch = await onStepStarts(docker, sessionIds, (step) => {
    if (kills >= count || step.nth !== nth) return;
    kills++;
    const name = `${step.name}-svc-db`;
    fault('service killed', `docker kill ${name} as step ${nth} of ${step.session} starts`);
    void docker
      .getContainer(name)
      .kill()
      .catch(() => undefined);
  });
  return { stop: watch.stop, kills: () => kills };
}

/**
 * The kinds of session: scripted steps; the same querying a PostgreSQL service its repo declares
 * (a killed service fails the step it ran in); or a step that fills its sandbox's disk (64m).
 * In CI the second is a service session and the third a disk one; then one in five and one in ten.
 */
type Kind = 'scripted' | 'service' | 'disk';
const kindOf = (n: number): Kind =>
  n === 1 || n % 5 === 1 ? 'service' : n === 2 || n % 10 === 7 ? 'disk' : 'scripted';

function session(repoUrl: string, n: number, kind: Kind) {
  const use = kind === 'service' ? 'node pgq.js "select 1" >/dev/null && ' : '';
  const steps = Array.from({ length: 4 }, (_, i) => ({
    run: `${use}echo step-${i} >> STEPS.txt; sleep ${1 + ((n + i) % 3)}${i === 0 ? '; echo hello >> README.md' : ''}`,
  }));
  // A full disk is the session's own limit, not a fault to recover from: the step fails, saying so.
  if (kind === 'disk') steps.splice(2, 0, { run: 'dd if=/dev/zero of=fill bs=1M count=200' });
  return {
    repo: { url: repoUrl },
    task: `chaos session ${n}`,
    agent: { steps },
    verify: { test: 'sh check.sh' },
    ...(kind === 'disk' ? { limits: { disk: '64m' } } : {}),
  };
}

/** A fixture repo for a kind: a service session's declares PostgreSQL and has its client. */
function repoFor(kind: Kind, postgresImage: string) {
  if (kind !== 'service') return makeFixtureRepo();
  return makeFixtureRepo({ 'pgq.js': PG_CLIENT, '.drydock/config.yaml': configServices({ postgres: postgresImage }) });
}

/** The soak's own second Docker engine (infra/docker-host.sh): stopped, so never the shared one. */
const SECOND_ENGINE = 'chaos-soak';
/** A second host (its own engine and worker) lost mid-step: in the long modes, or with DRYDOCK_CHAOS_SECOND_HOST=1. */
const SECOND_HOST = MODE !== 'ci' || process.env.DRYDOCK_CHAOS_SECOND_HOST === '1';

/** The second engine, started (or found running) with the base and PostgreSQL images. */
async function startSecondEngine(postgresImage: string): Promise<DockerHost> {
  const host = await dockerHost(SECOND_ENGINE, process.env.DRYDOCK_BASE_IMAGE!);
  await copyImage(postgresImage, docker, host.docker);
  return host;
}

/**
 * Loses the second host as the second step on it of one of these sessions starts: its worker
 * killed for good and its engine stopped (SIGTERM to its dockerd: its containers stop with it).
 * Resolves once the engine streams its events to us.
 */
async function loseHostAtStep(engine: Docker, sessionIds: Set<string>, worker: Supervisor) {
  let lost = false;
  const watch = await onStepStarts(engine, sessionIds, (step) => {
    if (lost || step.nth !== 2) return;
    lost = true;
    fault('second host lost', `second host lost as a step of ${step.session} starts: worker killed, engine stopped`);
    worker.lose();
    const pid = Number(readFileSync(`/var/lib/drydock-hosts/${SECOND_ENGINE}/dockerd.pid`, 'utf8'));
    process.kill(pid, 'SIGTERM');
  });
  return { stop: watch.stop, lost: () => lost };
}

/**
 * The lost host back (its engine, then its worker, whose reaper removes what the host's sandboxes
 * left, triggered now); the names of the sessions' containers still on it after a minute.
 */
async function bringBack(client: Client, worker: Supervisor, hostId: string, ids: Set<string>): Promise<string[]> {
  await promisify(execFile)('bash', [path.join(projectRoot, 'infra', 'docker-host.sh'), SECOND_ENGINE]);
  const { docker: engine } = await dockerHost(SECOND_ENGINE, process.env.DRYDOCK_BASE_IMAGE!);
  worker.back();
  await worker.ready();
  await client.schedule.getHandle(`drydock-reaper-${hostId}`).trigger();
  const left = async () => (await Promise.all([...ids].map((id) => containersOn(engine, id)))).flat();
  const deadline = Date.now() + 60_000;
  while ((await left()).length > 0 && Date.now() < deadline) await sleep(1_000);
  return (await left()).map((c) => `${SECOND_ENGINE}:${c.Names[0]}`);
}

/** The Temporal server of the soak, restartable at the same address. */
interface TemporalServer {
  address: string;
  restart(downMs: number): Promise<void>;
  stop(): Promise<void>;
}

/** The dev server (CI), or Temporal on PostgreSQL, whose restart takes its database down too. */
async function startTemporal(dir: string): Promise<TemporalServer> {
  if (TEMPORAL_ON_PG) {
    const port = await freePortRange(11);
    let server = await startTemporalPg(dir, { port });
    return {
      address: server.address,
      async restart(downMs) {
        await server.stop();
        await sleep(downMs);
        server = await startTemporalPg(dir, { port });
      },
      stop: () => server.stop(),
    };
  }
  const address = `127.0.0.1:${await freePort()}`;
  const dbFile = path.join(dir, 'temporal.db');
  const logFile = path.join(dir, 'temporal.log');
  let server = await startDevServer({ address, dbFile, logFile });
  ownProcess(server.pid);
  return {
    address,
    async restart(downMs) {
      server.kill('SIGTERM');
      await new Promise((r) => server.once('exit', r));
      await sleep(downMs);
      server = await startDevServer({ address, dbFile, logFile });
      ownProcess(server.pid);
    },
    async stop() {
      server.kill('SIGTERM');
    },
  };
}

/** The resident memory of a process in MiB, from /proc (undefined once it is gone). */
function rssMiB(pid: number | undefined): number | undefined {
  try {
    const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb ? Math.round(Number(kb) / 1024) : undefined;
  } catch {
    return undefined;
  }
}

/** The sessions' containers and volumes still there, waiting until `deadline` (ms since the epoch) for none. */
async function leftBy(ids: Set<string>, deadline: number): Promise<{ containers: string[]; volumes: string[] }> {
  for (;;) {
    const containers = (await Promise.all([...ids].map((id) => containersOf(id)))).flat().map((c) => c.Names[0]);
    const left = { containers, volumes: await volumesOf(ids) };
    if ((!containers.length && !left.volumes.length) || Date.now() > deadline) return left;
    await sleep(1_000);
  }
}

/** Volumes (any) still labelled with one of these sessions. */
async function volumesOf(ids: Set<string>): Promise<string[]> {
  const { Volumes } = await docker.listVolumes({ filters: { label: [LABELS.session] } });
  return (Volumes ?? []).filter((v) => ids.has(v.Labels?.[LABELS.session] ?? '')).map((v) => v.Name);
}

/** Starts a session; the dev server may be restarting, so a failure is tried again (once started, it is found). */
async function startRetrying(
  client: Client,
  opts: { workflowId: string; taskQueue: string; args: unknown[] },
): Promise<WorkflowHandle> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await client.workflow.start('agentSession', opts);
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) return client.workflow.getHandle(opts.workflowId);
      if (attempt >= 30) throw err;
      await sleep(1_000);
    }
  }
}

/**
 * `drydock status` of a running session 3 s into a worker outage: noted with
 * how long it took; undefined when it did not say that no worker answers.
 */
async function statusWithoutWorker(client: Client, sessionIds: Set<string>): Promise<number | undefined> {
  await sleep(3_000);
  for (const id of sessionIds) {
    // An id is listed just before its workflow starts: one not started yet is passed over.
    const described = await client.workflow
      .getHandle(id)
      .describe()
      .catch(() => undefined);
    if (described?.status.name !== 'RUNNING') continue;
    const asked = Date.now();
    const answer = await getStatus(client, id);
    const ms = Date.now() - asked;
    note(`status of ${id} with no worker: ${ms} ms (${answer.unanswered?.message ?? 'answered by a worker'})`);
    return answer.unanswered ? ms : undefined;
  }
  return 0; // no session running at that moment
}

/**
 * Whether a worker kill now leaves every session within its retry budget: each kill cuts the
 * attempts under way, and an activity has 5 (a slow machine, where provisioning takes minutes,
 * would otherwise see one attempt cut again and again). No kill while a pending activity is past
 * its second attempt, or while the server does not answer.
 */
async function mayKillWorker(client: Client, ids: Set<string>): Promise<boolean> {
  for (const id of ids) {
    const described = await client.workflow
      .getHandle(id)
      .describe()
      .catch(() => undefined);
    if (!described) return false;
    if ((described.raw.pendingActivities ?? []).some((a) => (a.attempt ?? 1) > 2)) return false;
  }
  return true;
}

function pushesOf(bare: string, branch: string): number {
  try {
    return git(['reflog', 'show', '--format=%H', `refs/heads/${branch}`], bare)
      .trim()
      .split('\n').length;
  } catch {
    return 0;
  }
}

/**
 * Decides every pending action (approve, or reject for `rejecting`) until the
 * session ends: as a signal, which Temporal keeps while no worker runs, or
 * else as the `decide` update. The pending action is read from the status,
 * or from the memo when no worker answers. Nothing is decided before
 * `mayDecide()`: sessions wait at their gate until the planned faults fired,
 * so a fast run cannot end before them.
 */
async function drive(
  handle: WorkflowHandle,
  rejecting: boolean,
  deadline: number,
  mayDecide: () => boolean,
): Promise<SessionStatus | string> {
  const sent = new Set<string>();
  for (;;) {
    const described = await handle.describe().catch(() => undefined);
    if (described && described.status.name !== 'RUNNING') {
      // A failed session's status travels in its failure; the text says why it ended.
      return (handle.result() as Promise<SessionStatus>).catch(
        (err: Error) => `${described.status.name}: ${(err.cause as Error | undefined)?.message ?? err.message}`,
      );
    }
    const memo = described?.memo?.[MEMO_KEY] as LastKnown | undefined;
    const s = await handle.query(status).catch(() => undefined);
    const pending = s?.pendingApproval ?? memo?.pending;
    if (pending && !sent.has(pending.change) && mayDecide()) {
      const input = { action: pending.action, by: 'ops' };
      const asSignal = random() < 0.5;
      note(
        `${rejecting ? 'reject' : 'approve'} ${pending.action} of ${handle.workflowId} (${asSignal ? 'signal' : 'update'})`,
      );
      if (asSignal) {
        await handle.signal(rejecting ? reject : approve, input).then(
          () => sent.add(pending.change),
          () => {},
        );
      } else {
        const decision = rejecting ? 'reject' : 'approve';
        await handle.executeUpdate(decide, { args: [{ ...input, decision }] }).then(
          () => sent.add(pending.change),
          () => {},
        );
      }
    }
    if (Date.now() > deadline) return `still ${s?.phase ?? described?.status.name} at the deadline`;
    await sleep(500);
  }
}

/** What a session of this kind and decision must end as: a full disk fails, saying so. */
function expected(kind: Kind, rejecting: boolean, outcome: string, why = ''): boolean {
  if (kind === 'disk')
    return outcome === 'failed' && /filled the disk .*\/workspace and home are limited to 64m/.test(why);
  // But for the designed bound: a sandbox lost once more after three replacements fails (sandbox_lost).
  if (outcome === 'failed' && /already replaced 3 times/.test(why)) return true;
  return outcome === (rejecting ? 'rejected' : 'completed');
}

/** The report of a run: printed, and written to data/chaos/<seed>-<time>.json. */
function writeReport(report: Record<string, unknown>): void {
  const text = JSON.stringify(report, null, 2);
  process.stderr.write(`chaos report:\n${text}\n`);
  const dir = path.join(projectRoot, 'data', 'chaos');
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, `${SEED}-${new Date().toISOString().replace(/[:.]/g, '-')}.json`), `${text}\n`);
}

test(
  `chaos soak (${MODE}, seed ${SEED})`,
  async () => {
    process.stderr.write(`chaos seed ${SEED} (replay: DRYDOCK_CHAOS_SEED=${SEED}), ${MODE}: ${SESSIONS} sessions\n`);
    const dir = await mkdtemp(path.join(tmpdir(), 'drydock-chaos-'));
    chmodSync(dir, 0o755); // as root, PostgreSQL runs as the postgres user and must reach its folders
    const postgresImage = await ensureServiceImage('postgres');
    // drydock's own PostgreSQL, restarted below.
    const store = new PostgresServer(path.join(dir, 'store'), await freePort());
    await store.start();
    const temporal = await startTemporal(dir);
    const connection = await connectTemporal(clientSettings(temporal.address));
    const client = new Client({ connection });
    await ensureSearchAttributes(connection, 'default');
    const queue = `chaos-${randomBytes(4).toString('hex')}`;
    const workerEnv = {
      TEMPORAL_ADDRESS: temporal.address,
      DATABASE_URL: store.url,
      DRYDOCK_TASK_QUEUE: queue,
      DRYDOCK_HOST_ID: `${queue}-host`,
      DRYDOCK_DATA_DIR: path.join(dir, 'data'),
      // Longer than most outages below, shorter than the long ones: both paths run.
      DRYDOCK_HOST_TIMEOUT: '15s',
      LOG_LEVEL: 'info',
    };
    const supervisor = new Supervisor(workerEnv, path.join(dir, 'worker.log'));
    supervisor.start();
    await supervisor.ready();
    const ids = new Set<string>();
    // The second host: its own engine and worker (same queue, its own host id), lost mid-step.
    const second = SECOND_HOST ? await startSecondEngine(postgresImage) : undefined;
    const secondId = `${queue}-b`;
    const secondWorker = second
      ? new Supervisor(
          {
            ...workerEnv,
            DRYDOCK_HOST_ID: secondId,
            DOCKER_HOST: second.dockerHost,
            DRYDOCK_DATA_DIR: path.join(dir, 'data-b'),
          },
          path.join(dir, 'worker-b.log'),
        )
      : undefined;
    secondWorker?.start();
    await secondWorker?.ready();
    const hostLoss = second && secondWorker ? await loseHostAtStep(second.docker, ids, secondWorker) : undefined;
    const rssBefore = rssMiB(supervisor.child?.pid);
    const serviceIds = new Set<string>();
    const atStepStart = await killAtStepStart(ids, 1);
    // Half the service sessions (at least one) lose their database.
    const serviceSessions = Array.from({ length: SESSIONS }, (_, n) => kindOf(n)).filter((k) => k === 'service').length;
    const serviceKills = await killServiceAtStep(serviceIds, 3, Math.ceil(serviceSessions / 2));
    const runs: Promise<{ id: string; kind: Kind; bare: string; rejecting: boolean; final: SessionStatus | string }>[] =
      [];
    const deadline = Date.now() + SPREAD_MS + 10 * 60_000;
    let ended = 0;
    /** The planned faults happened: sessions may pass their gates. */
    let faultsFired = false;
    const statusChecks: Promise<number | undefined>[] = [];
    try {
      // The sessions, started at random moments over SPREAD_MS; about one in four is rejected.
      const starting = (async () => {
        for (let n = 0; n < SESSIONS; n++) {
          await sleep(between(0, SPREAD_MS / SESSIONS));
          const kind = kindOf(n);
          const repo = await repoFor(kind, postgresImage);
          const id = newSessionId(`chaos-${n}`);
          ids.add(id);
          if (kind === 'service') serviceIds.add(id);
          const rejecting = kind !== 'disk' && random() < 0.25;
          note(`start ${id} (${kind})${rejecting ? ' (to be rejected)' : ''}`);
          if (kind === 'disk') fault('sandbox disk filled', `${id} fills its 64m disk at step 3`);
          const handle = await startRetrying(client, {
            workflowId: id,
            taskQueue: queue,
            args: [session(repo.url, n, kind)],
          });
          runs.push(
            drive(handle, rejecting, deadline, () => faultsFired).then((final) => {
              ended++;
              return { id, kind, bare: repo.bare, rejecting, final };
            }),
          );
        }
      })();
      // The faults, while sessions start and run: worker kills every 5-15 s until faultsUntil (now and
      // then a long outage), a Temporal restart and one of drydock's PostgreSQL (one per 5 minutes of
      // spread) and two random sandbox kills; the service kills come at step starts (above). The planned
      // ones come at seeded moments, but a sandbox kill waits for a sandbox to kill (provisioning takes
      // long on a busy machine), and the loop goes on until all came: the sessions wait at their gate.
      // The first worker kill is planned too: under load every try of the window can find an activity
      // past its second attempt (a database restart's retries), and the drill then killed no worker
      // (session 26's loaded run); at the gate no activity is pending, so it comes there at the latest.
      const faultsUntil = Date.now() + SPREAD_MS + 60_000;
      // The first while sessions still start (so one runs); the second may find them all ended.
      const sandboxKillsAt = [between(5_000, SPREAD_MS), between(5_000, SPREAD_MS + 30_000)].sort((a, b) => a - b);
      const rounds = Math.max(1, Math.floor(SPREAD_MS / 300_000));
      const moments = () => Array.from({ length: rounds }, () => between(10_000, SPREAD_MS)).sort((a, b) => a - b);
      const serverRestartsAt = moments(); // while sessions still start
      const storeRestartsAt = moments();
      let restarted = false;
      const going = () => ended < SESSIONS && Date.now() < deadline;
      const planned = () => serverRestartsAt.length + storeRestartsAt.length;
      while (going() && (Date.now() < faultsUntil || !faultsFired || sandboxKillsAt.length)) {
        await sleep(between(5_000, 15_000));
        const elapsed = Date.now() - started;
        if (serverRestartsAt.length && elapsed > serverRestartsAt[0]) {
          serverRestartsAt.shift();
          restarted = true;
          await supervisor.ready();
          const kind = TEMPORAL_ON_PG ? 'Temporal on PostgreSQL restarted' : 'Temporal dev server restarted';
          fault(kind, `${kind}: stopped`);
          await temporal.restart(between(1_000, 4_000));
          note('Temporal started');
          continue;
        }
        if (storeRestartsAt.length && elapsed > storeRestartsAt[0]) {
          storeRestartsAt.shift();
          // A worker that starts while its database is down exits with that error (its supervisor starts it
          // again): the drill restarts the database under a running worker, as the server above.
          await supervisor.ready();
          fault("drydock's PostgreSQL restarted", "drydock's PostgreSQL stopped");
          await store.stop();
          await sleep(between(1_000, 4_000));
          await store.start();
          note("drydock's PostgreSQL started");
          continue;
        }
        // A sandbox kill that found no sandbox running is tried again at the next fault.
        if (sandboxKillsAt.length && elapsed > sandboxKillsAt[0] && (await killRandomSandbox(ids))) {
          sandboxKillsAt.shift();
        }
        // The host loss waits for a session's second step on that host, until faultsUntil at most.
        const hostLost = !hostLoss || hostLoss.lost() || Date.now() > faultsUntil;
        faultsFired ||= planned() === 0 && sandboxKillsAt.length < 2 && hostLost && supervisor.kills > 0;
        if (Date.now() > faultsUntil && supervisor.kills > 0) continue; // only the planned faults still due
        if (!(await mayKillWorker(client, ids))) continue;
        const longOutage = random() < 0.15;
        const killed = supervisor.kill(longOutage ? between(20_000, 30_000) : between(200, 3_000));
        if (killed) faults['worker killed'] = (faults['worker killed'] ?? 0) + 1;
        if (killed && longOutage) {
          // Handled at once (it is awaited only at the end): a failure counts as a check that failed.
          statusChecks.push(
            statusWithoutWorker(client, ids).catch((err: unknown) => void note(`status failed: ${String(err)}`)),
          );
        }
      }
      await starting;
      const results = await Promise.all(runs);
      // Status answered from the memo (`unanswered` set) while no worker ran, each time.
      expect((await Promise.all(statusChecks)).filter((ms) => ms === undefined)).toEqual([]);
      atStepStart.stop();
      serviceKills.stop();
      hostLoss?.stop();
      note('all sessions ended');
      process.stderr.write(`chaos seed ${SEED}:\n  ${events.join('\n  ')}\n`);
      await supervisor.ready();
      const rssAfter = rssMiB(supervisor.child?.pid);
      const rssAfterUptimeS = Math.round((Date.now() - supervisor.startedAt) / 1000);

      const outcomes = results.map((r) => ({
        id: r.id,
        kind: r.kind,
        outcome: typeof r.final === 'string' ? r.final.split(':')[0].toLowerCase() : r.final.phase,
        ...(typeof r.final === 'string' ? { why: r.final } : {}),
        pushes: pushesOf(r.bare, `drydock/${r.id}`),
        restarts: typeof r.final === 'string' ? undefined : r.final.restarts,
        removed: typeof r.final === 'string' ? undefined : r.final.removedSandboxes?.length,
        teardown: typeof r.final === 'string' ? undefined : r.final.timeline.find((t) => t.name === 'teardown')?.ok,
        // How long a failed teardown took: about DRYDOCK_HOST_TIMEOUT when no worker took it up in time.
        ...(typeof r.final !== 'string' && r.final.timeline.find((t) => t.name === 'teardown')?.ok === false
          ? { teardownMs: r.final.timeline.find((t) => t.name === 'teardown')?.durationMs }
          : {}),
      }));
      process.stderr.write(`outcomes:\n${outcomes.map((o) => `  ${JSON.stringify(o)}`).join('\n')}\n`);
      // Why a teardown failed, in the worker's own words (its log goes with the run's folder).
      const teardownErrors = readFileSync(supervisor.logFile, 'utf8')
        .split('\n')
        .filter((line) => line.includes('teardown failed'));
      if (teardownErrors.length) process.stderr.write(`teardown failures:\n  ${teardownErrors.join('\n  ')}\n`);
      // A teardown no worker took up within the host timeout (a long outage as it was due) leaves the
      // sandbox to its host's reaper, by design (docs/operations.md): run it now, as the five minutes
      // between its runs would outlast the test, and then count what is left (the report names them).
      const teardownsFailed = outcomes.filter((o) => o.teardown === false).map((o) => o.id);
      if (teardownsFailed.length)
        await client.schedule.getHandle(`drydock-reaper-${workerEnv.DRYDOCK_HOST_ID}`).trigger();
      const left = await leftBy(ids, teardownsFailed.length ? Date.now() + 60_000 : 0);
      if (secondWorker) left.containers.push(...(await bringBack(client, secondWorker, secondId, ids)));
      const db = await openDatabase(testConfig({ DATABASE_URL: store.url }));
      const broken: Record<string, unknown[]> = {};
      try {
        const audit = new AuditTrail(db.pool, 'chaos-test', new Redactor([]), testAuditKey());
        for (const id of ids) {
          const b = (await audit.verify(id)).broken;
          if (b.length) broken[id] = b;
        }
      } finally {
        await db.close();
      }
      const byKind: Record<string, Record<string, number>> = {};
      for (const o of outcomes) (byKind[o.kind] ??= {})[o.outcome] = (byKind[o.kind][o.outcome] ?? 0) + 1;
      writeReport({
        seed: SEED,
        mode: MODE,
        sessions: SESSIONS,
        seconds: Math.round((Date.now() - started) / 1000),
        faults,
        outcomes: byKind,
        unexpected: outcomes.filter((o, i) => !expected(o.kind, results[i].rejecting, o.outcome, o.why)),
        pushes: Object.fromEntries(outcomes.map((o) => [`drydock/${o.id}`, o.pushes])),
        teardownsFailed,
        left,
        audit: { sessions: ids.size, verified: ids.size - Object.keys(broken).length, broken },
        worker: {
          rssMiB: { before: rssBefore, after: rssAfter, afterUptimeS: rssAfterUptimeS, atKills: supervisor.rssAtKills },
          kills: supervisor.kills,
          ownExits: [...supervisor.ownExits, ...(secondWorker?.ownExits ?? [])],
        },
      });

      for (const [r, o] of results.map((r, i) => [r, outcomes[i]] as const)) {
        expect({ id: o.id, final: FINAL.includes(o.outcome as Outcome) }).toEqual({ id: o.id, final: true });
        // One push per approved session; none for a rejected one.
        const pushes = o.outcome === 'completed' && !r.rejecting ? 1 : 0;
        expect({ id: o.id, pushes: o.pushes }).toEqual({ id: o.id, pushes });
      }
      expect(outcomes.filter((o, i) => !expected(o.kind, results[i].rejecting, o.outcome, o.why))).toEqual([]);
      expect(left).toEqual({ containers: [], volumes: [] });
      expect(broken).toEqual({});
      expect([...supervisor.ownExits, ...(secondWorker?.ownExits ?? [])]).toEqual([]);
      if (hostLoss) expect(hostLoss.lost()).toBe(true);
      for (const w of [supervisor, secondWorker]) {
        if (w) expect(readFileSync(w.logFile, 'utf8')).not.toContain('unhandled rejection');
      }
      expect(supervisor.kills).toBeGreaterThan(0);
      expect(restarted).toBe(true);
      expect(atStepStart.kills()).toBe(1);
      expect(sandboxKillsAt.length).toBeLessThan(2); // at least one random sandbox kill
      expect(faults["drydock's PostgreSQL restarted"]).toBeGreaterThan(0);
      expect(serviceKills.kills()).toBeGreaterThan(0);
    } finally {
      atStepStart.stop();
      serviceKills.stop();
      hostLoss?.stop();
      await secondWorker?.stop();
      await supervisor.stop();
      await connection.close();
      await temporal.stop();
      await store.stop();
    }
  },
  SPREAD_MS + 14 * 60_000,
);
