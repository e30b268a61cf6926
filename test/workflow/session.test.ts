/**
 * The behaviour of agentSession, pinned with stub activities on the
 * time-skipping test server (see harness.ts): each case asserts the activity
 * calls in order and the session's final status.
 */
import { CancelledFailure, WorkflowFailedError, WorkflowUpdateFailedError } from '@temporalio/client';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { WorkflowBundle } from '@temporalio/worker';
import {
  approve,
  attach,
  decide,
  detach,
  handOver,
  ErrorType,
  followup,
  pullRequestClosed,
  reject,
  startPreview,
  status,
  type SessionStatus,
} from '../../workflows/api';
import { parseSessionInput, type SessionInputDraft } from '../../workflows/input';
import type { Sandbox } from '../../sandbox/contract';
import {
  acceptAsGiven,
  awaitApproval,
  awaitStatus,
  BASE_COMMIT,
  CHANGE,
  COMMIT,
  modelAnswer,
  OPEN_POLICY,
  PASSING_REPORT,
  runSession,
  startEnvironment,
  stopEnvironment,
  withoutTimes,
  type Stubs,
  AUDIT_SEAL,
} from './harness';

let harness: { env: TestWorkflowEnvironment; bundle: WorkflowBundle };
beforeAll(async () => {
  harness = await startEnvironment();
});
afterAll(async () => {
  await stopEnvironment(harness?.env);
});

const repo = { url: 'https://github.com/acme/app.git' };
const scripted: SessionInputDraft = {
  repo,
  task: 'Add a greeting',
  agent: { kind: 'script', steps: [{ run: 'echo hi > hello.txt' }] },
  verify: { test: 'npm test' },
};
const pushGate: SessionInputDraft = { ...scripted, approval: { required: ['push'], approvers: ['alice'] } };
const openai = (agent: Record<string, unknown>): SessionInputDraft => ({
  repo,
  task: 'Make the tests pass',
  agent: { kind: 'openai', model: 'gpt-test', ...agent },
});

/** The calls of a scripted session up to its push gate. */
const UNTIL_GATE = [
  'repoPolicy',
  'provisionSandbox',
  'runStep step-1',
  'commitChanges',
  'runStep verify',
  'recordAudit verification-1',
];
const TEARDOWN = ['destroySandbox', 'recordSessionMetrics'];

const sandboxGone = () => ApplicationFailure.nonRetryable('no such container', 'SandboxNotFound');
/** The sandbox of a provisioning's `generation` (0 the first, n its n-th replacement) on host-a, with `extra`. */
const sandboxOfGeneration = (generation: number | undefined, extra: Partial<Sandbox>): Sandbox => ({
  name: `sandbox-${generation ?? 0}`,
  host: 'host-a',
  hostQueue: Context.current().info.taskQueue,
  image: 'drydock-base:test',
  baseCommit: BASE_COMMIT,
  hostTimeoutMs: 120_000,
  ...extra,
  ...(generation ? { generation } : {}),
});
/** A runStep whose first call finds the sandbox gone; every later one succeeds. */
const stepLostOnce = (): NonNullable<Stubs['runStep']> => {
  let lost = false;
  return async ({ key }) => {
    if (!lost) {
      lost = true;
      throw sandboxGone();
    }
    return { exitCode: 0, timedOut: false, outputTail: `${key} ok` };
  };
};
/** A step that runs until the session cancels it, heartbeating as the real ones do. */
async function runUntilCancelled(): Promise<never> {
  for (;;) {
    Context.current().heartbeat();
    await Context.current().sleep(100);
  }
}

test('happy path: script agent, tests pass, push and pull request approved → completed', async () => {
  const input: SessionInputDraft = {
    ...scripted,
    publish: { pullRequest: true },
    approval: { required: ['push', 'pull_request'], approvers: ['alice'], separateGates: true },
  };
  const run = await runSession(harness, 'happy', input, {}, async (handle) => {
    await awaitApproval(handle, 'push');
    await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'alice' }] });
    await awaitApproval(handle, 'pull_request');
    await handle.signal(approve, { action: 'pull_request', by: 'alice', change: CHANGE });
    // Published: the session waits for follow-ups, without its sandbox, until the PR is merged.
    await awaitStatus(handle, (s) => s.phase === 'awaiting_followup', 'awaiting_followup');
    // Another pull request from a branch of the same name (another repo's) ends nothing (T4-L7).
    await handle.signal(pullRequestClosed, { merged: true, by: 'mallory', number: 8 });
    await handle.signal(pullRequestClosed, { merged: true, by: 'bob', number: 7 });
  });
  const branch = `drydock/${run.id}`;
  expect(run.calls).toEqual([
    ...UNTIL_GATE,
    'recordAudit approval/push',
    'pushBranch',
    'recordAudit approval/pull_request',
    'openPullRequest',
    'destroySandbox', // until a follow-up; the teardown drops the checkpoint
    ...TEARDOWN,
  ]);
  const step = (phase: string, name: string, more: object = {}) => ({
    name,
    phase,
    startedAt: '<time>',
    durationMs: '<ms>',
    ok: true,
    ...more,
  });
  const decision = (action: string) => ({ decision: 'approve', action, by: 'alice', change: CHANGE, at: '<time>' });
  expect(withoutTimes(run.status)).toEqual({
    sessionId: run.id,
    repo: repo.url,
    task: 'Add a greeting',
    phase: 'completed',
    startedAt: '<time>',
    timeline: [
      step('provisioning', 'provision', { detail: `sandbox-0 on host-a at ${BASE_COMMIT.slice(0, 12)}` }),
      step('agent', 'step 1: echo hi > hello.txt', {
        exitCode: 0,
        outputTail: 'step-1 ok',
        artifact: 'steps/step-1.log',
      }),
      step('agent', 'commit', { detail: `${COMMIT.slice(0, 12)} on ${branch}` }),
      step('verifying', 'verify: npm test', { exitCode: 0, outputTail: 'verify ok', artifact: 'steps/verify.log' }),
      step('awaiting_approval', 'approval: push', { detail: 'approved by alice' }),
      step('publishing', `push ${branch}`),
      step('awaiting_approval', 'approval: pull_request', { detail: 'approved by alice' }),
      step('publishing', 'pull request', { detail: 'opened https://github.com/acme/app/pull/7' }),
      step('publishing', 'teardown (until a follow-up)'),
      step('awaiting_followup', 'pull request', { detail: 'merged by bob' }),
      step('tearing_down', 'teardown'),
    ],
    decisions: [decision('push'), decision('pull_request')],
    refusedDecisions: [],
    // The session asked for two gates.
    policy: {
      required: ['push', 'pull_request'],
      approvers: ['alice'],
      forbidSelfApproval: false,
      separateGates: true,
    },
    branch,
    sandbox: { name: 'sandbox-0', host: 'host-a', image: 'drydock-base:test', baseCommit: BASE_COMMIT },
    agent: {
      label: 'script',
      steps: 1,
      commit: COMMIT,
      changed: true,
      diffstat: ' hello.txt | 1 +',
      changeHash: CHANGE,
    },
    verification: {
      command: 'npm test',
      exitCode: 0,
      timedOut: false,
      outputTail: 'verify ok',
      artifact: 'steps/verify.log',
      report: { files: ['junit.xml'], total: 3, passed: 3, failed: 0, skipped: 0, failures: [] },
      passed: true,
      summary: '',
    },
    verificationRounds: 1,
    pushed: { commit: COMMIT, alreadyPushed: false },
    pullRequest: { number: 7, url: 'https://github.com/acme/app/pull/7', created: true },
    round: 1,
    rounds: [
      { round: 1, request: 'Add a greeting', startedAt: '<time>', commit: COMMIT, change: CHANGE, pushed: true },
    ],
    closedBy: { merged: true, by: 'bob' },
    removedSandboxes: ['sandbox-0'],
    audit: AUDIT_SEAL,
  });
  expect(run.args.pushBranch).toEqual([
    {
      sandbox: 'sandbox-0',
      sessionId: run.id,
      repoUrl: repo.url,
      branch,
      message: 'drydock: Add a greeting',
      agent: 'script',
      baseCommit: BASE_COMMIT,
      parent: BASE_COMMIT,
      date: expect.any(String),
      commit: COMMIT,
      author: { name: 'drydock', email: 'drydock@localhost' },
      round: 1,
    },
  ]);
});

