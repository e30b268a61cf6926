/**
 * agentSession end to end on the real Temporal dev server, real Docker and
 * real git: every outcome, the approval gate, and teardown on every path.
 */
import { execFileSync } from 'node:child_process';
import { WorkflowFailedError, WorkflowUpdateFailedError } from '@temporalio/client';
import { findTemporalCli } from '../../platform/temporal';
import { approve, decide, reject, status, type SessionStatus } from '../../workflows/api';
import {
  containersOf,
  git,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  pollUntil,
  runCli,
  scriptedSession,
  startSession,
  startStack,
  waitForStatus,
  type TestStack,
} from '../support/helpers';
import { recordHistory, replayHistory } from '../support/histories';

let stack: TestStack;
let repo: { url: string; bare: string };

beforeAll(async () => {
  stack = await startStack();
  repo = await makeFixtureRepo();
});
afterAll(() => stack?.stop());

/** A session that edits README.md so check.sh passes. */
const editingSession = (extra: Record<string, unknown> = {}) => ({
  repo: { url: repo.url },
  task: 'greet in the README',
  agent: {
    kind: 'script',
    steps: [{ run: 'echo hello >> README.md' }, { write: { path: 'docs/NOTE.md', content: 'by drydock\n' } }],
  },
  verify: { test: 'sh check.sh' },
  ...extra,
});

const remoteBranch = (branch: string) => {
  try {
    return git(['rev-parse', '--verify', '--quiet', `refs/heads/${branch}`], repo.bare).trim();
  } catch {
    return undefined;
  }
};

test('happy path: edit, test, approve via decide → branch pushed, sandbox gone, completed', async () => {
  const id = newSessionId('happy');
  const handle = await startSession(stack, id, editingSession({ approval: { approvers: ['alice'] } }));
  const waiting = await waitForStatus(handle, inPhase('awaiting_approval'));
  expect(waiting.verification).toMatchObject({ passed: true, exitCode: 0 });
  expect(waiting.pendingApproval).toMatchObject({ action: 'push', approvers: ['alice'] });
  expect(waiting.pendingApproval!.evidence.diffstat).toMatch(/README\.md/);
  expect(await containersOf(id)).toHaveLength(1);
  expect(remoteBranch(`drydock/${id}`)).toBeUndefined();

  const decision = await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'alice' }] });
  expect(decision).toMatchObject({ decision: 'approve', by: 'alice' });
  const final = (await handle.result()) as SessionStatus;

  expect(final.phase).toBe('completed');
  const pushed = remoteBranch(`drydock/${id}`);
  expect(pushed).toBe(final.pushed!.commit);
  expect(git(['show', `${pushed}:README.md`], repo.bare)).toBe('# fixture\nhello\n');
  expect(git(['show', `${pushed}:docs/NOTE.md`], repo.bare)).toBe('by drydock\n');
  expect(git(['log', '--format=%s', '-1', pushed!], repo.bare).trim()).toBe('drydock: greet in the README');
  expect(await containersOf(id)).toHaveLength(0);
  expect(final.timeline.map((s) => s.name)).toEqual([
    'provision',
    'step 1: echo hello >> README.md',
    'step 2: write docs/NOTE.md',
    'commit',
    'verify: sh check.sh',
    'approval: push',
    `push drydock/${id}`,
    'teardown',
  ]);
  expect(final.timeline.every((s) => s.ok && s.durationMs! >= 0)).toBe(true);

  // Closed sessions still answer the status query, and the history replays deterministically.
  expect((await handle.query(status)).phase).toBe('completed');
  await replayHistory(await handle.fetchHistory());
  await recordHistory(handle, 'happy');
});

test('reject → nothing pushed, outcome rejected, sandbox gone', async () => {
  const id = newSessionId('reject');
  const handle = await startSession(stack, id, editingSession());
  await waitForStatus(handle, inPhase('awaiting_approval'));
  await handle.signal(reject, { action: 'push', by: 'bob', comment: 'not like this' });
  const final = (await handle.result()) as SessionStatus;
  expect(final.phase).toBe('rejected');
  expect(final.error).toBe('push rejected by bob: not like this');
  expect(remoteBranch(`drydock/${id}`)).toBeUndefined();
  expect(await containersOf(id)).toHaveLength(0);
});

test('approval timeout → timed_out, nothing pushed', async () => {
  const id = newSessionId('timeout');
  const handle = await startSession(stack, id, editingSession({ approval: { timeout: '2s' } }));
  const final = (await handle.result()) as SessionStatus;
  expect(final.phase).toBe('timed_out');
  expect(final.error).toMatch(/no approval for push within 2s/);
  expect(remoteBranch(`drydock/${id}`)).toBeUndefined();
  expect(await containersOf(id)).toHaveLength(0);
});

