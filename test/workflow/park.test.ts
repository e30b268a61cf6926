/**
 * Parking (workflows/session/sandbox.ts parkSandbox, bringBack): a change
 * that waits at its gate longer than the operator's parkAfter gives its
 * sandbox up (checkpointed first); approving it pushes from the host's mirror
 * without a sandbox, and a follow-up, an attach or a push that needs the
 * sandbox brings one back from the checkpoint. Stub activities on the
 * time-skipping test server (harness.ts).
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { WorkflowBundle } from '@temporalio/worker';
import type { WorkflowHandle } from '@temporalio/client';
import { attach, decide, detach, followup } from '../../workflows/api';
import type { SessionInputDraft } from '../../workflows/input';
import {
  acceptAsGiven,
  awaitApproval,
  awaitStatus,
  BASE_COMMIT,
  CHANGE,
  COMMIT,
  OPEN_POLICY,
  runSession,
  startEnvironment,
  stopEnvironment,
  type Stubs,
} from './harness';

let harness: { env: TestWorkflowEnvironment; bundle: WorkflowBundle };
beforeAll(async () => {
  harness = await startEnvironment();
});
afterAll(async () => {
  await stopEnvironment(harness?.env);
});

const input: SessionInputDraft = {
  repo: { url: 'https://github.com/acme/app.git' },
  task: 'Add a greeting',
  requestedBy: 'rita',
  agent: { kind: 'script', steps: [{ run: 'echo hi > hello.txt' }] },
  verify: { test: 'npm test' },
  approval: { required: ['push'], approvers: ['alice'] },
};
/** The operator parks after 15 minutes at a gate. */
const parking: Stubs = { repoPolicy: acceptAsGiven({ ...OPEN_POLICY, parkAfter: '15m' }) };

const UNTIL_GATE = [
  'repoPolicy',
  'provisionSandbox',
  'runStep step-1',
  'commitChanges',
  'runStep verify',
  'recordAudit verification-1',
];
const PARK = 'destroySandbox';
const TEARDOWN = ['destroySandbox', 'recordSessionMetrics'];

/** Waits at the gate past parkAfter (skipping time) until the session says it is parked. */
async function parkAtGate(handle: WorkflowHandle): Promise<void> {
  await awaitApproval(handle, 'push');
  await harness.env.sleep('16m');
  const parked = await awaitStatus(handle, (s) => s.parked !== undefined, 'the session parked');
  expect(parked).toMatchObject({ phase: 'awaiting_approval', parked: { sandbox: 'sandbox-0' } });
}

test('a change waiting past parkAfter parks (checkpoint, teardown); approved, it is pushed once without a new sandbox', async () => {
  const run = await runSession(harness, 'park-approve', input, parking, async (handle) => {
    await parkAtGate(handle);
    await handle.executeUpdate(decide, {
      args: [{ decision: 'approve', action: 'push', by: 'alice', change: CHANGE }],
    });
  });
  expect(run.calls).toEqual([...UNTIL_GATE, PARK, 'recordAudit approval/push', 'pushBranch', ...TEARDOWN]);
  // The parking teardown keeps (and first takes) the checkpoint; the session's own teardown drops it.
  expect(run.args.destroySandbox).toEqual([
    { sessionId: run.id, replaced: true, checkpointBase: BASE_COMMIT },
    { sessionId: run.id },
  ]);
  expect(run.args.pushBranch).toMatchObject([{ sandbox: 'sandbox-0', commit: COMMIT }]);
  expect(run.status).toMatchObject({ phase: 'completed', pushed: { commit: COMMIT } });
  expect(run.status.timeline.map((r) => r.name)).toContain('park: no decision within 15m');
});

test('a follow-up to a parked session brings a sandbox back from the checkpoint; its round and push happen there', async () => {
  const NEXT = { commit: 'f'.repeat(40), change: 'a'.repeat(64) };
  let commits = 0;
  const stubs: Stubs = {
    ...parking,
    commitChanges: async () => ({
      ...(++commits === 1 ? { commit: COMMIT, changeHash: CHANGE } : { commit: NEXT.commit, changeHash: NEXT.change }),
      changed: true,
      diffstat: ' hello.txt | 2 +',
      author: { name: 'drydock', email: 'drydock@localhost' },
    }),
  };
  const run = await runSession(harness, 'park-followup', input, stubs, async (handle) => {
    await parkAtGate(handle);
    await handle.executeUpdate(followup, { args: [{ by: 'rita', steps: [{ run: 'echo more >> hello.txt' }] }] });
    const back = await awaitStatus(handle, (s) => s.pendingApproval?.change === NEXT.change, 'round 2 at the gate');
    expect(back.parked).toBeUndefined();
    expect(back.sandbox).toMatchObject({ name: 'sandbox-1' });
    await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'alice' }] });
  });
  expect(run.calls).toEqual([
    ...UNTIL_GATE,
    PARK,
    'recordAudit followup-2',
    'provisionSandbox 1',
    'runStep r2-step-1',
    'commitChanges',
    'runStep r2-verify',
    'recordAudit r2-verification-1',
    'recordAudit r2-approval/push',
    'pushBranch',
    'destroySandbox 1',
    'recordSessionMetrics',
  ]);
  // The next generation starts where the parked one was: the session's base commit plus its checkpoint.
  expect(run.args.provisionSandbox[1]).toMatchObject({ generation: 1, repo: { ref: BASE_COMMIT } });
  expect(run.args.pushBranch).toMatchObject([{ sandbox: 'sandbox-1', commit: NEXT.commit }]);
  expect(run.status.timeline.map((r) => r.name)).toContain('re-provision: parked');
  expect(run.status).toMatchObject({ phase: 'completed', round: 2, pushed: { commit: NEXT.commit } });
});