test('one review per change: the approval of the pull request also approves its push', async () => {
  const input: SessionInputDraft = { ...scripted, publish: { pullRequest: true } };
  const oneReview: Stubs = {
    repoPolicy: acceptAsGiven({
      required: ['push', 'pull_request'],
      approvers: ['alice'],
      forbidSelfApproval: false,
      separateGates: false,
    }),
  };
  const run = await runSession(harness, 'one-review', input, oneReview, async (handle) => {
    const waiting = await awaitApproval(handle, 'pull_request');
    expect(waiting.pendingApproval!.covers).toEqual(['push']);
    // Deciding on the push alone is refused with what to do instead.
    await expect(
      handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'alice' }] }),
    ).rejects.toThrow(WorkflowUpdateFailedError);
    await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'pull_request', by: 'alice' }] });
  });
  expect(run.calls).toEqual([
    ...UNTIL_GATE,
    'recordAudit approval/pull_request',
    'pushBranch',
    'openPullRequest',
    'destroySandbox', // until a follow-up, which never comes: publish.openFor passes
    ...TEARDOWN,
  ]);
  expect(run.status.phase).toBe('completed');
  expect(run.status.timeline.at(-2)).toMatchObject({ name: 'open for follow-ups', detail: 'no follow-up within 7d' });
  expect(run.status.decisions.map((d) => d.action)).toEqual(['pull_request']);
  expect(run.status.timeline.map((t) => `${t.name}: ${t.detail ?? ''}`)).toContain(
    'approval: push: approved with pull_request by alice',
  );
});