test('approver not on the list: the update is refused, the signal is recorded as refused, the session still waits', async () => {
  const id = newSessionId('approver');
  const handle = await startSession(stack, id, editingSession({ approval: { approvers: ['alice'] } }));
  await waitForStatus(handle, inPhase('awaiting_approval'));

  const refused = handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'mallory' }] });
  await expect(refused).rejects.toThrow(WorkflowUpdateFailedError);
  await expect(refused).rejects.toMatchObject({
    cause: { message: expect.stringMatching(/mallory is not an approver/) },
  });
  const unknownAction = handle.executeUpdate(decide, {
    args: [{ decision: 'approve', action: 'merge' as 'push', by: 'alice' }],
  });
  await expect(unknownAction).rejects.toMatchObject({
    cause: { message: expect.stringMatching(/unknown action 'merge'/) },
  });
  await handle.signal(approve, { action: 'push', by: 'mallory' });

  const still = await waitForStatus(handle, (s) => s.refusedDecisions.length === 1);
  expect(still.phase).toBe('awaiting_approval');
  expect(still.decisions).toEqual([]);
  expect(still.refusedDecisions[0].reason).toMatch(/mallory is not an approver/);

  // The CLI gets the refusal as one line and a non-zero exit.
  const cli = await runCli(['approve', id, '--by', 'mallory', '--change', still.pendingApproval!.change], {
    TEMPORAL_ADDRESS: stack.config.TEMPORAL_ADDRESS,
  });
  expect(cli.code).toBe(1);
  expect(cli.stderr.trim()).toMatch(
    /^drydock: refused: mallory is not an approver of this session \(approvers: alice\)$/,
  );

  await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'push', by: 'alice' }] });
  expect(((await handle.result()) as SessionStatus).phase).toBe('completed');
});

test('failing test command → failed with the output tail in status, nothing pushed', async () => {
  const id = newSessionId('failing');
  const handle = await startSession(stack, id, {
    ...editingSession(),
    verify: { test: 'echo "expected hello, got nothing" >&2; exit 3' },
  });
  const err: WorkflowFailedError = await handle.result().catch((e) => e);
  expect(err).toBeInstanceOf(WorkflowFailedError);
  const final = await handle.query(status);
  expect(final.phase).toBe('failed');
  expect(final.verification).toMatchObject({ passed: false, exitCode: 3 });
  expect(final.verification!.outputTail).toContain('expected hello, got nothing');
  expect(final.error).toMatch(/verification failed: .* exited with 3/);
  expect(remoteBranch(`drydock/${id}`)).toBeUndefined();
  expect(await containersOf(id)).toHaveLength(0);
});

test.each([
  ['no repo.url', { repo: {}, task: 'x' }, /repo\.url: Invalid input: expected string, received undefined/],
  ['a wrong type', { repo: { url: 'file:///x' }, task: 42 }, /task: Invalid input: expected string, received number/],
  [
    'an unknown field',
    { repo: { url: 'file:///x' }, task: 'x', limits: { cpu: 2 } },
    /limits: Unrecognized key.*\(cpu\)/,
  ],
])(
  'invalid input (%s) → fails at once, non-retryable, field named, no container, only repoPolicy ran',
  async (_name, input, message) => {
    const id = newSessionId('invalid');
    const handle = await startSession(stack, id, input);
    const err: WorkflowFailedError = await handle.result().catch((e) => e);
    expect(err).toBeInstanceOf(WorkflowFailedError);
    expect(err.cause).toMatchObject({ type: 'InvalidSessionInput', nonRetryable: true });
    expect(err.cause!.message).toMatch(message);
    expect(await containersOf(id)).toHaveLength(0);
    // The input is validated by repoPolicy before it reads anything: no other activity runs.
    const history = await handle.fetchHistory();
    const scheduled = history.events!.flatMap((e) => e.activityTaskScheduledEventAttributes?.activityType?.name ?? []);
    expect(scheduled).toEqual(['repoPolicy']);
  },
);

test('cancel during a long step → teardown ran, container gone, cancelled', async () => {
  const id = newSessionId('cancel');
  const handle = await startSession(stack, id, scriptedSession(repo.url, 'take forever', 'sleep 300'));
  await waitForStatus(handle, (s) => s.phase === 'agent' && s.timeline.some((t) => t.name.startsWith('step 1')));
  expect(await containersOf(id)).toHaveLength(1);
  await handle.cancel();
  const err = await handle.result().catch((e) => e);
  expect(err).toBeInstanceOf(WorkflowFailedError);
  expect((await handle.describe()).status.name).toBe('CANCELLED');
  const final = await handle.query(status);
  expect(final.phase).toBe('cancelled');
  expect(final.timeline.find((t) => t.name === 'teardown')).toMatchObject({ ok: true });
  expect(await containersOf(id)).toHaveLength(0);
});

