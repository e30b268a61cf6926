/**
 * Fault drills with real processes: kill -9 of the worker in each phase, a
 * sandbox killed under the agent, the Temporal server restarted, a double
 * SIGINT (the drills across two hosts, the host lost and the drain with
 * SIGTERM, are test/e2e/multi-host.test.ts). Every session completes, with one
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
import { Client, type WorkflowHandle } from '@temporalio/client';
import { ensureSearchAttributes, startDevServer } from '../../platform/temporal';
import { approve, status, type SessionStatus } from '../../workflows/api';
import { temporal } from '@temporalio/proto';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github';
import { ownProcess } from '../support/leftovers';
import {
  clientSettings,
  connectClient,
  containersOf,
  freePort,
  git,
  makeFixtureRepo,
  newSessionId,
  projectRoot,
  startSession,
  waitForStatus,
} from '../support/helpers';
import { connectTemporal } from '../../platform/temporal-connection';
import {
  activityRuns,
  approveAll,
  attempts,
  firstRun,
  pushesOf,
  recoveryMs,
  recoveryTable,
  replays,
  gate,
  heldCommand,
  lastAttemptOf,
  type Gate,
  session,
  STEP_2,
  stopGates,
} from '../support/drills';
import {
  killWorkerProcesses,
  newQueue,
  startWorkerProcess,
  workerEnv,
  type HeldCall,
  type WorkerProcess,
} from '../support/workers';

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
afterEach(stopGates);

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

const recoveries = recoveryTable();

interface Drill {
  phase: string;
  /** Kill once the worker holds after this activity (its work done, not reported): `<type>[@<n-th call>]`. */
  holdAfter?: string;
  /** Or kill while this gate holds a command of the session (see heldCommand)... */
  atGate?: string;
  /** ...or once the status shows this (a phase with nothing running). */
  when?: (s: SessionStatus) => boolean;
  extra?: Record<string, unknown>;
  /** The activity whose attempt was cut off: it ran again on the new worker. */
  retried: string;
}

const drills: Drill[] = [
  { phase: 'provisioning', holdAfter: 'provisionSandbox', retried: 'provisionSandbox' },
  { phase: 'agent', atGate: STEP_2, retried: 'runStep' },
  {
    phase: 'verifying',
    atGate: 'verify',
    extra: { verify: { test: heldCommand('verify', 'sh check.sh') } },
    retried: 'runStep',
  },
  { phase: 'awaiting_approval', when: (s) => s.phase === 'awaiting_approval', retried: '' },
  { phase: 'publishing-push', holdAfter: 'pushBranch', retried: 'pushBranch' },
  { phase: 'publishing-pull-request', holdAfter: 'openPullRequest', retried: 'openPullRequest' },
  // The second teardown: the first removes the sandbox as the session waits for follow-ups (publishing).
  { phase: 'tearing_down', holdAfter: 'destroySandbox@2', retried: 'destroySandbox' },
];

/** Runs the drill's session up to its fault's place; resolves with the call the worker holds, if it holds one. */
async function untilFault(
  drill: Drill,
  handle: WorkflowHandle,
  worker: WorkerProcess,
  atGate?: Gate,
): Promise<HeldCall | undefined> {
  if (drill.holdAfter) {
    // Approvals come from outside, as they would; the worker holds after the activity.
    return Promise.race([approveAll(handle).then(() => undefined), worker.held]);
  }
  if (atGate) await atGate.reached;
  else await waitForStatus(handle, drill.when!, 120_000);
  return undefined;
}

test.each(drills)(
  'kill -9 the worker while $phase → a new worker completes the session, one push, one PR',
  async (drill) => {
    const id = newSessionId(`fault-${drill.phase}`);
    const { repo, env, worker: first } = await startDrill({}, { holdAfter: drill.holdAfter });
    const handle = await startOn(client, env, id, session(repo.url, drill.extra));
    // Step 2 waits at its gate until it is opened: here at once, unless the fault is placed there.
    const step2 = gate(id, STEP_2);
    const atGate = drill.atGate === STEP_2 ? step2 : drill.atGate ? gate(id, drill.atGate) : undefined;
    if (atGate !== step2) step2.open();
    const held = await untilFault(drill, handle, first, atGate);
    if (drill.holdAfter) expect(held).toMatchObject({ workflowId: id });
    await first.kill();
    const faultAt = Date.now();
    atGate?.open();
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
    // The attempt the kill cut off ran again: the held call exactly, or the step under way at the gate.
    if (held) expect(await lastAttemptOf(handle, held)).toBeGreaterThan(held.attempt);
    else if (drill.retried) expect(Math.max(...(await attempts(handle, drill.retried)))).toBeGreaterThanOrEqual(2);
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
  const step2 = gate(id, STEP_2);
  await step2.reached;
  const [lost] = await containersOf(id);
  const faultAt = Date.now();
  await new Promise<void>((resolve, reject) =>
    spawn('docker', ['kill', lost.Id], { stdio: 'ignore' }).once('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`docker kill exited with ${code}`)),
    ),
  );
  step2.open(); // in the replacement, where step 2 runs again
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
  const step2 = gate(id, STEP_2);
  await step2.reached;
  const running = await handle.query(status);
  await worker.kill();
  step2.open(); // it ends in the first sandbox with no worker to hear it, and runs again in the replacement
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
    const step2 = gate(id, STEP_2);
    await step2.reached;
    server.kill('SIGTERM');
    await new Promise((r) => server.once('exit', r));
    const faultAt = Date.now();
    await new Promise((r) => setTimeout(r, 3000));
    server = await startDevServer({ address, dbFile });
    ownProcess(server.pid);
    step2.open(); // the step was under way all the time the server was down
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

test('SIGINT twice → the worker stops at once; the step is picked up by the next worker, not run again', async () => {
  const { repo, env, worker } = await startDrill({ DRYDOCK_SHUTDOWN_GRACE: '5m' }, { cli: true });
  const id = newSessionId('fault-sigint-twice');
  const handle = await startOn(client, env, id, {
    ...session(repo.url),
    agent: { steps: [{ run: `echo ran >> RUNS.txt; ${heldCommand('step-1', 'echo hello >> README.md')}` }] },
  });
  const step1 = gate(id, 'step-1');
  await step1.reached;
  worker.child.kill('SIGINT');
  await new Promise((r) => setTimeout(r, 1000));
  worker.child.kill('SIGINT');
  expect(await worker.exited).toBe(130);
  // Stopped while the step still waited: it had not ended.
  expect((await activityRuns(handle, 'runStep')).completed).toBe(0);
  step1.open();

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
}, 300_000); // two workers, a watch and a held step: 180 s ran out at a load average of 20 to 30
