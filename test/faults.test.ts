/**
 * Fault drills with real processes: kill -9 of the worker in each phase, a
 * sandbox killed under the agent, the Temporal server restarted, a host lost
 * among two, SIGTERM and a double SIGINT. Every session completes, with one
 * push and one pull request, and leaves no container behind. Each drill
 * prints how long the session took from the fault to its next completed
 * step, and its history must replay on the current code
 * (DRYDOCK_RECORD_HISTORY=1 also keeps them in test/fixtures/histories).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client, type WorkflowHandle, type WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { ensureSearchAttributes, startDevServer } from '../lib/temporal';
import { approve, decide, status, type SessionStatus } from '../workflows/api';
import { temporal } from '@temporalio/proto';
import { startFakeGitHub, type FakeGitHub } from './fake-github';
import { ownProcess } from './leftovers';
import {
  approveAs,
  clientSettings,
  connectClient,
  containersOf,
  docker,
  freePort,
  git,
  makeFixtureRepo,
  newSessionId,
  projectRoot,
  startSession,
  waitForStatus,
} from './helpers';
import { connectTemporal } from '../lib/temporal-connection';
import { containersOn, secondDockerHost } from './docker-hosts';
import { recordHistory, replayHistory } from './histories';
import { killWorkerProcesses, newQueue, startWorkerProcess, workerEnv } from './workers';

const TOKEN = `ghp_${randomBytes(18).toString('hex')}`;
let github: FakeGitHub;
let client: Client;

beforeAll(async () => {
  github = await startFakeGitHub({ owner: 'acme', repo: 'app', token: TOKEN });
  client = await connectClient();
});
afterAll(async () => {
  await client?.connection.close();
  await github?.close();
});
afterEach(killWorkerProcesses);

/** A worker on `queue` that reaches the fake GitHub. */
const faultEnv = (queue: string, extra: Record<string, string> = {}) =>
  workerEnv(queue, { GITHUB_TOKEN: TOKEN, GITHUB_API_URL: github.url, ...extra });

/** A drill's fixture repo, and a worker process polling a queue of its own. */
async function startDrill(extra: Record<string, string> = {}, opts: { holdAfter?: string; cli?: boolean } = {}) {
  const repo = await makeFixtureRepo();
  const env = await faultEnv(newQueue('fault'), extra);
  const worker = startWorkerProcess(env, opts);
  await worker.ready;
  return { repo, env, worker };
}

/** Starts a session on the task queue of `on` (a worker's env). */
const startOn = (c: Client, on: { DRYDOCK_TASK_QUEUE: string }, id: string, input: Record<string, unknown>) =>
  startSession({ client: c, config: on }, id, input);

/**
 * The session's first run, where its work happened: once published it waits
 * for follow-ups in a new run (continue-as-new), whose history starts there.
 */
const firstRun = (handle: WorkflowHandle) =>
  handle.client.getHandle(handle.workflowId, (handle as WorkflowHandleWithFirstExecutionRunId).firstExecutionRunId);

/** Approves every pending action (push, pull request) until the session ends. */
async function approveAll(handle: WorkflowHandle): Promise<SessionStatus> {
  const result = handle.result() as Promise<SessionStatus>;
  let done = false;
  void result.finally(() => (done = true)).catch(() => undefined);
  while (!done) {
    const s = await handle.query(status).catch(() => undefined);
    const pending = s?.pendingApproval;
    if (pending) {
      await handle.executeUpdate(decide, approveAs('ops', pending.action)).catch(() => undefined);
    }
    await new Promise((r) => setTimeout(r, 300));
  }
  return result;
}

/** From the fault to the end of the first timeline entry that ended after it. */
function recoveryMs(final: SessionStatus, faultAt: number): number {
  const ends = final.timeline
    .map((t) => Date.parse(t.startedAt) + (t.durationMs ?? 0))
    .filter((end) => end > faultAt)
    .sort((a, b) => a - b);
  return ends[0] - faultAt;
}

const recoveries: Record<string, number> = {};
afterAll(() => {
  const rows = Object.entries(recoveries).map(([k, ms]) => `  ${k}: ${(ms / 1000).toFixed(1)} s`);
  process.stderr.write(`fault → next completed step:\n${rows.join('\n')}\n`);
});