test('an attach to a parked session is answered in a sandbox brought back from the checkpoint', async () => {
  const run = await runSession(harness, 'park-attach', input, parking, async (handle) => {
    await parkAtGate(handle);
    const attachment = await handle.executeUpdate(attach, { args: [{ by: 'rita' }] });
    expect(attachment).toMatchObject({ by: 'rita', sandbox: 'sandbox-1', during: 'awaiting_approval' });
    await handle.executeUpdate(detach, { args: [{ by: 'rita' }] });
    await awaitStatus(handle, (s) => s.round === 2 && s.pendingApproval !== undefined, 'the edits at the gate');
    await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'alice' }] });
  });
  expect(run.calls.filter((c) => c.startsWith('provisionSandbox'))).toEqual(['provisionSandbox', 'provisionSandbox 1']);
  expect(run.status.timeline.map((r) => r.name)).toContain('re-provision for an attach');
  expect(run.args.pushBranch).toMatchObject([{ sandbox: 'sandbox-1' }]);
  expect(run.status).toMatchObject({ phase: 'completed', round: 2, attaches: 1 });
});

test("a push the host's mirror cannot make (another host's) brings the sandbox back and commits there first", async () => {
  let pushes = 0;
  const stubs: Stubs = {
    ...parking,
    pushBranch: async ({ commit }) => {
      if (++pushes === 1) throw ApplicationFailure.nonRetryable('no such container', 'SandboxNotFound');
      return { commit, alreadyPushed: false };
    },
  };
  const run = await runSession(harness, 'park-push-back', input, stubs, async (handle) => {
    await parkAtGate(handle);
    await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'alice' }] });
  });
  expect(run.calls).toEqual([
    ...UNTIL_GATE,
    PARK,
    'recordAudit approval/push',
    'pushBranch',
    'provisionSandbox 1',
    'commitChanges',
    'pushBranch',
    'destroySandbox 1',
    'recordSessionMetrics',
  ]);
  expect(run.args.pushBranch).toMatchObject([{ sandbox: 'sandbox-0' }, { sandbox: 'sandbox-1', commit: COMMIT }]);
  // Bringing a parked sandbox back is not a lost one's replacement.
  expect(run.status.restarts).toBeUndefined();
  expect(run.status).toMatchObject({ phase: 'completed', pushed: { commit: COMMIT } });
});

test('parkAfter "never": the sandbox stays for the whole wait', async () => {
  const run = await runSession(
    harness,
    'park-never',
    input,
    { repoPolicy: acceptAsGiven({ ...OPEN_POLICY, parkAfter: 'never' }) },
    async (handle) => {
      await awaitApproval(handle, 'push');
      await harness.env.sleep('2h');
      await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'alice' }] });
    },
  );
  expect(run.calls).toEqual([...UNTIL_GATE, 'recordAudit approval/push', 'pushBranch', ...TEARDOWN]);
  expect(run.status.parked).toBeUndefined();
});

test('a park whose checkpoint fails on a live host leaves the sandbox in use: not parked, nothing lost', async () => {
  const stubs: Stubs = {
    ...parking,
    destroySandbox: async ({ checkpointBase }) => {
      if (checkpointBase) throw ApplicationFailure.nonRetryable('checkpoint after park failed: disk full');
      return { removed: true };
    },
  };
  const run = await runSession(harness, 'park-failed', input, stubs, async (handle) => {
    await awaitApproval(handle, 'push');
    await harness.env.sleep('16m');
    await awaitStatus(
      handle,
      (s) => s.timeline.some((r) => r.name === 'park: no decision within 15m' && r.ok === false),
      'the failed park',
    );
    await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'alice' }] });
  });
  expect(run.calls).toEqual([...UNTIL_GATE, PARK, 'recordAudit approval/push', 'pushBranch', ...TEARDOWN]);
  expect(run.args.pushBranch).toMatchObject([{ sandbox: 'sandbox-0' }]);
  expect(run.status.parked).toBeUndefined();
  expect(run.status.removedSandboxes).toEqual(['sandbox-0']);
});

test('a database stall longer than five attempts of provisioning, at the start and bringing back, costs no session', async () => {
  // Under load the store's one connection stayed busy past pg's wait (bench/RESULTS.md, park):
  // each provisioning fails seven times, more than the five attempts it had, then succeeds.
  const failures: Record<number, number> = {};
  const stubs: Stubs = {
    ...parking,
    provisionSandbox: async ({ generation }) => {
      const g = generation ?? 0;
      failures[g] = (failures[g] ?? 0) + 1;
      if (failures[g] <= 7) throw new Error('timeout exceeded when trying to connect');
      return {
        name: `sandbox-${g}`,
        host: 'host-a',
        hostQueue: Context.current().info.taskQueue,
        image: 'drydock-base:test',
        baseCommit: BASE_COMMIT,
        hostTimeoutMs: 120_000,
        ...(generation ? { generation, restored: { step: 'step-1', bytes: 10 } } : {}),
      };
    },
  };
  const session = await runSession(harness, 'park-stalled-store', input, stubs, async (handle) => {
    await harness.env.sleep('5m'); // the retries' backoff, skipped
    await parkAtGate(handle);
    await handle.executeUpdate(followup, { args: [{ by: 'rita', steps: [{ run: 'echo more >> hello.txt' }] }] });
    await harness.env.sleep('5m');
    await awaitStatus(handle, (s) => s.round === 2 && s.pendingApproval !== undefined, 'round 2 at the gate');
    await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'alice' }] });
  });
  expect(failures).toEqual({ 0: 8, 1: 8 });
  expect(session.args.pushBranch).toMatchObject([{ sandbox: 'sandbox-1' }]);
  expect(session.status).toMatchObject({ phase: 'completed', round: 2 });
});