test('a webhook-started session: its task gets the GitHub context, and GitHub hears each stage; a GitHub outage fails nothing', async () => {
  const input: SessionInputDraft = {
    ...scripted,
    task: 'Resolve issue #5: greet',
    publish: { pullRequest: true },
    trigger: { repo: 'acme/app', kind: 'issue', issue: 5 },
  };
  const stages: string[] = [];
  const stubs: Stubs = {
    triggerTask: async ({ task }) =>
      `${task}\n\n=== BEGIN GITHUB DATA n: issue #5: description ===\nsay hi\n=== END GITHUB DATA n ===`,
    reportToGitHub: async ({ stage, commit, pullRequestUrl }) => {
      stages.push(`${stage} ${commit?.slice(0, 4) ?? '-'} ${pullRequestUrl ?? '-'}`);
      if (stage === 'pull_request') throw ApplicationFailure.nonRetryable('GitHub is down', 'GitHubRequest');
    },
  };
  const run = await runSession(harness, 'trigger', input, stubs);
  expect(run.status.phase).toBe('completed');
  expect(run.status.task).toMatch(/^Resolve issue #5: greet\n\n=== BEGIN GITHUB DATA n: issue #5/);
  expect(run.args.triggerTask).toEqual([
    { sessionId: run.id, task: 'Resolve issue #5: greet', trigger: { ...input.trigger, pullRequest: false } },
  ]);
  expect(run.calls.slice(0, 3)).toEqual(['repoPolicy', 'triggerTask', 'provisionSandbox']);
  expect(stages).toEqual([
    'started bbbb -',
    'pull_request bbbb https://github.com/acme/app/pull/7',
    'completed bbbb https://github.com/acme/app/pull/7',
  ]);
  expect(run.status.timeline.find((t) => t.name === 'context from GitHub')).toMatchObject({
    ok: true,
    detail: 'issue on acme/app',
  });
});

test('reject: nothing is pushed, the session ends rejected and tears down', async () => {
  const run = await runSession(harness, 'reject', pushGate, {}, async (handle) => {
    await awaitApproval(handle, 'push');
    await handle.signal(reject, { action: 'push', by: 'alice', comment: 'not like this' });
  });
  expect(run.calls).toEqual([...UNTIL_GATE, 'recordAudit approval/push', ...TEARDOWN]);
  expect(run.status).toMatchObject({
    phase: 'rejected',
    error: 'push rejected by alice: not like this',
    failureCause: 'rejected',
    decisions: [{ decision: 'reject', action: 'push', by: 'alice', comment: 'not like this', change: CHANGE }],
  });
  expect(run.status.pushed).toBeUndefined();
  expect(run.status.pendingApproval).toBeUndefined();
});

test("repo memory: the notes taken with each commit are kept once, at the round's end; none taken, no activity", async () => {
  let commits = 0;
  let verifications = 0;
  const stubs: Stubs = {
    commitChanges: async () => ({
      commit: COMMIT,
      changed: true,
      diffstat: ' hello.txt | 1 +',
      changeHash: CHANGE,
      author: { name: 'drydock', email: 'drydock@localhost' },
      notes: [`note of attempt ${++commits}`],
    }),
    runStep: async ({ key, testReport }) => {
      const passed = key !== 'verify' || ++verifications > 1;
      return {
        exitCode: passed ? 0 : 1,
        timedOut: false,
        outputTail: `${key}`,
        artifact: `steps/${key}.log`,
        ...(testReport ? { report: passed ? PASSING_REPORT : { ...PASSING_REPORT, passed: 2, failed: 1 } } : {}),
      };
    },
    keepNotes: async ({ texts }) => ({ proposed: texts.map((_, i) => 41 + i) }),
  };
  const input = openai({ budget: { maxTurns: 10 } });
  const run = await runSession(harness, 'notes-kept', { ...input, verify: { test: 'npm test', maxRounds: 2 } }, stubs);
  // Taken by each attempt's commit (no exec of their own), kept together after the verified one.
  expect(run.args.commitChanges).toMatchObject([{ takeNotes: true }, { takeNotes: true }]);
  expect(run.calls.filter((c) => c.startsWith('keepNotes'))).toEqual(['keepNotes']);
  expect(run.args.keepNotes).toEqual([
    { sessionId: run.id, repo: 'acme/app', round: 1, texts: ['note of attempt 1', 'note of attempt 2'] },
  ]);
  expect(run.status.memory?.proposed).toEqual([41, 42]);
  expect(run.status.timeline.map((r) => r.name)).toContain('notes: proposed');

  const none = await runSession(harness, 'notes-none', scripted);
  expect(none.calls.some((c) => c.startsWith('keepNotes'))).toBe(false);
  expect(none.status.phase).toBe('completed');
});

test('approval timeout: no decision within 24h → timed_out, torn down', async () => {
  const run = await runSession(harness, 'approval-timeout', pushGate);
  expect(run.calls).toEqual([...UNTIL_GATE, ...TEARDOWN]);
  expect(run.status).toMatchObject({
    phase: 'timed_out',
    error: 'no approval for push within 24h',
    failureCause: 'approval_timeout',
  });
  const gate = run.status.timeline.find((r) => r.name === 'approval: push')!;
  expect(gate).toMatchObject({ ok: false, detail: 'no decision within 24h' });
  expect(gate.durationMs).toBeGreaterThanOrEqual(24 * 3600_000);
});

test('stale approval: a decision on another change is refused, the approval of this one publishes', async () => {
  const old = 'e'.repeat(64);
  const run = await runSession(harness, 'stale-approval', pushGate, {}, async (handle) => {
    await awaitApproval(handle, 'push');
    // The update is refused by its validator; the signal is recorded as refused.
    const refused = handle.executeUpdate(decide, {
      args: [{ decision: 'approve', action: 'push', by: 'alice', change: old }],
    });
    await expect(refused).rejects.toThrow(WorkflowUpdateFailedError);
    await handle.signal(approve, { action: 'push', by: 'alice', change: old });
    await handle.executeUpdate(decide, {
      args: [{ decision: 'approve', action: 'push', by: 'alice', change: CHANGE }],
    });
  });
  expect(run.calls).toEqual([...UNTIL_GATE, 'recordAudit approval/push', 'pushBranch', ...TEARDOWN]);
  expect(run.status).toMatchObject({
    phase: 'completed',
    refusedDecisions: [
      {
        input: { action: 'push', by: 'alice', change: old, decision: 'approve' },
        reason: `stale: change ${old.slice(0, 12)} is not the pending change ${CHANGE.slice(0, 12)}`,
      },
    ],
    decisions: [{ decision: 'approve', action: 'push', by: 'alice', change: CHANGE }],
    pushed: { commit: COMMIT },
  });
});

test('a follow-up at the gate: a new round and commit; approving the old change is stale; a stranger is refused', async () => {
  const NEXT = { commit: 'f'.repeat(40), change: 'a'.repeat(64) };
  let commits = 0;
  const stubs: Stubs = {
    commitChanges: async () => ({
      ...(++commits === 1 ? { commit: COMMIT, changeHash: CHANGE } : { commit: NEXT.commit, changeHash: NEXT.change }),
      changed: true,
      diffstat: ' hello.txt | 1 +',
      author: { name: 'drydock', email: 'drydock@localhost' },
    }),
  };
  const input: SessionInputDraft = { ...pushGate, requestedBy: 'rita' };
  const run = await runSession(harness, 'followup-gate', input, stubs, async (handle) => {
    await awaitApproval(handle, 'push');
    await expect(
      handle.executeUpdate(followup, { args: [{ by: 'mallory', steps: [{ run: 'rm -rf .' }] }] }),
    ).rejects.toThrow(WorkflowUpdateFailedError);
    const accepted = await handle.executeUpdate(followup, {
      args: [{ by: 'rita', steps: [{ run: 'echo more >> hello.txt' }] }],
    });
    expect(accepted).toEqual({ round: 2, queued: 1 });
    await awaitStatus(handle, (s) => s.pendingApproval?.change === NEXT.change, 'the new change at the gate');
    await expect(
      handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'alice', change: CHANGE }] }),
    ).rejects.toThrow(WorkflowUpdateFailedError);
    await handle.executeUpdate(decide, {
      args: [{ decision: 'approve', action: 'push', by: 'alice', change: NEXT.change }],
    });
  });
  expect(run.calls.filter((c) => c === 'commitChanges')).toHaveLength(2);
  expect(run.calls.filter((c) => c === 'pushBranch')).toHaveLength(1);
  // Nothing was pushed before: round 2's commit still goes on the base.
  expect(run.args.commitChanges).toMatchObject([{ parent: BASE_COMMIT }, { parent: BASE_COMMIT }]);
  expect(run.args.pushBranch).toMatchObject([{ commit: NEXT.commit, parent: BASE_COMMIT, round: 2 }]);
  expect(run.status).toMatchObject({
    phase: 'completed',
    round: 2,
    pushed: { commit: NEXT.commit },
    decisions: [{ decision: 'approve', action: 'push', by: 'alice', change: NEXT.change }],
  });
  expect(run.status.rounds?.map((r) => [r.round, r.by, r.commit])).toEqual([
    [1, 'rita', COMMIT],
    [2, 'rita', NEXT.commit],
  ]);
  // The same sandbox: no re-provision.
  expect(run.calls.filter((c) => c === 'provisionSandbox')).toHaveLength(1);
});

