/**
 * agentAttempts: parallel attempts at one task (docs/attempts.md). Each
 * attempt is an agentSession child (id `<parent>.<n>`) that works, verifies
 * and waits at its first gate; the children report their progress here
 * (sessionProgress), so the reviewer sees them side by side. One `pick` is
 * the approval of the picked change (bound to its hash, written to the
 * picked session's audit trail); the others are set aside and end without a
 * push. The parent lives until the picked session ends, so follow-ups go to it.
 */
import {
  ApplicationFailure,
  condition,
  getExternalWorkflowHandle,
  ParentClosePolicy,
  proxyActivities,
  setHandler,
  startChild,
  workflowInfo,
  type ChildWorkflowHandle,
} from '@temporalio/workflow';
import type { SharedActivities } from '../activities';
import {
  attemptPicked,
  attemptsStatus,
  ErrorType,
  pick,
  sessionProgress,
  setAside,
  WORKFLOW_TYPE,
  type AttemptsStatus,
  type Phase,
  type PickInput,
} from './api';
import { parseSessionInput } from './input';
import { allEnded, finalOutcome, isOutcome, plannedAttempts, refusePick, type PlannedAttempt } from './rules/attempts';
import { redactUrl } from './rules/repo-url';

type SessionWorkflow = (input: unknown) => Promise<unknown>;

const { operatorLimits } = proxyActivities<SharedActivities>({
  startToCloseTimeout: '1m',
  retry: { maximumAttempts: 5 },
});

export async function agentAttempts(rawInput: unknown): Promise<AttemptsStatus> {
  const id = workflowInfo().workflowId;
  const raw = (rawInput ?? {}) as Record<string, unknown>;
  const status: AttemptsStatus = {
    sessionId: id,
    repo: typeof (raw.repo as { url?: unknown })?.url === 'string' ? redactUrl((raw.repo as { url: string }).url) : '',
    task: typeof raw.task === 'string' ? raw.task : '',
    phase: 'running',
    startedAt: new Date(workflowInfo().startTime).toISOString(),
    attempts: [],
    refusedPicks: [],
  };
  let picked: PickInput | undefined;
  installHandlers(status, (input) => (picked = input));
  const planned = await plan(status, raw);
  const children = await Promise.all(planned.map(startAttempt));
  // A child's end is also its last report; its result stands in if that report did not come.
  const closed = children.map((child, i) =>
    child.result().then(
      (final) => endedAs(status, i, (final as { phase?: Phase }).phase ?? 'failed'),
      () => endedAs(status, i, 'failed'),
    ),
  );
  await condition(() => picked !== undefined || allEnded(status.attempts.map((a) => a.progress)));
  if (picked) await signalPick(status, picked);
  await Promise.all(closed);
  status.phase = finalOutcome(status);
  return status;
}

function endedAs(status: AttemptsStatus, i: number, phase: Phase): void {
  const attempt = status.attempts[i];
  if (isOutcome(attempt.progress?.phase)) return;
  attempt.progress = {
    ...(attempt.progress ?? { sessionId: attempt.sessionId, seq: 0, at: '', startedAt: '' }),
    phase,
  };
}

function installHandlers(status: AttemptsStatus, onPick: (input: PickInput) => void): void {
  setHandler(attemptsStatus, () => status);
  setHandler(sessionProgress, (progress) => {
    const attempt = status.attempts.find((a) => a.sessionId === progress?.sessionId);
    if (!attempt || (attempt.progress && attempt.progress.seq >= progress.seq)) return;
    attempt.progress = progress;
    if (status.phase === 'running' && progress.phase === 'awaiting_approval') status.phase = 'awaiting_pick';
  });
  setHandler(
    pick,
    (input) => {
      const attempt = status.attempts.find((a) => a.index === input.attempt)!;
      const pending = attempt.progress!.pending!;
      status.picked = {
        attempt: attempt.index,
        sessionId: attempt.sessionId,
        by: input.by,
        change: pending.change,
        at: new Date().toISOString(),
      };
      status.phase = 'picked';
      onPick(input);
      return status.picked;
    },
    {
      validator: (input) => {
        const reason = refusePick(status, input);
        if (reason) throw new Error(reason);
      },
    },
  );
}

/** Validates the input and the operator's limit; each attempt's input is checked before any starts. */
async function plan(status: AttemptsStatus, raw: Record<string, unknown>): Promise<PlannedAttempt[]> {
  const invalid = (problems: string[]): never => {
    status.phase = 'failed';
    status.error = `invalid input: ${problems.join('; ')}`;
    throw ApplicationFailure.nonRetryable(status.error, ErrorType.InvalidSessionInput, { problems });
  };
  const parsed = parseSessionInput(raw);
  if (!parsed.ok) return invalid(parsed.problems);
  if (parsed.input.attempts === undefined) return invalid(['attempts: required (a number, or one agent per attempt)']);
  status.requestedBy = parsed.input.requestedBy;
  const planned = plannedAttempts(status.sessionId, raw, parsed.input);
  if (!planned.ok) return invalid(planned.problems);
  const { maxAttempts } = await operatorLimits();
  if (planned.attempts.length > maxAttempts) {
    return invalid([
      `attempts: ${planned.attempts.length} asked, the operator allows ${maxAttempts} (DRYDOCK_MAX_ATTEMPTS)`,
    ]);
  }
  status.attempts = planned.attempts.map(({ index, sessionId, agent }) => ({ index, sessionId, agent }));
  return planned.attempts;
}

/** An attempt as a child session; cancelling the parent cancels it (and so tears it down). */
function startAttempt(attempt: PlannedAttempt): Promise<ChildWorkflowHandle<SessionWorkflow>> {
  return startChild<SessionWorkflow>(WORKFLOW_TYPE, {
    workflowId: attempt.sessionId,
    args: [attempt.input],
    parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
  });
}

/** The pick as a decision on the picked attempt's pending action; the others set aside. */
async function signalPick(status: AttemptsStatus, input: PickInput): Promise<void> {
  const chosen = status.picked!;
  const action = status.attempts.find((a) => a.index === chosen.attempt)!.progress!.pending!.action;
  const decision = {
    decision: 'approve' as const,
    action,
    by: input.by,
    change: chosen.change,
    ...(input.comment ? { comment: input.comment } : {}),
    ...(input.review ? { review: input.review } : {}),
  };
  await getExternalWorkflowHandle(chosen.sessionId).signal(attemptPicked, decision);
  const others = status.attempts.filter((a) => a.index !== chosen.attempt && !isOutcome(a.progress?.phase));
  await Promise.all(
    others.map(
      (a) =>
        getExternalWorkflowHandle(a.sessionId)
          .signal(setAside, { by: input.by, picked: chosen.sessionId })
          .catch(() => undefined), // it has ended already
    ),
  );
}
