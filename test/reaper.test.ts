/** The reaper: sandboxes that no teardown will remove are found and removed; live ones are kept. */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { LABELS, DockerSandboxes } from '../lib/sandbox';
import { hostQueueOf } from '../workers/worker';
import type { Reaped } from '../activities/reaper';
import {
  containersOf,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  startSession,
  startStack,
  waitForStatus,
} from './helpers';

test('reapSandboxes removes the sandbox of a terminated session and an expired one, and spares a running session', async () => {
  const stack = await startStack();
  const repo = await makeFixtureRepo();
  const longSession = { repo: { url: repo.url }, task: 'wait', agent: { steps: [{ run: 'sleep 300' }] } };
  try {
    const schedule = await stack.client.schedule.getHandle(`drydock-reaper-${stack.config.DRYDOCK_HOST_ID}`).describe();
    expect(schedule.action).toMatchObject({ type: 'startWorkflow', workflowType: 'reapSandboxes' });

    const terminatedId = newSessionId('terminated');
    const terminated = await startSession(stack, terminatedId, longSession);
    const runningId = newSessionId('running');
    const running = await startSession(stack, runningId, longSession);
    await waitForStatus(terminated, inPhase('agent'));
    await waitForStatus(running, inPhase('agent'));
    await terminated.terminate('killed from outside: no teardown runs');
    expect(await containersOf(terminatedId)).toHaveLength(1);

    // A leftover of the running session, past its expiry: removed although the session runs.
    const expired = 'drydock-expired-leftover';
    await new DockerSandboxes().create({
      name: expired,
      image: stack.config.DRYDOCK_BASE_IMAGE!,
      labels: {
        [LABELS.session]: runningId,
        [LABELS.host]: stack.config.DRYDOCK_HOST_ID,
        [LABELS.expires]: new Date(Date.now() - 60_000).toISOString(),
      },
      cpus: 0.5,
      memoryBytes: 128 * 1024 ** 2,
      pids: 64,
      tmpBytes: 16 * 1024 ** 2,
      egressDir: await mkdtemp(path.join(tmpdir(), 'drydock-egress-')),
    });

    const reaped: Reaped[] = await stack.client.workflow.execute('reapSandboxes', {
      workflowId: newSessionId('reap'),
      taskQueue: stack.config.DRYDOCK_TASK_QUEUE,
      args: [{ hostQueue: hostQueueOf(stack.config) }],
    });
    expect(reaped.sort((a, b) => a.sandbox.localeCompare(b.sandbox))).toEqual([
      { sandbox: expired, sessionId: runningId, reason: expect.stringMatching(/^expired at /) },
      { sandbox: `drydock-${terminatedId}`, sessionId: terminatedId, reason: 'its session is closed' },
    ]);
    expect(await containersOf(terminatedId)).toHaveLength(0);
    expect((await containersOf(runningId)).map((c) => c.Names[0])).toEqual([`/drydock-${runningId}`]);

    await running.cancel();
    await running.result().catch(() => undefined);
    expect(await containersOf(runningId)).toHaveLength(0);
  } finally {
    await stack.stop();
  }
});
