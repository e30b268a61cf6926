/**
 * kill -9 of the worker process in the middle of a long step: a new worker
 * finishes the session; one container, the step ran once, one push. And the
 * window the soak once hit by chance, placed on purpose: the step still runs
 * when the retried attempt's runner starts waiting for it, and ends only then.
 */
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
  waitForStatus,
} from '../support/helpers';
import { newQueue, startWorkerProcess, workerEnv } from '../support/workers';
import { watched } from '../support/waits';
import { gate, heldCommand, stopGates } from '../support/drills';

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
    const [container] = await containersOf(id);
    for (let polls = 0; (await runnersIn(container)) < 2; polls++) {
      if (polls > 400) throw new Error('the retried attempt never called drydock-run beside the first');
      await new Promise((r) => setTimeout(r, 250));
    }
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
