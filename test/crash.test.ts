/**
 * kill -9 of the worker process in the middle of a long step: a new worker
 * finishes the session; one container, the step ran once, one push.
 */
import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { decide, type SessionStatus } from '../workflows/api';
import {
  containersOf,
  git,
  makeFixtureRepo,
  newSessionId,
  spawnWorker,
  startSession,
  testConfig,
  waitForStatus,
} from './helpers';

test('kill -9 the worker during a long step → a new worker completes the session, exactly once', async () => {
  const repo = await makeFixtureRepo();
  const config = testConfig({ DRYDOCK_TASK_QUEUE: `crash-${randomBytes(4).toString('hex')}` });
  const env = {
    TEMPORAL_ADDRESS: config.TEMPORAL_ADDRESS,
    DRYDOCK_TASK_QUEUE: config.DRYDOCK_TASK_QUEUE,
    DRYDOCK_HOST_ID: 'crashhost',
    DRYDOCK_DATA_DIR: config.DRYDOCK_DATA_DIR,
  };
  const connection = await Connection.connect({ address: config.TEMPORAL_ADDRESS });
  const client = new Client({ connection });
  const id = newSessionId('crash');

  let worker = spawnWorker(env);
  try {
    const handle = await startSession({ client, config }, id, {
      repo: { url: repo.url },
      task: 'survive a crash',
      agent: { steps: [{ run: 'echo ran >> RUNS.txt; sleep 8; echo hello >> README.md' }] },
      verify: { test: 'sh check.sh' },
    });
    await waitForStatus(handle, (s) => s.timeline.some((t) => t.name.startsWith('step 1')), 90_000);
    await new Promise((r) => setTimeout(r, 1500)); // the step is running inside the sandbox
    const before = (await containersOf(id)).map((c) => c.Id);
    worker.kill('SIGKILL');
    await new Promise((r) => worker.once('exit', r));

    worker = spawnWorker(env);
    await waitForStatus(handle, (s) => s.phase === 'awaiting_approval', 90_000);
    // The same container all along: the new worker found it, made no other.
    expect((await containersOf(id)).map((c) => c.Id)).toEqual(before);
    expect(before).toHaveLength(1);
    await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'ops' }] });
    const final = (await handle.result()) as SessionStatus;

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
    worker.kill('SIGKILL');
    await connection.close();
  }
});