/** Replays the session's history on the current code; keeps it as a fixture when asked. */
async function replays(handle: WorkflowHandle, name: string): Promise<void> {
  await replayHistory(await firstRun(handle).fetchHistory());
  await recordHistory(handle, `fault-${name}`);
}

/** The attempts of an activity type that started, in order, and how many of them completed. */
async function attempts(handle: WorkflowHandle, type: string): Promise<number[]> {
  return (await activityRuns(handle, type)).started;
}

async function activityRuns(handle: WorkflowHandle, type: string): Promise<{ started: number[]; completed: number }> {
  const events = (await firstRun(handle).fetchHistory()).events!;
  const scheduled = new Map<string, string>();
  const runs = { started: [] as number[], completed: 0 };
  for (const e of events) {
    const s = e.activityTaskScheduledEventAttributes;
    if (s) scheduled.set(String(e.eventId), s.activityType!.name!);
    const started = e.activityTaskStartedEventAttributes;
    if (started && scheduled.get(String(started.scheduledEventId)) === type) runs.started.push(started.attempt!);
    const completed = e.activityTaskCompletedEventAttributes;
    if (completed && scheduled.get(String(completed.scheduledEventId)) === type) runs.completed++;
  }
  return runs;
}

function pushesOf(bare: string, branch: string): number {
  return git(['reflog', 'show', '--format=%H', `refs/heads/${branch}`], bare)
    .trim()
    .split('\n').length;
}

const session = (repoUrl: string, extra: Record<string, unknown> = {}) => ({
  repo: { url: repoUrl },
  task: 'survive the drill',
  agent: {
    steps: [
      { run: 'echo one >> ONE.md; echo hello >> README.md' },
      { run: 'echo ran >> RUNS.txt; sleep 6; echo two >> TWO.md' },
    ],
  },
  verify: { test: 'sh check.sh' },
  publish: { pullRequest: { repo: 'acme/app' }, openFor: '1s' }, // not open for follow-ups a week
  // The drills kill the worker at each gate: the push's and the pull request's.
  approval: { separateGates: true },
  ...extra,
});

const stepRunning = (n: number) => (s: SessionStatus) =>
  s.timeline.some((t) => t.name.startsWith(`step ${n}`) && t.durationMs === undefined);

interface Drill {
  phase: string;
  /** Kill once the worker holds after this activity (its work done, not reported). */
  holdAfter?: string;
  /** Or kill when this holds (polled every 100 ms), then wait `afterMs`. */
  when?: (s: SessionStatus) => boolean;
  afterMs?: number;
  extra?: Record<string, unknown>;
  /** The activity whose attempt was cut off: it ran again on the new worker. */
  retried: string;
}

const drills: Drill[] = [
  { phase: 'provisioning', holdAfter: 'provisionSandbox', retried: 'provisionSandbox' },
  { phase: 'agent', when: stepRunning(2), afterMs: 1500, retried: 'runStep' },
  {
    phase: 'verifying',
    when: (s) => s.phase === 'verifying',
    afterMs: 1500,
    extra: { verify: { test: 'sleep 5; sh check.sh' } },
    retried: 'runStep',
  },
  { phase: 'awaiting_approval', when: (s) => s.phase === 'awaiting_approval', retried: '' },
  { phase: 'publishing-push', holdAfter: 'pushBranch', retried: 'pushBranch' },
  { phase: 'publishing-pull-request', holdAfter: 'openPullRequest', retried: 'openPullRequest' },
  { phase: 'tearing_down', holdAfter: 'destroySandbox', retried: 'destroySandbox' },
];