/** Why an update was refused (its validator's message). */
const refusal = (update: Promise<unknown>) =>
  update.then(
    () => 'accepted',
    (err: WorkflowUpdateFailedError) => err.cause?.message,
  );

test('attach at the gate: phase attached, nothing runs until the detach, then the edits are committed, verified and shown', async () => {
  const NEXT = { commit: 'f'.repeat(40), change: 'a'.repeat(64) };
  let commits = 0;
  const events: string[] = [];
  const stubs: Stubs = {
    commitChanges: async () => ({
      ...(events.push('commit') && ++commits === 1
        ? { commit: COMMIT, changeHash: CHANGE }
        : { commit: NEXT.commit, changeHash: NEXT.change }),
      changed: true,
      diffstat: ' hello.txt | 2 +',
      author: { name: 'drydock', email: 'drydock@localhost' },
    }),
  };
  const input: SessionInputDraft = { ...pushGate, requestedBy: 'rita' };
  const run = await runSession(harness, 'attach-gate', input, stubs, async (handle) => {
    await awaitApproval(handle, 'push');
    expect(await refusal(handle.executeUpdate(attach, { args: [{ by: 'mallory' }] }))).toBe(
      'mallory may not attach to this session (allowed: alice, rita)',
    );
    expect(await refusal(handle.executeUpdate(detach, { args: [{ by: 'rita' }] }))).toBe(
      'nobody is attached (phase awaiting_approval)',
    );
    const attachment = await handle.executeUpdate(attach, { args: [{ by: 'rita' }] });
    expect(attachment).toMatchObject({ by: 'rita', sandbox: 'sandbox-0', host: 'host-a', during: 'awaiting_approval' });
    // A reconnect is the same attach; someone else waits their turn.
    expect(await handle.executeUpdate(attach, { args: [{ by: 'rita' }] })).toMatchObject({
      by: 'rita',
      at: attachment.at,
      sandbox: 'sandbox-0',
    });
    expect(await refusal(handle.executeUpdate(attach, { args: [{ by: 'alice' }] }))).toMatch(
      /^rita is attached since .*; one person at a time$/,
    );
    const held = await awaitStatus(handle, (s) => s.round === 2, 'the round of the edits');
    expect(held).toMatchObject({ phase: 'attached', attached: { by: 'rita' } });
    expect(held.pendingApproval).toBeUndefined();
    // The approval on display went with the attach.
    await expect(
      handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'alice', change: CHANGE }] }),
    ).rejects.toThrow(WorkflowUpdateFailedError);
    events.push('detach');
    const detached = await handle.executeUpdate(detach, { args: [{ by: 'rita' }] });
    expect(detached).toMatchObject({ by: 'rita', attachedBy: 'rita' });
    await awaitStatus(handle, (s) => s.pendingApproval?.change === NEXT.change, 'the edits at the gate');
    await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'alice' }] });
  });
  expect(events).toEqual(['commit', 'detach', 'commit']);
  // The attach is recorded as the detach lets the session go on (so in either order with the commit).
  expect(run.calls.filter((c) => c !== 'recordAudit attach-1')).toEqual([
    ...UNTIL_GATE,
    'commitChanges',
    'runStep r2-verify',
    'recordAudit r2-verification-1',
    'recordAudit r2-approval/push',
    'pushBranch',
    ...TEARDOWN,
  ]);
  expect(run.status).toMatchObject({ phase: 'completed', round: 2, attaches: 1, pushed: { commit: NEXT.commit } });
  expect(run.status.attached).toBeUndefined();
  expect(run.status.rounds?.map((r) => [r.round, r.by, r.request])).toEqual([
    [1, 'rita', 'Add a greeting'],
    [2, 'rita', 'edited by hand in the sandbox (drydock attach)'],
  ]);
  const audit = run.args.recordAudit.find((a) => (a as { key: string }).key === 'attach-1');
  expect(audit).toMatchObject({ kind: 'attach', actor: 'rita', data: { sandbox: 'sandbox-0', detachedBy: 'rita' } });
  expect((audit as { data: { durationMs: number } }).data.durationMs).toBeGreaterThanOrEqual(0);
});

test('two people at one terminal: the one attached leaves, the attach is handed to the other, still attached, then detached under their name', async () => {
  const NEXT = { commit: 'f'.repeat(40), change: 'a'.repeat(64) };
  let commits = 0;
  const stubs: Stubs = {
    commitChanges: async () => ({
      ...(++commits === 1 ? { commit: COMMIT, changeHash: CHANGE } : { commit: NEXT.commit, changeHash: NEXT.change }),
      changed: true,
      diffstat: ' hello.txt | 2 +',
      author: { name: 'drydock', email: 'drydock@localhost' },
    }),
  };
  const input: SessionInputDraft = { ...pushGate, requestedBy: 'rita' };
  const run = await runSession(harness, 'attach-handover', input, stubs, async (handle) => {
    await awaitApproval(handle, 'push');
    await handle.executeUpdate(attach, { args: [{ by: 'rita' }] });
    expect(await refusal(handle.executeUpdate(handOver, { args: [{ from: 'alice', to: 'rita' }] }))).toBe(
      'alice is not the one attached (rita is)',
    );
    const handed = await handle.executeUpdate(handOver, { args: [{ from: 'rita', to: 'alice' }] });
    expect(handed).toMatchObject({ by: 'alice', sandbox: 'sandbox-0' });
    expect(await handle.query(status)).toMatchObject({ phase: 'attached', attached: { by: 'alice' } });
    await handle.executeUpdate(detach, { args: [{ by: 'alice' }] });
    await awaitStatus(handle, (s) => s.pendingApproval?.change === NEXT.change, 'the edits at the gate');
    await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'alice' }] });
  });
  expect(run.status).toMatchObject({ phase: 'completed', round: 2, attaches: 2 });
  const audits = run.args.recordAudit.filter((a) => /^attach-/.test((a as { key: string }).key));
  expect(audits.map((a) => [(a as { actor: string }).actor, (a as { data: object }).data])).toEqual([
    ['rita', expect.objectContaining({ detachedBy: 'rita', handedTo: 'alice' })],
    ['alice', expect.objectContaining({ detachedBy: 'alice' })],
  ]);
  expect(run.status.timeline.filter((t) => t.phase === 'attached').map((t) => t.name)).toEqual([
    'attached: rita',
    'attached: alice',
  ]);
});

