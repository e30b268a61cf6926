/** The reaper: sandboxes that no teardown will remove are found and removed; live ones are kept. */
import { LABELS } from '../../sandbox/provider';
import {
  containersOf,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  runReaper,
  scriptedSession,
  startSession,
  startStack,
  waitForStatus,
} from '../support/helpers';
import { createSandbox } from '../support/docker';

test('reapSandboxes removes the sandbox of a terminated session and an expired one, and spares a running session', async () => {
  const stack = await startStack();
  const repo = await makeFixtureRepo();
  const longSession = scriptedSession(repo.url, 'wait', 'sleep 300');
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
    await createSandbox(expired, {
      labels: {
        [LABELS.session]: runningId,
        [LABELS.host]: stack.config.DRYDOCK_HOST_ID,
        [LABELS.expires]: new Date(Date.now() - 60_000).toISOString(),
      },
    });

    const reaped = await runReaper(stack);
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