test.each(drills)(
  'kill -9 the worker while $phase → a new worker completes the session, one push, one PR',
  async (drill) => {
    const id = newSessionId(`fault-${drill.phase}`);
    const { repo, env, worker: first } = await startDrill({}, { holdAfter: drill.holdAfter });
    const handle = await startOn(client, env, id, session(repo.url, drill.extra));
    if (drill.holdAfter) {
      // Approvals come from outside, as they would; the worker holds after the activity.
      await Promise.race([approveAll(handle), first.held]);
    } else {
      for (;;) {
        const s = await handle.query(status);
        if (drill.when!(s)) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      await new Promise((r) => setTimeout(r, drill.afterMs ?? 0));
    }
    await first.kill();
    const faultAt = Date.now();
    if (drill.phase === 'awaiting_approval') {
      // A decision sent while no worker runs waits in Temporal for the next one.
      await handle.signal(approve, { action: 'push', by: 'ops' });
    }
    const second = startWorkerProcess(env);
    const final = await approveAll(handle);
    recoveries[`kill -9 while ${drill.phase}`] = recoveryMs(final, faultAt);

    expect(final.phase).toBe('completed');
    const branch = `drydock/${id}`;
    expect(pushesOf(repo.bare, branch)).toBe(1);
    expect(github.pulls.filter((p) => p.head === branch)).toHaveLength(1);
    expect(git(['show', `${branch}:RUNS.txt`], repo.bare)).toBe('ran\n'); // the agent's step ran once
    if (drill.retried) expect(Math.max(...(await attempts(handle, drill.retried)))).toBeGreaterThanOrEqual(2);
    expect(final.restarts).toBeUndefined(); // the sandbox outlived the worker: no replacement
    expect(await containersOf(id)).toHaveLength(0);
    await replays(handle, `kill-${drill.phase}`);
    await second.kill();
  },
  180_000,
);

test('docker kill of the sandbox under the agent → a new sandbox from the checkpoint, the session completes', async () => {
  const { repo, env } = await startDrill();
  const id = newSessionId('fault-docker-kill');
  const handle = await startOn(client, env, id, session(repo.url));
  await waitForStatus(handle, stepRunning(2), 90_000);
  await new Promise((r) => setTimeout(r, 1500));
  const [lost] = await containersOf(id);
  const faultAt = Date.now();
  await new Promise<void>((resolve, reject) =>
    spawn('docker', ['kill', lost.Id], { stdio: 'ignore' }).once('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`docker kill exited with ${code}`)),
    ),
  );
  const final = await approveAll(handle);
  recoveries['docker kill of the sandbox'] = recoveryMs(final, faultAt);

  expect(final.phase).toBe('completed');
  expect(final.restarts).toBe(1);
  const replaced = final.timeline.find((t) => t.name.startsWith('re-provision'))!;
  expect(replaced.name).toContain('is gone');
  expect(replaced.detail).toContain('from the checkpoint after step-1');
  const branch = `drydock/${id}`;
  // Step 1 ran once (its result came back with the checkpoint); step 2 ran again in full.
  expect(git(['show', `${branch}:ONE.md`], repo.bare)).toBe('one\n');
  expect(git(['show', `${branch}:RUNS.txt`], repo.bare)).toBe('ran\n');
  expect(git(['show', `${branch}:TWO.md`], repo.bare)).toBe('two\n');
  expect(pushesOf(repo.bare, branch)).toBe(1);
  expect(await containersOf(id)).toHaveLength(0);
  expect(final.removedSandboxes).toEqual([lost.Names[0].replace(/^\//, ''), final.sandbox!.name]);
  await replays(handle, 'docker-kill');
}, 180_000);

test('the only worker down longer than the host timeout → a replacement on the same host, and the first sandbox removed when it answers', async () => {
  const { repo, env, worker } = await startDrill({ DRYDOCK_HOST_TIMEOUT: '10s' });
  const id = newSessionId('fault-host-timeout');
  const handle = await startOn(client, env, id, session(repo.url));
  const running = await waitForStatus(handle, stepRunning(2), 90_000);
  await worker.kill();
  // Heartbeat timeout (10 s), then 10 s of silence on the host queue: the host counts as lost.
  await waitForHostTimeout(handle);
  await startWorkerProcess(env).ready;
  const final = await approveAll(handle);

  expect(final.phase).toBe('completed');
  expect(final.restarts).toBe(1);
  expect(final.sandbox!.host).toBe(running.sandbox!.host);
  // No reaper ran: the session itself removed both sandboxes.
  expect(final.removedSandboxes).toEqual([running.sandbox!.name, final.sandbox!.name]);
  expect(await containersOf(id)).toHaveLength(0);
  expect(pushesOf(repo.bare, `drydock/${id}`)).toBe(1);
}, 240_000);

/** Until a sandbox activity timed out waiting for its host's queue (the next workflow task replaces the sandbox). */
async function waitForHostTimeout(handle: WorkflowHandle): Promise<void> {
  const deadline = Date.now() + 90_000;
  while (Date.now() < deadline) {
    const timedOut = (await firstRun(handle).fetchHistory()).events!.some(
      (e) =>
        e.activityTaskTimedOutEventAttributes?.failure?.timeoutFailureInfo?.timeoutType ===
        temporal.api.enums.v1.TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START,
    );
    if (timedOut) return;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error('no activity timed out waiting for the host');
}

test('the Temporal server stops and starts again (same database file) during a step → the session completes', async () => {
  const address = `127.0.0.1:${await freePort()}`;
  const dbFile = path.join(await mkdtemp(path.join(tmpdir(), 'drydock-temporal-')), 'temporal.db');
  let server = await startDevServer({ address, dbFile });
  ownProcess(server.pid);
  const own = await connectTemporal(clientSettings(address));
  try {
    const ownClient = new Client({ connection: own });
    await ensureSearchAttributes(own, 'default');
    const { repo, env } = await startDrill({ TEMPORAL_ADDRESS: address });
    const id = newSessionId('fault-temporal-restart');
    const handle = await startOn(ownClient, env, id, {
      ...session(repo.url),
      publish: {},
    });
    await waitForStatus(handle, stepRunning(2), 90_000);
    server.kill('SIGTERM');
    await new Promise((r) => server.once('exit', r));
    const faultAt = Date.now();
    await new Promise((r) => setTimeout(r, 3000));
    server = await startDevServer({ address, dbFile });
    ownProcess(server.pid);
    const final = await approveAll(ownClient.workflow.getHandle(id));
    recoveries['Temporal server restart (3 s down)'] = recoveryMs(final, faultAt);

    expect(final.phase).toBe('completed');
    expect(git(['show', `drydock/${id}:RUNS.txt`], repo.bare)).toBe('ran\n');
    expect(await containersOf(id)).toHaveLength(0);
    await replays(handle, 'temporal-restart');
  } finally {
    killWorkerProcesses();
    await own.close();
    server.kill('SIGTERM');
  }
}, 180_000);

test('two Docker hosts: sandbox activities stay on the owner; kill it → the session moves to the other host', async () => {
  const repo = await makeFixtureRepo();
  const queue = newQueue('fault');
  // Host a is this machine's engine, host b a second engine with its own socket and data root.
  const second = await secondDockerHost();
  const engines = { [`${queue}-a`]: docker, [`${queue}-b`]: second.docker };
  // A lost host is noticed after the heartbeat timeout (10 s) and this much of silence on its queue.
  const envs = (['a', 'b'] as const).map((h) =>
    faultEnv(queue, {
      DRYDOCK_HOST_ID: `${queue}-${h}`,
      DRYDOCK_HOST_TIMEOUT: '10s',
      ...(h === 'b' ? { DOCKER_HOST: second.dockerHost } : {}),
    }),
  );
  const [envA, envB] = await Promise.all(envs);
  const hosts = new Map([
    [envA.DRYDOCK_HOST_ID, { env: envA, worker: startWorkerProcess(envA) }],
    [envB.DRYDOCK_HOST_ID, { env: envB, worker: startWorkerProcess(envB) }],
  ]);
  await Promise.all([...hosts.values()].map((h) => h.worker.ready));
  const id = newSessionId('fault-host-lost');
  const handle = await startOn(client, { DRYDOCK_TASK_QUEUE: queue }, id, session(repo.url));
  const running = await waitForStatus(handle, stepRunning(2), 90_000);
  const owner = running.sandbox!.host;
  // The sandbox is on its host's own engine, and only there.
  const notOwner = Object.keys(engines).find((h) => h !== owner)!;
  expect(await containersOn(engines[owner]!, id)).toHaveLength(1);
  expect(await containersOn(engines[notOwner]!, id)).toHaveLength(0);
  await new Promise((r) => setTimeout(r, 1500));
  await hosts.get(owner)!.worker.kill();
  const faultAt = Date.now();
  const final = await approveAll(handle);
  recoveries['host lost (its worker killed; 10 s host timeout)'] = recoveryMs(final, faultAt);

  expect(final.phase).toBe('completed');
  expect(final.restarts).toBe(1);
  const other = [...hosts.keys()].find((h) => h !== owner)!;
  expect(final.sandbox!.host).toBe(other);
  expect(final.timeline.find((t) => t.name.startsWith('re-provision'))!.name).toContain(`host ${owner} did not`);
  const branch = `drydock/${id}`;
  expect(git(['show', `${branch}:ONE.md`], repo.bare)).toBe('one\n');
  expect(git(['show', `${branch}:TWO.md`], repo.bare)).toBe('two\n');
  expect(pushesOf(repo.bare, branch)).toBe(1);

  // Every sandbox activity went to the queue of the host that owned the sandbox at the time.
  const sandboxActivities = new Set(['runStep', 'commitChanges', 'pushBranch', 'readTestReport', 'destroySandbox']);
  const queues = new Set<string>();
  for (const e of (await firstRun(handle).fetchHistory()).events!) {
    const s = e.activityTaskScheduledEventAttributes;
    if (s && sandboxActivities.has(s.activityType!.name!)) queues.add(s.taskQueue!.name!);
  }
  expect([...queues].sort()).toEqual([`${queue}@${owner}`, `${queue}@${other}`].sort());

  // The lost host's container outlives it; when the host comes back its reaper removes it.
  expect((await containersOn(engines[owner]!, id)).map((c) => c.Labels['drydock.host'])).toEqual([owner]);
  const back = startWorkerProcess(hosts.get(owner)!.env);
  await back.ready;
  await client.schedule.getHandle(`drydock-reaper-${owner}`).trigger();
  const deadline = Date.now() + 60_000;
  const left = () => containersOn(engines[owner]!, id);
  while ((await left()).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 500));
  expect(await left()).toHaveLength(0);
  await replays(handle, 'host-lost');
}, 240_000);

test('SIGTERM during a step → the step finishes within the grace time and the worker exits 0', async () => {
  const { repo, env, worker } = await startDrill({ DRYDOCK_SHUTDOWN_GRACE: '60s' }, { cli: true });
  const id = newSessionId('fault-sigterm');
  const handle = await startOn(client, env, id, session(repo.url));
  await waitForStatus(handle, stepRunning(2), 120_000);
  await new Promise((r) => setTimeout(r, 1000));
  const signalledAt = Date.now();
  worker.child.kill('SIGTERM');
  expect(await worker.exited).toBe(0);
  const drainedMs = Date.now() - signalledAt;
  recoveries['SIGTERM: drained (step finished, worker exited 0)'] = drainedMs;
  // Step 2 ended on the draining worker, at its first attempt.
  expect(await activityRuns(handle, 'runStep')).toEqual({ started: [1, 1], completed: 2 });

  const next = startWorkerProcess(env, { cli: true });
  const final = await approveAll(handle);
  expect(final.phase).toBe('completed');
  expect(git(['show', `drydock/${id}:RUNS.txt`], repo.bare)).toBe('ran\n');
  await next.kill();
  await replays(handle, 'sigterm');
}, 180_000);

test('SIGINT twice → the worker stops at once; the step is picked up by the next worker, not run again', async () => {
  const { repo, env, worker } = await startDrill({ DRYDOCK_SHUTDOWN_GRACE: '5m' }, { cli: true });
  const id = newSessionId('fault-sigint-twice');
  const handle = await startOn(client, env, id, {
    ...session(repo.url),
    agent: { steps: [{ run: 'echo ran >> RUNS.txt; sleep 15; echo hello >> README.md' }] },
  });
  await waitForStatus(handle, stepRunning(1), 120_000);
  worker.child.kill('SIGINT');
  await new Promise((r) => setTimeout(r, 1000));
  worker.child.kill('SIGINT');
  expect(await worker.exited).toBe(130);
  // Stopped long before the 15 s step could end.
  expect((await activityRuns(handle, 'runStep')).completed).toBe(0);

  // `drydock watch` follows a session while no worker answers, until one is back.
  const watch = spawn(path.join(projectRoot, 'bin', 'drydock'), ['watch', id], { stdio: ['ignore', 'ignore', 'pipe'] });
  let watched = '';
  watch.stderr.on('data', (c: Buffer) => (watched += c.toString()));
  const watchExit = new Promise<number | null>((resolve) => watch.once('exit', resolve));
  for (let i = 0; i < 120 && !watched.includes('no worker answers right now'); i++) {
    await new Promise((r) => setTimeout(r, 500));
  }
  expect(watched).toContain('no worker answers right now');
  const next = startWorkerProcess(env, { cli: true });
  const final = await approveAll(handle);
  expect(final.phase).toBe('completed');
  expect(await watchExit).toBe(0);
  expect(git(['show', `drydock/${id}:RUNS.txt`], repo.bare)).toBe('ran\n');
  expect(await attempts(handle, 'runStep')).toContain(2);
  await next.kill();
}, 180_000);