test('attach while the agent works: answered once the step under way ended; the next one starts after the detach', async () => {
  const events: string[] = [];
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const stubs: Stubs = {
    runStep: async ({ key }) => {
      events.push(`start ${key}`);
      if (key === 'step-1') await held;
      events.push(`end ${key}`);
      return { exitCode: 0, timedOut: false, outputTail: `${key} ok` };
    },
  };
  const input: SessionInputDraft = {
    ...scripted,
    requestedBy: 'rita',
    agent: { kind: 'script', steps: [{ run: 'echo one > a.txt' }, { run: 'echo two > b.txt' }] },
  };
  const run = await runSession(harness, 'attach-agent', input, stubs, async (handle) => {
    await awaitStatus(handle, () => events.includes('start step-1'), 'step 1 running');
    const answered = handle
      .executeUpdate(attach, { args: [{ by: 'rita' }] })
      .then(() => events.push('attach answered'));
    await awaitStatus(handle, (s) => s.phase === 'attached', 'phase attached');
    release();
    await answered;
    expect(await handle.query(status)).toMatchObject({ phase: 'attached', attached: { by: 'rita', during: 'agent' } });
    events.push('detach');
    await handle.executeUpdate(detach, { args: [{ by: 'rita' }] });
  });
  expect(events).toEqual([
    'start step-1',
    'end step-1',
    'attach answered',
    'detach',
    'start step-2',
    'end step-2',
    'start verify',
    'end verify',
  ]);
  expect(run.status).toMatchObject({ phase: 'completed', round: 1, attaches: 1 });
  expect(run.status.timeline.map((t) => `${t.phase}: ${t.name}`)).toContain('attached: attached: rita');
});

test('sandbox lost once: replaced from the checkpoint, the step runs again, completed', async () => {
  const stubs: Stubs = {
    runStep: stepLostOnce(),
  };
  const run = await runSession(harness, 'sandbox-lost-once', scripted, stubs);
  expect(run.calls).toEqual([
    'repoPolicy',
    'provisionSandbox',
    'runStep step-1',
    'destroySandbox', // the lost one, by the host that still answers
    'provisionSandbox 1',
    'runStep step-1',
    'commitChanges',
    'runStep verify',
    'recordAudit verification-1',
    'pushBranch',
    'destroySandbox 1',
    'recordSessionMetrics',
  ]);
  expect(run.args.destroySandbox[0]).toEqual({ sessionId: run.id, replaced: true });
  expect(run.args.provisionSandbox[1]).toMatchObject({ generation: 1, repo: { url: repo.url, ref: BASE_COMMIT } });
  expect(run.status).toMatchObject({ phase: 'completed', restarts: 1, sandbox: { name: 'sandbox-1' } });
  expect(run.status.timeline.map((r) => [r.name, r.ok])).toEqual([
    ['provision', true],
    ['step 1: echo hi > hello.txt', true],
    ['re-provision: sandbox sandbox-0 is gone', true],
    ['commit', true],
    ['verify: npm test', true],
    ['approval: push', true],
    [`push drydock/${run.id}`, true],
    ['teardown', true],
  ]);
  expect(run.status.timeline[2].detail).toBe('sandbox-1 on host-a, from the checkpoint after step-1');
  expect(run.status.removedSandboxes).toEqual(['sandbox-0', 'sandbox-1']);
});

test('sandbox lost too often: after 3 replacements the session fails with sandbox_lost', async () => {
  const run = await runSession(harness, 'sandbox-lost-often', scripted, {
    runStep: async () => {
      throw sandboxGone();
    },
  });
  const replace = (n: number) => [
    'destroySandbox' + (n > 1 ? ` ${n - 1}` : ''),
    `provisionSandbox ${n}`,
    'runStep step-1',
  ];
  expect(run.calls).toEqual([
    'repoPolicy',
    'provisionSandbox',
    'runStep step-1',
    ...replace(1),
    ...replace(2),
    ...replace(3),
    'destroySandbox 3',
    'recordSessionMetrics',
  ]);
  expect(run.error).toBeInstanceOf(WorkflowFailedError);
  expect(run.status).toMatchObject({
    phase: 'failed',
    restarts: 3,
    failureCause: 'sandbox_lost',
    error: 'sandbox sandbox-3 is gone, and the sandbox was already replaced 3 times',
  });
});

test('a provisioning cut off on one host and retried on another: teardown removes the first host’s sandbox there', async () => {
  const run = await runSession(harness, 'left-behind', scripted, {
    provisionSandbox: async () => ({
      name: 'sandbox-0',
      host: 'host-b',
      hostQueue: Context.current().info.taskQueue,
      image: 'drydock-base:test',
      baseCommit: BASE_COMMIT,
      hostTimeoutMs: 2000,
      // What the activity read from its earlier attempt's heartbeats (sandbox/activities/provision.ts).
      leftBehind: [{ name: 'sandbox-0', host: 'host-a', hostQueue: 'drydock@host-a', hostTimeoutMs: 2000 }],
    }),
  });
  expect(run.status.phase).toBe('completed');
  // The first host does not answer here: the removal is tried on its queue, then left to its reaper.
  expect(run.elsewhere).toEqual(['destroySandbox@drydock@host-a']);
  expect(run.status.timeline.slice(-2).map((r) => [r.name, r.ok])).toEqual([
    ['teardown', true],
    ['remove sandbox-0', false],
  ]);
});

