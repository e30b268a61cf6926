/**
 * kill -9 of the worker process in the middle of a long step: a new worker
 * finishes the session; one container, the step ran once, one push. And the
 * window the soak once hit by chance, placed on purpose: the step still runs
 * when the retried attempt's runner starts waiting for it, and ends only then.
 * Then the kill in each other window of drydock-run, held there by the fault
 * worker's DRYDOCK_TEST_HOLD_RUNNER: the runner starting, the checkpoint being
 * read, the answer being written.
 */
import { createHash } from 'node:crypto';
import type Docker from 'dockerode';
import {
  approvePush,
  docker,
  connectClient,
  containersOf,
  git,
  makeFixtureRepo,
  newSessionId,
  scriptedSession,
  startSession,
  testConfig,
  waitForStatus,
} from '../support/helpers';
import { newQueue, startWorkerProcess, workerEnv, type WorkerEnv, type WorkerProcess } from '../support/workers';
import { watched } from '../support/waits';
import { attempts, gate, heldCommand, pushesOf, stopGates } from '../support/drills';
import { CheckpointStore } from '../../sandbox/checkpoints';
import { openDatabase } from '../../store/db';

afterEach(stopGates);

test('kill -9 the worker during a long step → a new worker completes the session, exactly once', async () => {
  const repo = await makeFixtureRepo();
  const env = await workerEnv(newQueue('crash'));
  const client = await connectClient();
  const id = newSessionId('crash');

  let worker = startWorkerProcess(env, { cli: true });
  try {
    const handle = await startSession(
      { client, config: env },
      id,
      scriptedSession(
        repo.url,
        'survive a crash',
        `echo ran >> RUNS.txt; ${heldCommand('step-1', 'echo hello >> README.md')}`,
        { verify: { test: 'sh check.sh' } },
      ),
    );
    const step1 = gate(id, 'step-1');
    await step1.reached; // the step is running inside the sandbox, and waits until the kill
    const before = (await containersOf(id)).map((c) => c.Id);
    await worker.kill();
    step1.open();

    worker = startWorkerProcess(env, { cli: true });
    await waitForStatus(handle, (s) => s.phase === 'awaiting_approval', 90_000);
    // The same container all along: the new worker found it, made no other.
    expect((await containersOf(id)).map((c) => c.Id)).toEqual(before);
    expect(before).toHaveLength(1);
    const final = await approvePush(handle, 'ops');

    expect(final.phase).toBe('completed');
    const branch = `drydock/${id}`;
    expect(git(['show', `${branch}:RUNS.txt`], repo.bare)).toBe('ran\n'); // the step ran once
    expect(
      git(['reflog', 'show', '--format=%H', `refs/heads/${branch}`], repo.bare)
        .trim()
        .split('\n'),
    ).toHaveLength(1);
    expect(await containersOf(id)).toHaveLength(0);

    expect(final.restarts).toBeUndefined();

    // The step's activity really was cut off and retried on the new worker.
    const started = (await handle.fetchHistory()).events!.filter((e) => e.activityTaskStartedEventAttributes);
    const scheduled = (await handle.fetchHistory()).events!.filter((e) => e.activityTaskScheduledEventAttributes);
    const stepIndex = scheduled.findIndex(
      (e) => e.activityTaskScheduledEventAttributes!.activityType!.name === 'runStep',
    );
    expect(started[stepIndex].activityTaskStartedEventAttributes!.attempt).toBeGreaterThanOrEqual(2);
  } finally {
    await worker.kill();
    await client.connection.close();
  }
});

/** drydock-run calls in the container, each counted once (not its own subshells). */
async function runnersIn(container: Docker.ContainerInfo): Promise<number> {
  const top = await docker.getContainer(container.Id).top();
  const pid = top.Titles.indexOf('PID');
  const ppid = top.Titles.indexOf('PPID');
  const runners = (top.Processes as string[][]).filter((p) => / \/\S*drydock-run /.test(` ${p[p.length - 1]} `));
  const pids = new Set(runners.map((p) => p[pid]));
  return runners.filter((p) => !pids.has(p[ppid])).length;
}

