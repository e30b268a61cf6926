/**
 * The approval gates of irreversible actions and the messages that decide
 * them: signals from the Temporal UI and `temporal workflow signal`, the
 * `decide` update (with a validator) from the CLI and HTTP, the `status` query.
 */
import { condition, log, setHandler } from '@temporalio/workflow';
import type { CommitResult } from '../../sandbox/contract';
import {
  approve,
  decide,
  describeSetupFiles,
  followup,
  pullRequestClosed,
  reject,
  status,
  type Action,
  type DecideInput,
  type Decision,
} from '../api';
import { checkFollowup, queueFollowup } from '../rules/followup';
import { durationMs } from '../units';
import { refuseDecision } from '../rules/policy';
import { isReviewTime } from '../rules/metrics';
import { describeVerification, screenshotsOf } from '../rules/verification';
import { editedByHand, installAttachHandlers, installPreviewHandler } from './attach';
import { SessionEnd } from './errors';
import { records } from './proxies';
import { parkSandbox } from './sandbox';
import type { SessionRun } from './state';
import { installAttemptHandlers, setAsideMessage } from './parent';
import { tellForge } from './trigger';

/** Follow-up ids remembered against redelivery. */
const FOLLOWUP_IDS = 100;

export const PAST = { approve: 'approved', reject: 'rejected' } as const;

/** Signals and updates only record decisions; the gate that waits decides what they mean. */
export function installHandlers(run: SessionRun): void {
  setHandler(status, () => run.status);
  const fromSignal = (decision: DecideInput['decision']) => (raw: unknown) => {
    // Signals are fire-and-forget from any client: anything malformed is recorded, never thrown.
    const input = { ...(raw !== null && typeof raw === 'object' ? raw : {}), decision } as DecideInput;
    // Made elsewhere (the Temporal UI, `temporal workflow signal`): unmeasured, whatever it says.
    delete input.review;
    const reason = refusal(run, input);
    if (reason) {
      log.warn('decision refused', { reason });
      run.status.refusedDecisions.push({ input, reason, at: new Date().toISOString() });
    } else {
      accept(run, input);
    }
  };
  setHandler(approve, fromSignal('approve'));
  setHandler(reject, fromSignal('reject'));
  setHandler(decide, (input) => accept(run, input), {
    validator: (input) => {
      const reason = refusal(run, input);
      if (reason) throw new Error(reason);
    },
  });
  const checked = (input: Parameters<typeof checkFollowup>[2]) =>
    checkFollowup(
      {
        phase: run.status.phase,
        requestedBy: run.status.requestedBy,
        queued: run.followups.length,
        agentKind: run.input?.agent.kind ?? 'script',
        ciRounds: run.status.ciRounds ?? 0,
      },
      run.policy,
      input,
    );
  setHandler(
    followup,
    (input) => {
      const result = checked(input);
      if (!result.ok) throw new Error(result.reason); // the validator ran on the same state
      const { id } = input;
      if (!id || !run.status.followupIds?.includes(id)) {
        // A person's follow-up takes the place of a CI failure's still waiting.
        run.followups.splice(0, run.followups.length, ...queueFollowup(run.followups, result.followup));
        if (id) run.status.followupIds = [...(run.status.followupIds ?? []), id].slice(-FOLLOWUP_IDS);
      }
      return { round: (run.status.round ?? 1) + 1, queued: run.followups.length };
    },
    {
      validator: (input) => {
        const result = checked(input);
        if (!result.ok) throw new Error(result.reason);
        if (input.id !== undefined && (typeof input.id !== 'string' || input.id.length > 100)) {
          throw new Error("'id' must be text of at most 100 characters");
        }
      },
    },
  );
  installAttachHandlers(run);
  installPreviewHandler(run);
  installAttemptHandlers(run, (input) => {
    const reason = refusal(run, input);
    if (!reason) accept(run, input);
    return reason;
  });
  setHandler(pullRequestClosed, (closed) => {
    // Bound to the pull request the session published, not to its branch's name (any repo can have one).
    const number = closed?.number;
    if (number !== undefined && number !== run.status.pullRequest?.number) {
      log.warn('pullRequestClosed ignored: not the pull request this session published', { number });
      return;
    }
    run.pullRequestClosed ??= {
      merged: closed?.merged === true,
      by: typeof closed?.by === 'string' ? closed.by : 'unknown',
    };
  });
}

/**
 * A follow-up came, or a person attached, while a change waited for approval:
 * the next round starts, and the pending approval is void.
 */
export class FollowupArrived extends Error {}

function accept(run: SessionRun, input: DecideInput): Decision {
  // Bound to the change on display: a later change needs a new decision.
  const { review, ...rest } = input;
  const decision: Decision = {
    ...rest,
    ...(isReviewTime(review) ? { review: { ms: review.ms, via: review.via } } : {}),
    change: run.status.pendingApproval!.change,
    at: new Date().toISOString(),
  };
  run.status.decisions.push(decision);
  run.verdicts.set(input.action, decision);
  return decision;
}

/** Why a decision does not count; the first decision on an action is final. */
function refusal(run: SessionRun, input: DecideInput): string | undefined {
  const decided = run.verdicts.get(input?.action);
  if (decided) return `${input.action} was already ${PAST[decided.decision]} by ${decided.by}`;
  return refuseDecision(run.status, run.policy, input);
}