test('host lost: nobody picks up the host queue within its timeout → re-provisioned elsewhere, completed', async () => {
  const run = await runSession(harness, 'host-lost', scripted, {
    provisionSandbox: async ({ generation }) => ({
      name: `sandbox-${generation ?? 0}`,
      image: 'drydock-base:test',
      baseCommit: BASE_COMMIT,
      // The first host's queue has no worker: it is gone.
      ...(generation
        ? { host: 'host-b', hostQueue: Context.current().info.taskQueue, generation }
        : { host: 'host-a', hostQueue: 'drydock@host-a' }),
      hostTimeoutMs: 2000,
    }),
  });
  expect(run.calls).toEqual([
    'repoPolicy',
    'provisionSandbox',
    'provisionSandbox 1',
    'runStep step-1',
    'commitChanges',
    'runStep verify',
    'recordAudit verification-1',
    'pushBranch',
    'destroySandbox 1',
    'recordSessionMetrics',
  ]);
  // Teardown tries the lost host's sandbox on its queue too; still no answer: its reaper removes it.
  expect(run.elsewhere).toEqual(['runStep@drydock@host-a', 'destroySandbox@drydock@host-a']);
  expect(run.status).toMatchObject({ phase: 'completed', restarts: 1, sandbox: { name: 'sandbox-1', host: 'host-b' } });
  expect(run.status.removedSandboxes).toEqual(['sandbox-1']);
  expect(run.status.timeline.slice(-2).map((r) => [r.name, r.ok])).toEqual([
    ['teardown', true],
    ['remove sandbox-0', false],
  ]);
  expect(run.status.timeline[2]).toMatchObject({
    name: 're-provision: host host-a did not pick up runStep within 2s',
    ok: true,
    detail: 'sandbox-1 on host-b, no checkpoint yet',
  });
});

test('wall-time limit: the running step is cancelled, the session timed_out, torn down', async () => {
  const input: SessionInputDraft = { ...scripted, limits: { wallTime: '3s' } };
  const run = await runSession(harness, 'wall-time', input, { runStep: runUntilCancelled });
  expect(run.calls).toEqual(['repoPolicy', 'provisionSandbox', 'runStep step-1', ...TEARDOWN]);
  expect(run.status).toMatchObject({
    phase: 'timed_out',
    error: 'wall-time limit of 3s reached',
    failureCause: 'wall_time',
  });
  expect(run.status.timeline.map((r) => [r.name, r.ok])).toEqual([
    ['provision', true],
    ['step 1: echo hi > hello.txt', false],
    ['teardown', true],
  ]);
});

test("budget with onExceeded 'fail': the session fails when the agent runs out of turns", async () => {
  const input = openai({ budget: { maxTurns: 1, onExceeded: 'fail' } });
  const run = await runSession(harness, 'budget-fail', input, {
    modelCall: async ({ turn }) => modelAnswer(turn, ['run: npm test']),
  });
  expect(run.calls).toEqual([
    'repoPolicy',
    'provisionSandbox',
    'startModelAgent',
    'modelCall 1',
    'runTool 1',
    ...TEARDOWN,
  ]);
  expect(run.error).toBeInstanceOf(WorkflowFailedError);
  expect(run.status).toMatchObject({
    phase: 'failed',
    failureCause: 'budget_max_turns',
    error: 'agent stopped: budget: 1 turns used',
    agent: { kind: 'openai', turn: 1, stopReason: 'max_turns', steps: 1 },
  });
  expect(run.status.timeline.at(-2)).toMatchObject({ name: 'agent stopped', detail: 'budget: 1 turns used' });
});

test('feedback: the first verification fails, the model agent hears why and its second attempt passes', async () => {
  const input: SessionInputDraft = { ...openai({}), verify: { test: 'npm test' } };
  const run = await runSession(harness, 'feedback-round', input, {
    modelCall: async ({ turn }) => modelAnswer(turn, turn === 1 ? ['run: npm test'] : []),
    runStep: async ({ key }) => ({
      exitCode: key === 'verify' ? 1 : 0,
      timedOut: false,
      outputTail: `${key} done`,
      report:
        key === 'verify'
          ? {
              files: ['junit.xml'],
              total: 2,
              passed: 1,
              failed: 1,
              skipped: 0,
              failures: [{ name: 'greets', message: 'expected hi' }],
            }
          : { files: ['junit.xml'], total: 2, passed: 2, failed: 0, skipped: 0, failures: [] },
    }),
  });
  expect(run.calls).toEqual([
    'repoPolicy',
    'provisionSandbox',
    'startModelAgent',
    'modelCall 1',
    'runTool 1',
    'modelCall 2',
    'commitChanges',
    'runStep verify',
    'recordAudit verification-1',
    'addAgentMessage',
    'modelCall 3',
    'commitChanges',
    'runStep verify-2',
    'recordAudit verification-2',
    'pushBranch',
    ...TEARDOWN,
  ]);
  // The feedback is the next message of the conversation, and the model's next call sees it.
  expect(run.args.addAgentMessage).toEqual([
    { sessionId: run.id, index: 5, content: expect.stringContaining('greets') },
  ]);
  expect(run.args.modelCall.map((a) => (a as { messageCount: number }).messageCount)).toEqual([2, 4, 6]);
  expect(run.status).toMatchObject({
    phase: 'completed',
    verificationRounds: 2,
    verification: { passed: true, command: 'npm test', exitCode: 0 },
    agent: { kind: 'openai', attempt: 2, turn: 3, stopReason: 'done', usage: { totalTokens: 360 } },
  });
  expect(run.status.timeline.map((r) => r.name)).toContain('feedback: attempt 2');
});

test('app.forAgent: the app starts before each attempt of the agent and stops before each verification', async () => {
  const input: SessionInputDraft = { ...openai({}), verify: { test: 'npm test' } };
  const app = { start: 'npm run dev', port: 3000, readyPath: '/', readyTimeoutMs: 60_000 };
  const run = await runSession(harness, 'agent-app', input, {
    provisionSandbox: async () => ({
      name: 'sandbox-0',
      host: 'host-a',
      hostQueue: Context.current().info.taskQueue,
      image: 'drydock-base:test',
      baseCommit: BASE_COMMIT,
      hostTimeoutMs: 120_000,
      app,
    }),
    startAgentApp: async () => ({ ready: true }),
    stopAgentApp: async () => undefined,
    modelCall: async ({ turn }) => modelAnswer(turn, []),
    runStep: async ({ key }) => ({
      exitCode: key === 'verify' ? 1 : 0,
      timedOut: false,
      outputTail: `${key} done`,
    }),
  });
  expect(run.calls.filter((c) => /AgentApp|runStep|modelCall|commitChanges/.test(c))).toEqual([
    'startAgentApp',
    'modelCall 1',
    'commitChanges',
    'stopAgentApp',
    'runStep verify',
    'startAgentApp',
    'modelCall 2',
    'commitChanges',
    'stopAgentApp',
    'runStep verify-2',
  ]);
  expect(run.args.startAgentApp[0]).toMatchObject({ sandbox: 'sandbox-0', image: 'drydock-base:test', app });
  expect(run.status.timeline.find((r) => r.name === 'app')).toMatchObject({
    ok: true,
    detail: 'answers on localhost:3000',
  });
});