test('a step that fails ends the session as failed, with its exit code and output', async () => {
  const id = newSessionId('stepfail');
  const handle = await startSession(
    stack,
    id,
    scriptedSession(repo.url, 'break', ['echo about to fail; exit 7', 'echo never']),
  );
  await handle.result().catch(() => undefined);
  const final = await handle.query(status);
  expect(final.phase).toBe('failed');
  const step = final.timeline.find((t) => t.name.startsWith('step 1'))!;
  expect(step).toMatchObject({ ok: false, exitCode: 7 });
  expect(step.outputTail).toContain('about to fail');
  expect(final.timeline.some((t) => t.name.startsWith('step 2'))).toBe(false);
  expect(await containersOf(id)).toHaveLength(0);
});

test('wall-time limit → timed_out with the reason, sandbox gone', async () => {
  const id = newSessionId('walltime');
  const handle = await startSession(
    stack,
    id,
    scriptedSession(repo.url, 'too slow', 'sleep 120', { limits: { wallTime: '4s' } }),
  );
  const final = (await handle.result()) as SessionStatus;
  expect(final.phase).toBe('timed_out');
  expect(final.error).toBe('wall-time limit of 4s reached');
  expect(await containersOf(id)).toHaveLength(0);
});

test('start and approve with the real temporal CLI as the client, as the README shows', async () => {
  const id = newSessionId('tctl');
  const cli = findTemporalCli()!;
  const temporal = (...args: string[]) =>
    execFileSync(cli, [...args, '--address', stack.config.TEMPORAL_ADDRESS], { encoding: 'utf8' });
  const minimal = {
    repo: { url: repo.url },
    task: 'minimal input',
    agent: { steps: [{ run: 'echo hi >> README.md' }] },
  };
  temporal(
    'workflow',
    'start',
    '--type',
    'agentSession',
    '--task-queue',
    stack.config.DRYDOCK_TASK_QUEUE,
    '--workflow-id',
    id,
    '--input',
    JSON.stringify(minimal),
  );
  const handle = stack.client.workflow.getHandle(id);
  await waitForStatus(handle, inPhase('awaiting_approval'));
  temporal(
    'workflow',
    'signal',
    '--workflow-id',
    id,
    '--name',
    'approve',
    '--input',
    '{"action":"push","by":"temporal-cli-user"}',
  );
  const final = (await handle.result()) as SessionStatus;
  expect(final.phase).toBe('completed');
  expect(final.decisions).toMatchObject([{ action: 'push', by: 'temporal-cli-user', decision: 'approve' }]);
  expect(remoteBranch(`drydock/${id}`)).toBe(final.pushed!.commit);
  // Visibility lags the result: polled.
  const listed = async () => temporal('workflow', 'list', '--query', `WorkflowId="${id}" AND DrydockPhase="completed"`);
  expect(await pollUntil(listed, (out) => out.includes(id), 'listed as completed', 30_000)).toContain(id);
});

test('malformed signals are recorded as refused and cannot wedge the session; the first decision is final', async () => {
  const id = newSessionId('malformed');
  const handle = await startSession(stack, id, editingSession());
  await waitForStatus(handle, inPhase('awaiting_approval'));
  await handle.signal(approve, null as never);
  await handle.signal(approve, { action: 'push', by: 'alice', change: 123 } as never);
  await handle.signal(approve, { action: 'push', by: 'alice', comment: { html: '<b>' } } as never);
  const refusedUpdate = handle.executeUpdate(decide, { args: [{ action: 'push', by: 'alice' } as never] });
  await expect(refusedUpdate).rejects.toMatchObject({
    cause: { message: "unknown decision 'undefined'; use approve or reject" },
  });
  const waiting = await waitForStatus(handle, (s) => s.refusedDecisions.length === 3);
  expect(waiting.phase).toBe('awaiting_approval');
  expect(waiting.refusedDecisions.map((r) => r.reason)).toEqual([
    "unknown action 'undefined'; known actions: push, pull_request, deploy, mcp_write, plan",
    "'change' must be the whole hash of the change: 64 hex characters, as pendingApproval.change shows",
    "'comment' must be text",
  ]);

  // A rejection and an approval in quick succession: the first one stands.
  await handle.signal(reject, { action: 'push', by: 'bob' });
  await handle.signal(approve, { action: 'push', by: 'carol' });
  const final = (await handle.result()) as SessionStatus;
  expect(final.phase).toBe('rejected');
  expect(final.decisions).toMatchObject([{ decision: 'reject', by: 'bob' }]);
  expect(remoteBranch(`drydock/${id}`)).toBeUndefined();
});
