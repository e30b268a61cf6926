/**
 * agentAttempts on the time-skipping test server with stub activities: three
 * attempts side by side, one picked (one approval, bound to its change, one
 * push), the others set aside without a push, whether they wait at their gate
 * or still work; refused picks; the operator's limit.
 */
import { Context } from '@temporalio/activity';
import { WorkflowFailedError, WorkflowUpdateFailedError, type WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { WorkflowBundle } from '@temporalio/worker';
import {
  ATTEMPTS_WORKFLOW_TYPE,
  attemptsStatus,
  pick,
  status,
  type AttemptsStatus,
  type SessionStatus,
} from '../../workflows/api';
import type { SessionInputDraft } from '../../workflows/input';
import { watched } from '../support/waits';
import { startEnvironment, stopEnvironment, withStubWorker, type StubWorker, type Stubs } from './harness';
import { serverTime } from './server';

let harness: { env: TestWorkflowEnvironment; bundle: WorkflowBundle };
beforeAll(async () => {
  harness = await startEnvironment();
});
afterAll(async () => {
  await stopEnvironment(harness?.env);
});

const script = (name: string, run: string) => ({ kind: 'script' as const, name, steps: [{ run }] });
const input: SessionInputDraft = {
  repo: { url: 'https://github.com/acme/app.git' },
  task: 'Add a greeting',
  requestedBy: 'carol',
  verify: { test: 'npm test' },
  attempts: [
    { agent: script('hello', 'echo hello') },
    { agent: script('hi', 'echo hi') },
    { agent: script('hey', 'echo hey') },
  ],
};

/** Each attempt's change is its own: the hash names the session's last character (its attempt number). */
const changeOf = (sessionId: string) => sessionId.slice(-1).repeat(64);
const perAttempt: Stubs = {
  commitChanges: async ({ sessionId }) => ({
    commit: sessionId.slice(-1).repeat(40),
    changed: true,
    diffstat: ` hello.txt | ${sessionId.slice(-1)} +`,
    changeHash: changeOf(sessionId),
    author: { name: 'drydock', email: 'drydock@localhost' },
  }),
};

async function awaitAttempts(
  handle: WorkflowHandle,
  ready: (s: AttemptsStatus) => boolean,
  what: string,
): Promise<AttemptsStatus> {
  for (let i = 0; i < 500; i++) {
    const now = await handle.query(attemptsStatus).catch(() => undefined);
    if (now && ready(now)) return now;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`the attempts never got to: ${what}`);
}

const waiting = (s: AttemptsStatus, n: number) =>
  s.attempts.filter((a) => a.progress?.phase === 'awaiting_approval').length === n;

async function run(
  name: string,
  stubs: Stubs,
  drive: (handle: WorkflowHandle) => Promise<void>,
): Promise<{ status: AttemptsStatus; children: SessionStatus[]; worker: StubWorker }> {
  return withStubWorker(harness, name, { ...perAttempt, ...stubs }, async (worker) => {
    const started = await harness.env.client.workflow.start(ATTEMPTS_WORKFLOW_TYPE, {
      taskQueue: worker.taskQueue,
      workflowId: worker.taskQueue,
      args: [input],
    });
    // Its result, queries and updates fail with an explanation if they get no answer (see test/support/waits.ts).
    const handle = watched(started, serverTime);
    await drive(handle);
    const final = (await handle.result()) as AttemptsStatus;
    const children = await Promise.all(
      final.attempts.map((a) => harness.env.client.workflow.getHandle(a.sessionId).query(status)),
    );
    return { status: final, children, worker };
  });
}

test('three attempts side by side; one picked and pushed, two set aside without a push, one approval', async () => {
  // The picked attempt's push waits until a second pick was refused: the session is still running then.
  let refusedAgain!: () => void;
  const secondPickRefused = new Promise<void>((resolve) => (refusedAgain = resolve));
  const pushAfterSecondPick: Stubs = {
    pushBranch: async ({ commit }) => {
      await secondPickRefused;
      return { commit, alreadyPushed: false };
    },
  };
  const {
    status: final,
    children,
    worker,
  } = await run('pick', pushAfterSecondPick, async (handle) => {
    const shown = await awaitAttempts(handle, (s) => waiting(s, 3), 'three attempts at their gate');
    expect(shown.phase).toBe('awaiting_pick');
    expect(shown.attempts.map((a) => [a.sessionId, a.agent, a.progress?.change?.diffstat])).toEqual([
      [`${handle.workflowId}.1`, 'hello', ' hello.txt | 1 +'],
      [`${handle.workflowId}.2`, 'hi', ' hello.txt | 2 +'],
      [`${handle.workflowId}.3`, 'hey', ' hello.txt | 3 +'],
    ]);
    expect(shown.attempts[1].progress).toMatchObject({
      verification: { passed: true },
      pending: { action: 'push', change: changeOf('2') },
      agent: { label: 'hi', costUsd: 0 },
    });
    const refused = (args: object) =>
      expect(handle.executeUpdate(pick, { args: [args as never] })).rejects.toThrow(WorkflowUpdateFailedError);
    await refused({ attempt: 4, by: 'alice' });
    await refused({ attempt: 2, by: 'alice', change: changeOf('1') }); // stale: attempt 1's change
    await refused({ attempt: 2, by: 'alice' }); // a pick names the change it approves
    await refused({ attempt: 2, by: 'alice', change: changeOf('2').slice(0, 12) }); // whole, not a prefix
    await handle.executeUpdate(pick, {
      args: [{ attempt: 2, by: 'alice', change: changeOf('2'), review: { ms: 90_000, via: 'console' } }],
    });
    try {
      await refused({ attempt: 3, by: 'alice' }); // already picked
    } finally {
      refusedAgain();
    }
  });
  expect(final.phase).toBe('completed');
  expect(final.picked).toMatchObject({ attempt: 2, by: 'alice', change: changeOf('2') });
  expect(children.map((c) => [c.phase, c.failureCause, c.pushed !== undefined])).toEqual([
    ['cancelled', 'not_picked', false],
    ['completed', undefined, true],
    ['cancelled', 'not_picked', false],
  ]);
  expect(children[0].error).toBe(
    `set aside: alice picked ${final.picked!.sessionId}; this attempt ends without a push`,
  );
  // One approval, the picked change's, with the pick's review time; one push, of that change.
  const approvals = (worker.args.recordAudit as { kind: string; sessionId: string; data: object }[]).filter(
    (a) => a.kind === 'approval',
  );
  expect(approvals).toEqual([
    expect.objectContaining({
      sessionId: final.picked!.sessionId,
      actor: 'alice',
      data: expect.objectContaining({
        decision: 'approve',
        change: changeOf('2'),
        review: { ms: 90_000, via: 'console' },
      }),
    }),
  ]);
  expect(
    (worker.args.pushBranch as { sessionId: string; branch: string }[]).map((p) => [p.sessionId, p.branch]),
  ).toEqual([[final.picked!.sessionId, `drydock/${final.sessionId}`]]);
  // Every attempt's sandbox was torn down.
  expect(worker.args.destroySandbox).toHaveLength(3);
});

test('an attempt still working when another is picked is cancelled, torn down, and ends without a push', async () => {
  const stubs: Stubs = {
    runStep: async ({ key, sessionId }) => {
      if (key === 'step-1' && sessionId.endsWith('.3')) {
        for (;;) {
          Context.current().heartbeat();
          await Context.current().sleep(100);
        }
      }
      return { exitCode: 0, timedOut: false, outputTail: `${key} ok`, artifact: `steps/${key}.log` };
    },
  };
  const {
    status: final,
    children,
    worker,
  } = await run('aside-working', stubs, async (handle) => {
    await awaitAttempts(handle, (s) => waiting(s, 2), 'two attempts at their gate');
    await handle.executeUpdate(pick, { args: [{ attempt: 1, by: 'alice', change: changeOf('1') }] });
  });
  expect(final.picked?.attempt).toBe(1);
  expect(children.map((c) => [c.phase, c.failureCause])).toEqual([
    ['completed', undefined],
    ['cancelled', 'not_picked'],
    ['cancelled', 'not_picked'],
  ]);
  expect(children[2].timeline.find((t) => t.name.startsWith('step 1'))?.ok).toBe(false);
  expect(worker.args.pushBranch).toHaveLength(1);
  expect(worker.args.destroySandbox).toHaveLength(3);
});

test('more attempts than the operator allows, or attempts asked of agentSession, fail naming the field', async () => {
  await withStubWorker(
    harness,
    'too-many',
    { operatorLimits: async () => ({ maxAttempts: 2, pilotConcurrency: 4 }) },
    async ({ taskQueue }) => {
      const handle = await harness.env.client.workflow.start(ATTEMPTS_WORKFLOW_TYPE, {
        taskQueue,
        workflowId: taskQueue,
        args: [input],
      });
      const err = await handle.result().catch((e: WorkflowFailedError) => e);
      expect(String((err as WorkflowFailedError).cause?.message)).toMatch(/attempts: 3 asked, the operator allows 2/);
      const session = await harness.env.client.workflow.start('agentSession', {
        taskQueue,
        workflowId: `${taskQueue}-session`,
        args: [{ ...input, attempts: 3 }],
      });
      const refused = await session.result().catch((e: WorkflowFailedError) => e);
      expect(String((refused as WorkflowFailedError).cause?.message)).toMatch(
        /attempts: parallel attempts run as workflow type agentAttempts/,
      );
    },
  );
});