test("app.forAgent: a sandbox lost during the agent's steps is replaced with its app started again", async () => {
  const app = { start: 'npm run dev', port: 3000, readyPath: '/', readyTimeoutMs: 60_000 };
  const run = await runSession(harness, 'agent-app-lost', scripted, {
    provisionSandbox: async ({ generation }) => sandboxOfGeneration(generation, { app }),
    startAgentApp: async () => ({ ready: true }),
    stopAgentApp: async () => undefined,
    runStep: stepLostOnce(),
  });
  expect(run.calls.filter((c) => /AgentApp|runStep|provisionSandbox/.test(c))).toEqual([
    'provisionSandbox',
    'startAgentApp',
    'runStep step-1',
    'provisionSandbox 1',
    'startAgentApp', // in the replacement, before the step runs again
    'runStep step-1',
    'stopAgentApp',
    'runStep verify',
  ]);
  expect(run.args.startAgentApp.map((a) => (a as { sandbox: string }).sandbox)).toEqual(['sandbox-0', 'sandbox-1']);
  expect(run.status.phase).toBe('completed');
});

test("a feature's postStartCommand runs at each start of a sandbox, before the app and the first step; one that fails ends the session naming it", async () => {
  const app = { start: 'npm run dev', port: 3000, readyPath: '/', readyTimeoutMs: 60_000 };
  const featureStarts = [{ feature: './tool', command: 'tool serve &' }];
  const run = await runSession(harness, 'feature-start', scripted, {
    provisionSandbox: async ({ generation }) => sandboxOfGeneration(generation, { app, featureStarts }),
    startFeatures: async () => ({ ok: true }),
    startAgentApp: async () => ({ ready: true }),
    stopAgentApp: async () => undefined,
    runStep: stepLostOnce(),
  });
  expect(run.calls.filter((c) => /startFeatures|startAgentApp|runStep|provisionSandbox/.test(c))).toEqual([
    'provisionSandbox',
    'startFeatures',
    'startAgentApp',
    'runStep step-1',
    'provisionSandbox 1',
    'startFeatures', // the replacement's start, before its app and the step again
    'startAgentApp',
    'runStep step-1',
    'runStep verify',
  ]);
  expect(run.args.startFeatures[1]).toMatchObject({ sandbox: 'sandbox-1', starts: featureStarts });
  expect(run.status.phase).toBe('completed');

  const failed = await runSession(harness, 'feature-start-failed', scripted, {
    provisionSandbox: async () => sandboxOfGeneration(undefined, { app, featureStarts }),
    startFeatures: async () => ({ ok: false, feature: './tool', why: 'exited with status 3', output: 'no port' }),
  });
  expect(failed.calls.filter((c) => /startFeatures|startAgentApp|runStep/.test(c))).toEqual(['startFeatures']);
  expect(failed.status).toMatchObject({
    phase: 'failed',
    error: "the postStartCommand of the dev container's feature ./tool exited with status 3; its output ends: no port",
  });
  expect(failed.status.timeline.find((r) => r.name === 'features: postStartCommand')).toMatchObject({ ok: false });
});

test("startPreview: the app starts at the gate for a reader's preview (a request without {by} refused); the next round stops it before its agent step", async () => {
  const app = { start: 'node app.js', port: 3000, readyPath: '/', readyTimeoutMs: 30_000 };
  const NEXT = { commit: 'f'.repeat(40), change: 'a'.repeat(64) };
  let commits = 0;
  const run = await runSession(
    harness,
    'preview',
    { ...pushGate, requestedBy: 'rita' },
    {
      provisionSandbox: async () => ({
        name: 'sandbox-0',
        host: 'host-a',
        hostQueue: Context.current().info.taskQueue,
        image: 'drydock-base:test',
        baseCommit: BASE_COMMIT,
        hostTimeoutMs: 120_000,
        preview: app,
      }),
      startAgentApp: async () => ({ ready: true }),
      stopAgentApp: async () => undefined,
      commitChanges: async () => ({
        ...(++commits === 1
          ? { commit: COMMIT, changeHash: CHANGE }
          : { commit: NEXT.commit, changeHash: NEXT.change }),
        changed: true,
        diffstat: ' hello.txt | 1 +',
        author: { name: 'drydock', email: 'drydock@localhost' },
      }),
    },
    async (handle) => {
      await awaitApproval(handle, 'push');
      expect((await handle.query(status)).sandbox).toMatchObject({ name: 'sandbox-0', appPort: 3000 });
      expect(await refusal(handle.executeUpdate(startPreview, { args: [{ by: '' }] }))).toMatch(/needs \{by\}/);
      expect(await handle.executeUpdate(startPreview, { args: [{ by: 'dave' }] })).toEqual({ ready: true, port: 3000 });
      await handle.executeUpdate(followup, { args: [{ by: 'rita', steps: [{ run: 'echo more >> hello.txt' }] }] });
      await awaitStatus(handle, (s) => s.pendingApproval?.change === NEXT.change, 'the new change at the gate');
      await handle.executeUpdate(decide, {
        args: [{ decision: 'approve', action: 'push', by: 'alice', change: NEXT.change }],
      });
    },
  );
  // Started once, for the preview, with the sandbox's image; stopped before the next agent step (not the agent's app).
  expect(run.args.startAgentApp).toEqual([
    expect.objectContaining({ sandbox: 'sandbox-0', image: 'drydock-base:test', app }),
  ]);
  const order = run.calls.filter((c) => /AgentApp|runStep/.test(c));
  expect(order.slice(0, 3)).toEqual(['runStep step-1', 'runStep verify', 'startAgentApp']);
  expect(order[3]).toBe('stopAgentApp');
  expect(order.filter((c) => c === 'stopAgentApp')).toHaveLength(1);
  expect(run.status.phase).toBe('completed');
});

test('startPreview is refused for a repo without an app, and nothing starts', async () => {
  const run = await runSession(harness, 'preview-refused', pushGate, {}, async (handle) => {
    await awaitApproval(handle, 'push');
    expect(await refusal(handle.executeUpdate(startPreview, { args: [{ by: 'dave' }] }))).toMatch(/declares no app/);
    await handle.executeUpdate(decide, {
      args: [{ decision: 'approve', action: 'push', by: 'alice', change: CHANGE }],
    });
  });
  expect(run.calls.filter((c) => /AgentApp/.test(c))).toEqual([]);
});

