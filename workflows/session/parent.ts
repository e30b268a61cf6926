/**
 * A session started by another workflow (agentAttempts, a pilot, a parent session) tells its
 * parent how it goes at every phase change (the sessionProgress signal), and,
 * as one of parallel attempts, hears back from it: picked (a decision on its
 * pending action) or set aside (another attempt was picked: it ends without
 * a push).
 */
import { getExternalWorkflowHandle, log, setHandler, workflowInfo } from '@temporalio/workflow';
import { attemptPicked, sessionProgress, setAside, type DecideInput, type SessionProgress } from '../api';
import { agentLabel } from '../rules/metrics';
import type { SessionRun } from './state';

/** Sends the session's progress to its parent, if it has one; a parent that has ended is not an error. */
export function tellParent(run: SessionRun): void {
  const parent = workflowInfo().parent;
  if (!parent) return;
  getExternalWorkflowHandle(parent.workflowId)
    .signal(sessionProgress, progressOf(run))
    .catch((err: unknown) => log.info('the parent did not take the progress', { error: String(err) }));
}

const TEXT = 500;

export function progressOf(run: SessionRun): SessionProgress {
  const { status: s, input } = run;
  const agent = s.agent;
  const pending = s.pendingApproval;
  return {
    sessionId: run.sessionId,
    phase: s.phase,
    // Workflow time goes on across continue-as-new; the phase changes of one moment keep their order.
    seq: Date.now() * 1000 + (run.phaseChanges % 1000),
    at: new Date().toISOString(),
    startedAt: s.startedAt,
    ...(run.sandbox ? { hostQueue: run.sandbox.hostQueue } : {}),
    ...(input
      ? { agent: { label: agentLabel(input.agent), costUsd: agent?.costUsd ?? 0, turns: agent?.turn ?? 0 } }
      : {}),
    ...(agent?.commit
      ? {
          change: {
            commit: agent.commit,
            hash: pending?.change ?? '',
            diffstat: (agent.diffstat ?? '').slice(-TEXT),
            changed: agent.changed ?? false,
          },
        }
      : {}),
    ...(s.verification
      ? { verification: { passed: s.verification.passed, summary: s.verification.summary.slice(0, TEXT) } }
      : {}),
    ...(s.acceptance ? { acceptance: { passed: s.acceptance.passed } } : {}),
    ...(pending ? { pending } : {}),
    policy: { approvers: run.policy.approvers, forbidSelfApproval: run.policy.forbidSelfApproval },
    ...(s.requestedBy ? { requestedBy: s.requestedBy } : {}),
    pushed: s.pushed !== undefined,
    ...(s.failureCause ? { failureCause: s.failureCause } : {}),
    ...(s.error ? { error: s.error.slice(0, TEXT) } : {}),
  };
}

export const setAsideMessage = (aside: { by: string; picked: string }) =>
  `set aside: ${aside.by} picked ${aside.picked}; this attempt ends without a push`;

/**
 * An attempt's messages from its parent. Picked: the pick is a decision on
 * the pending action, refused like any (a stale change, an approver not
 * allowed) and kept with its review time. Set aside: the work under way is
 * cancelled and the session ends without a push (outcome.ts).
 */
export function installAttemptHandlers(run: SessionRun, accept: (input: DecideInput) => string | undefined): void {
  setHandler(attemptPicked, (input) => {
    if (!run.input?.attemptOf) return;
    const reason = accept(input);
    if (reason) run.status.refusedDecisions.push({ input, reason, at: new Date().toISOString() });
  });
  setHandler(setAside, (aside) => {
    if (!run.input?.attemptOf || run.status.setAside) return;
    run.status.setAside = { by: String(aside?.by ?? 'unknown'), picked: String(aside?.picked ?? 'unknown') };
    run.workScope?.cancel();
  });
}
