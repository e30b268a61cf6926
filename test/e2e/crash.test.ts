/**
 * kill -9 of the worker process in the middle of a long step: a new worker
 * finishes the session; one container, the step ran once, one push.
 */
import {
  approvePush,
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