const SECRET_FOUND = [{ secret: 'DRYDOCK_SECRET_DB_PASS', where: 'config.txt' }];

test('a change holding a secret the worker knows: the script session fails naming it, nothing verified or pushed', async () => {
  const run = await runSession(harness, 'secret-blocked', pushGate, {
    commitChanges: async () => ({
      commit: COMMIT,
      changed: true,
      diffstat: ' config.txt | 1 +',
      changeHash: CHANGE,
      author: { name: 'drydock', email: 'drydock@localhost' },
      blocked: SECRET_FOUND,
    }),
  });
  expect(run.calls).toEqual(['repoPolicy', 'provisionSandbox', 'runStep step-1', 'commitChanges', ...TEARDOWN]);
  expect(run.status).toMatchObject({
    phase: 'failed',
    failureCause: 'secret_in_change',
    error: expect.stringContaining('DRYDOCK_SECRET_DB_PASS in config.txt'),
    agent: { blocked: expect.stringContaining('never publishes it') },
  });
  expect(run.status.agent!.diff).toBeUndefined();
  expect(run.status.pendingApproval).toBeUndefined();
});

test('a model agent whose change holds a secret hears which and where; its next change goes on as usual', async () => {
  let commits = 0;
  const input: SessionInputDraft = { ...openai({}), verify: { test: 'npm test' } };
  const run = await runSession(harness, 'secret-feedback', input, {
    commitChanges: async () => ({
      commit: COMMIT,
      changed: true,
      diffstat: ' config.txt | 1 +',
      changeHash: CHANGE,
      author: { name: 'drydock', email: 'drydock@localhost' },
      ...(++commits === 1 ? { blocked: SECRET_FOUND } : { diff: 'change.diff' }),
    }),
  });
  expect(run.calls).toEqual([
    'repoPolicy',
    'provisionSandbox',
    'startModelAgent',
    'modelCall 1',
    'commitChanges',
    'addAgentMessage',
    'modelCall 2',
    'commitChanges',
    'runStep verify-2',
    'recordAudit verification-2',
    'pushBranch',
    ...TEARDOWN,
  ]);
  expect(run.args.addAgentMessage).toEqual([
    { sessionId: run.id, index: 3, content: expect.stringContaining('DRYDOCK_SECRET_DB_PASS in config.txt') },
  ]);
  expect(run.status).toMatchObject({ phase: 'completed', agent: { attempt: 2, diff: 'change.diff' } });
  expect(run.status.agent!.blocked).toBeUndefined();
  expect(run.status.timeline.map((r) => r.name)).toContain('change refused');
});

test("the repo's configuration refuses: the session fails at once, naming why, before any sandbox", async () => {
  const problem =
    "agent.egress.0.host: 127.0.0.1 is a loopback address; only the operator's rules for acme/app may name it";
  const run = await runSession(harness, 'repo-refused', scripted, {
    repoPolicy: async () => ({ ok: false, problems: [problem] }),
  });
  expect(run.calls).toEqual(['repoPolicy']);
  expect(run.error).toBeInstanceOf(WorkflowFailedError);
  expect(run.status).toMatchObject({ phase: 'failed', error: `invalid input: ${problem}` });
});

test("the settled input is the one the session runs: the repo file's test command, the operator's approvers", async () => {
  const run = await runSession(
    harness,
    'repo-settled',
    { ...scripted, verify: {} },
    {
      repoPolicy: async (raw) => {
        const parsed = parseSessionInput(raw);
        if (!parsed.ok) return parsed;
        const verify = { ...parsed.input.verify, test: 'make check', junit: ['out/junit.xml'] };
        const input = { ...parsed.input, verify };
        return { ok: true, input, repo: 'acme/app', approvers: ['alice'], serverPolicy: OPEN_POLICY };
      },
    },
  );
  // The test step reads the repo file's JUnit report with its result (one round trip).
  expect(run.args.runStep.at(-1)).toMatchObject({ key: 'verify', testReport: { files: ['out/junit.xml'] } });
  expect(run.status).toMatchObject({
    phase: 'completed',
    verification: { command: 'make check', report: PASSING_REPORT },
    policy: { approvers: ['alice'] },
  });
});

test('cancellation while awaiting approval still tears the sandbox down', async () => {
  const run = await runSession(harness, 'cancel', pushGate, {}, async (handle) => {
    await awaitApproval(handle, 'push');
    await handle.cancel();
  });
  expect(run.error).toBeInstanceOf(WorkflowFailedError);
  expect(run.error!.cause).toBeInstanceOf(CancelledFailure);
  expect(run.calls).toEqual([...UNTIL_GATE, ...TEARDOWN]);
  expect(run.status).toMatchObject({ phase: 'cancelled', failureCause: 'cancelled', error: 'cancelled' });
  expect(run.status.pendingApproval).toBeUndefined();
  expect(run.status.timeline.at(-1)).toMatchObject({ name: 'teardown', ok: true });
});

test('every host full: the session is queued (what it waits for, how often it asked), asks again, and runs once a host takes it', async () => {
  let refusals = 0;
  const queued: SessionStatus[] = [];
  const run = await runSession(
    harness,
    'queued',
    scripted,
    {
      provisionSandbox: async () => {
        if (refusals++ < 2) {
          throw ApplicationFailure.create({
            message: 'host host-a holds 1 of 1 sandboxes',
            type: ErrorType.HostFull,
            nonRetryable: true,
          });
        }
        const { taskQueue } = Context.current().info;
        const sandbox = { name: 'sandbox-0', host: 'host-a', hostQueue: taskQueue, image: 'drydock-base:test' };
        return { ...sandbox, baseCommit: BASE_COMMIT, hostTimeoutMs: 120_000 };
      },
    },
    async (handle) => {
      queued.push(await awaitStatus(handle, (s) => s.queued?.tries === 2, 'the second refusal'));
    },
  );
  expect(queued[0]).toMatchObject({ phase: 'queued', queued: { reason: 'host host-a holds 1 of 1 sandboxes' } });
  expect(run.calls.filter((c) => c === 'provisionSandbox')).toHaveLength(3);
  expect(run.status.phase).toBe('completed');
  expect(run.status.queued).toBeUndefined();
  expect(run.status.timeline[0]).toMatchObject({ name: 'provision', ok: true });
});