/**
 * The approval gate of one irreversible action (and the actions it `covers`).
 * Required by policy: wait for a decision on this change (or the timeout);
 * then the action may run only if the approval is for exactly this change.
 */
export async function gate(
  run: SessionRun,
  action: Action,
  change: CommitResult,
  covers: Action[] = [],
): Promise<void> {
  if (run.followups.length > 0 || editedByHand(run)) throw new FollowupArrived();
  endIfSetAside(run);
  if (!run.policy.required.includes(action)) {
    await run.note(`approval: ${action}`, 'not required by policy');
    run.setPhase('publishing');
    return;
  }
  const verdict = await awaitDecision(run, action, change, covers);
  endIfSetAside(run);
  // A person who attached meanwhile changes what was approved: it is committed, verified and shown again.
  if (editedByHand(run) || (!verdict && run.followups.length > 0)) throw new FollowupArrived();
  if (!verdict) {
    const { timeout } = run.input.approval;
    throw new SessionEnd('timed_out', `no approval for ${action} within ${timeout}`, 'approval_timeout');
  }
  if (verdict.decision === 'reject') {
    const comment = verdict.comment ? `: ${verdict.comment}` : '';
    throw new SessionEnd('rejected', `${action} rejected by ${verdict.by}${comment}`, 'rejected');
  }
  if (verdict.change !== change.changeHash) {
    throw new SessionEnd(
      'failed',
      `stale approval of ${action}: the change moved after ${verdict.by} approved it`,
      'stale_approval',
    );
  }
  for (const also of covers) await run.note(`approval: ${also}`, `approved with ${action} by ${verdict.by}`);
  run.setPhase('publishing');
}

/** An attempt whose sibling was picked ends here, before anything is published. */
function endIfSetAside(run: SessionRun): void {
  const aside = run.status.setAside;
  if (aside) throw new SessionEnd('cancelled', setAsideMessage(aside), 'not_picked');
}

/** Shows the change with its evidence, waits for a decision (or the timeout) and audits it. */
async function awaitDecision(
  run: SessionRun,
  action: Action,
  change: CommitResult,
  covers: Action[],
): Promise<Decision | undefined> {
  const { status: state, input } = run;
  const timeoutMs = durationMs(input.approval.timeout);
  state.pendingApproval = {
    action,
    ...(covers.length ? { covers } : {}),
    change: change.changeHash,
    approvers: run.policy.approvers,
    deadline: new Date(Date.now() + timeoutMs).toISOString(),
    evidence: {
      branch: run.branch,
      commit: change.commit,
      diffstat: change.diffstat,
      tests: describeVerification(state.verification),
      screenshots: screenshotsOf(state.verification),
      ...(change.setupFiles ? { setupFiles: describeSetupFiles(change.setupFiles) } : {}),
    },
  };
  run.setPhase('awaiting_approval'); // after the approval is on display: the memo shows it too
  await tellForge(run, 'awaiting_approval');
  const decided = await run.track(`approval: ${action}`, async (record) => {
    const got = await waitOrPark(
      run,
      () =>
        run.verdicts.has(action) || run.followups.length > 0 || editedByHand(run) || run.status.setAside !== undefined,
      timeoutMs,
    );
    const verdict = run.verdicts.get(action);
    record.detail = verdict
      ? `${PAST[verdict.decision]} by ${verdict.by}`
      : run.followups.length > 0
        ? `superseded by a follow-up from ${run.followups[0].by}`
        : editedByHand(run)
          ? `superseded: ${run.status.attached?.by ?? run.uncommittedEditsBy} attached to the sandbox`
          : run.status.setAside
            ? `set aside: ${run.status.setAside.by} picked ${run.status.setAside.picked}`
            : `no decision within ${input.approval.timeout}`;
    record.ok = verdict ? verdict.decision === 'approve' : run.followups.length > 0 || editedByHand(run);
    return got && verdict !== undefined;
  });
  state.pendingApproval = undefined;
  const verdict = run.verdicts.get(action);
  if (verdict) {
    await records.recordAudit({
      sessionId: run.sessionId,
      key: `${run.keyPrefix}approval/${action}`,
      kind: 'approval',
      actor: verdict.by,
      at: verdict.at,
      data: {
        action,
        decision: verdict.decision,
        change: verdict.change,
        comment: verdict.comment,
        review: verdict.review ?? 'unmeasured',
      },
    });
  }
  return decided ? verdict : undefined;
}

/**
 * Waits for `done` up to `timeoutMs`; past the operator's DRYDOCK_PARK_AFTER
 * with nothing decided, parks the sandbox first (publishing needs none: the
 * push is made from the host's mirror), then waits the rest.
 */
export async function waitOrPark(run: SessionRun, done: () => boolean, timeoutMs: number): Promise<boolean> {
  const parkAfter = run.policy.parkAfter;
  const parkMs = parkAfter && parkAfter !== 'never' ? durationMs(parkAfter) : Infinity;
  if (run.status.parked || parkMs >= timeoutMs) return condition(done, timeoutMs);
  if (await condition(done, parkMs)) return true;
  run.parking = true;
  try {
    await parkSandbox(run, `park: no decision within ${parkAfter}`);
  } finally {
    run.parking = false;
  }
  return done() || condition(done, timeoutMs - parkMs);
}