test('kill -9 the worker while a step runs, end the step only once the retry waits for it → the step’s own result', async () => {
  const repo = await makeFixtureRepo();
  const env = await workerEnv(newQueue('crash-wait'));
  const client = await connectClient();
  const id = newSessionId('crash-wait');

  let worker = startWorkerProcess(env, { cli: true });
  try {
    const handle = watched(
      await startSession(
        { client, config: env },
        id,
        scriptedSession(
          repo.url,
          'outlive a crash',
          `echo ran >> RUNS.txt; ${heldCommand('step-1', 'echo hello >> README.md && echo the-step-output')}`,
          { verify: { test: 'sh check.sh' } },
        ),
      ),
    );
    const step1 = gate(id, 'step-1');
    await step1.reached;
    await worker.kill();
    worker = startWorkerProcess(env, { cli: true });
    // The retried attempt's runner waits beside the first one, whose step still runs.
    await retryWaitsBeside((await containersOf(id))[0]);
    step1.open(); // the first runner ends its step (and everything else of the sandbox user) now

    const after = await waitForStatus(handle, (s) => s.phase !== 'agent', 90_000);
    const step = after.timeline.find((t) => t.name.startsWith('step 1'))!;
    expect(step).toMatchObject({ ok: true, exitCode: 0 }); // not the runner's death (-1) as the step's exit
    expect(step.outputTail).toContain('the-step-output');
    const final = await approvePush(handle, 'ops');
    expect(final.phase).toBe('completed');
    const branch = `drydock/${id}`;
    expect(git(['show', `${branch}:RUNS.txt`], repo.bare)).toBe('ran\n'); // the step ran once
    expect(await containersOf(id)).toHaveLength(0);
  } finally {
    await worker.kill();
    await client.connection.close();
  }
}, 300_000);

/** Until the retried attempt's drydock-run waits beside the first one's, held in the sandbox. */
async function retryWaitsBeside(container: Docker.ContainerInfo): Promise<void> {
  for (let polls = 0; (await runnersIn(container)) < 2; polls++) {
    if (polls > 400) throw new Error('the retried attempt never called drydock-run beside the first');
    await new Promise((r) => setTimeout(r, 250));
  }
}

interface CrashWindow {
  name: string;
  what: string;
  /** Where the first attempt's drydock-run holds (sandbox-images/base/drydock-run, DRYDOCK_TEST_HOLD_RUNNER)... */
  point?: string;
  /** ...or the activity after which the worker holds (test/support/fault-worker.ts). */
  holdAfter?: string;
  /**
   * When the held runner goes on: once the retry's runner waits beside it (the default), at
   * once (as it would after a real kill), or never (the retry runs the step and ends it).
   */
  letGo?: 'beside' | 'at kill' | 'never';
}

/** The windows of runStep the worker is killed in, in their order; the others let the first runner go on once the retry's runner waits beside it. */
const windows: CrashWindow[] = [
  { name: 'claim', point: 'claim', what: 'the runner starting, the step not yet claimed', letGo: 'never' },
  { name: 'start', point: 'start', what: 'the runner starting, the step claimed, its command not started' },
  { name: 'answer', point: 'answer', what: 'the step ended and its result recorded, the runner about to answer' },
  { name: 'checkpoint', point: 'checkpoint', what: 'the step ended, its checkpoint being read for the answer' },
  { name: 'stored', holdAfter: 'runStep', what: 'the result and checkpoint stored by the worker, Temporal not told' },
];

/** Once `first` holds in `window`, kills it; the worker that takes over, with the held runner let go when it should. */
async function killIn(window: CrashWindow, first: WorkerProcess, id: string, env: WorkerEnv): Promise<WorkerProcess> {
  const held = window.point ? gate(id, `drydock-run-${window.point}`) : undefined;
  await (held ? held.reached : first.held);
  await first.kill();
  const next = startWorkerProcess(env, { cli: true });
  if (held && window.letGo === 'at kill') held.open();
  if (held && (window.letGo ?? 'beside') === 'beside') {
    await retryWaitsBeside((await containersOf(id))[0]);
    held.open();
  }
  return next;
}

test.each(windows)(
  'kill -9 the worker at $name ($what) → the step ran once, its own result and checkpoint',
  async (window) => {
    const repo = await makeFixtureRepo();
    const env = await workerEnv(newQueue(`crash-${window.name}`));
    const client = await connectClient();
    const db = await openDatabase(testConfig());
    const id = newSessionId(`crash-${window.name}`);

    let worker = startWorkerProcess(env, { holdRunner: window.point, holdAfter: window.holdAfter });
    try {
      const handle = watched(
        await startSession(
          { client, config: env },
          id,
          scriptedSession(
            repo.url,
            'outlive a crash',
            'echo ran >> RUNS.txt; echo hello >> README.md; echo the-step-output',
            { verify: { test: 'sh check.sh' } },
          ),
        ),
      );
      worker = await killIn(window, worker, id, env);

      const after = await waitForStatus(handle, (s) => s.phase === 'awaiting_approval', 120_000);
      const step = after.timeline.find((t) => t.name.startsWith('step 1'))!;
      expect(step).toMatchObject({ ok: true, exitCode: 0 }); // not the runner's death (-1) as the step's exit
      expect(step.outputTail).toContain('the-step-output');
      expect((await attempts(handle, 'runStep'))[0]).toBeGreaterThanOrEqual(2); // cut off, and retried
      // The checkpoint of the step's own tree: what a replacement sandbox would start from.
      const checkpoint = (await new CheckpointStore(db.pool).latest(id))!;
      expect(checkpoint.step).toBe('step-1');
      expect(checkpoint.diff.toString()).toMatch(/\+\+\+ b\/RUNS\.txt\n@@ [^\n]*\n\+ran\n/);
      expect(checkpoint.diff.toString()).toMatch(/\+hello\n/);

      const final = await approvePush(handle, 'ops');
      expect(final.phase).toBe('completed');
      const branch = `drydock/${id}`;
      expect(git(['show', `${branch}:RUNS.txt`], repo.bare)).toBe('ran\n'); // the step ran once
      expect(pushesOf(repo.bare, branch)).toBe(1);
      expect(await containersOf(id)).toHaveLength(0);
    } finally {
      await worker.kill();
      await client.connection.close();
      await db.close();
    }
  },
  300_000,
);

/** A write step's content: more than the pipes and sockets between the worker and the runner hold. */
const BIG = Array.from({ length: 120_000 }, (_, i) => `line ${String(i).padStart(3, '0')}`).join('\n') + '\n';

test('kill -9 the worker while it sends a write step its input (the runner not reading yet) → the whole file, written once', async () => {
  const repo = await makeFixtureRepo();
  const env = await workerEnv(newQueue('crash-input'));
  const client = await connectClient();
  const id = newSessionId('crash-input');
  const window: CrashWindow = { name: 'input', point: 'input', what: 'the input being sent', letGo: 'at kill' };

  let worker = startWorkerProcess(env, { holdRunner: window.point });
  try {
    const handle = watched(
      await startSession({ client, config: env }, id, {
        repo: { url: repo.url },
        task: 'outlive a crash',
        agent: { steps: [{ write: { path: 'BIG.txt', content: BIG } }] },
        verify: { test: 'tail -n 1 BIG.txt | grep -qx "line 119999"' },
      }),
    );
    // The worker cannot have sent it all: the runner reads none of it until let go.
    worker = await killIn(window, worker, id, env);

    const after = await waitForStatus(handle, (s) => s.phase === 'awaiting_approval', 120_000);
    // Only a retry could end it (the first worker died inside the activity); the history, four copies of the input, is too big to read.
    expect(after.timeline.find((t) => t.name.startsWith('step 1'))).toMatchObject({ ok: true, exitCode: 0 });
    const final = await approvePush(handle, 'ops');
    expect(final.phase).toBe('completed');
    const blob = `drydock/${id}:BIG.txt`;
    expect(Number(git(['cat-file', '-s', blob], repo.bare))).toBe(BIG.length); // not the part that came through
    const wanted = createHash('sha1').update(`blob ${BIG.length}\0${BIG}`).digest('hex');
    expect(git(['rev-parse', blob], repo.bare).trim()).toBe(wanted);
    expect(pushesOf(repo.bare, `drydock/${id}`)).toBe(1);
    expect(await containersOf(id)).toHaveLength(0);
  } finally {
    await worker.kill();
    await client.connection.close();
  }
}, 300_000);
