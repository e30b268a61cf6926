/** Pure decisions of a session, unit-tested without Temporal. */
import {
  ACTIONS,
  GATED_ACTIONS,
  type GatedAction,
  type Action,
  type ApprovalPolicy,
  type DecideInput,
  type SessionStatus,
} from '../api';

/**
 * The policy a session runs under: the server's, tightened by the session's.
 * A session may require more actions, narrow the approvers to a subset of the
 * server's, and forbid self-approval; it can loosen nothing.
 */
export function tightenPolicy(
  server: ApprovalPolicy,
  session: ApprovalPolicy,
): { ok: true; policy: ApprovalPolicy } | { ok: false; problem: string } {
  const required = ACTIONS.filter((a) => server.required.includes(a) || session.required.includes(a));
  let approvers = session.approvers.length ? session.approvers : server.approvers;
  if (server.approvers.length && session.approvers.length) {
    approvers = session.approvers.filter((a) => server.approvers.includes(a));
    if (approvers.length === 0) {
      return {
        ok: false,
        problem: `approval.approvers: none of ${session.approvers.join(', ')} is a server approver (${server.approvers.join(', ')})`,
      };
    }
  }
  return {
    ok: true,
    policy: {
      required,
      approvers,
      forbidSelfApproval: server.forbidSelfApproval || session.forbidSelfApproval,
      separateGates: server.separateGates || session.separateGates,
      // The operator's alone: a session neither sets nor lifts it.
      ...(server.parkAfter ? { parkAfter: server.parkAfter } : {}),
      ...(server.maxChildren !== undefined ? { maxChildren: server.maxChildren } : {}),
    },
  };
}

/** The server's policy, narrowed by the repo's approvers (from the registry), then tightened by the session's. */
export function settlePolicy(server: ApprovalPolicy, repoApprovers: string[], session: ApprovalPolicy) {
  const repo = tightenPolicy(server, {
    required: [],
    approvers: repoApprovers,
    forbidSelfApproval: false,
    separateGates: false,
  });
  return repo.ok ? tightenPolicy(repo.policy, session) : repo;
}

/**
 * One review per change: a session that opens a pull request, under a policy
 * that requires approving it, asks once, and that approval also covers the
 * push (part of opening the pull request, bound to the same change hash).
 * Policies with separate gates ask for each.
 */
export function reviewedTogether(policy: ApprovalPolicy, opensPullRequest: boolean): boolean {
  return opensPullRequest && !policy.separateGates && policy.required.includes('pull_request');
}

/** A change hash as approvals name it: the whole sha256, never a prefix (a prefix can be ground to collide). */
export const CHANGE_HASH = /^[0-9a-f]{64}$/;

/**
 * Why a decision must be refused, or undefined when it counts. A decision
 * counts only for the approval pending right now, so nobody approves a change
 * they have not been shown, and, when it names a change, only for that change.
 */
export function refuseDecision(
  state: Pick<SessionStatus, 'phase' | 'pendingApproval' | 'requestedBy'>,
  policy: Pick<ApprovalPolicy, 'approvers' | 'forbidSelfApproval'>,
  input: Partial<DecideInput> | undefined,
): string | undefined {
  if (!input || typeof input !== 'object') return 'a decision needs {decision, action, by}';
  if (input.decision !== 'approve' && input.decision !== 'reject') {
    return `unknown decision '${String(input.decision)}'; use approve or reject`;
  }
  if (!GATED_ACTIONS.includes(input.action as GatedAction)) {
    return `unknown action '${String(input.action)}'; known actions: ${GATED_ACTIONS.join(', ')}`;
  }
  if (typeof input.by !== 'string' || input.by.trim() === '') return "'by' must name who decides";
  if (input.comment !== undefined && typeof input.comment !== 'string') return "'comment' must be text";
  if (input.change !== undefined && (typeof input.change !== 'string' || !CHANGE_HASH.test(input.change))) {
    return "'change' must be the whole hash of the change: 64 hex characters, as pendingApproval.change shows";
  }
  if (policy.approvers.length > 0 && !policy.approvers.includes(input.by)) {
    return `${input.by} is not an approver of this session (approvers: ${policy.approvers.join(', ')})`;
  }
  const pending = state.pendingApproval;
  if (pending?.covers?.includes(input.action as Action)) {
    return `${input.action} is approved together with ${pending.action} (one review per change): decide on ${pending.action}`;
  }
  if (!pending || pending.action !== input.action) {
    return `no approval is pending for ${input.action} (phase: ${state.phase})`;
  }
  if (input.decision !== 'reject' && policy.forbidSelfApproval && input.by === state.requestedBy) {
    return `${input.by} requested this session and may not approve it (self-approval is forbidden)`;
  }
  if (input.change !== undefined && input.change !== pending.change) {
    return `stale: change ${input.change.slice(0, 12)} is not the pending change ${pending.change.slice(0, 12)}`;
  }
  return undefined;
}

/** The session's branch: `drydock/<session id>`, made a valid git ref name. */
export function defaultBranch(sessionId: string): string {
  const safe = sessionId
    .replace(/[^A-Za-z0-9._-]+/g, '-')
    .replace(/\.{2,}/g, '.')
    .replace(/^[.-]+|[.-]+$|\.lock$/g, '');
  return `drydock/${safe || 'session'}`;
}

/**
 * Why an approval from the console comes too soon: the pending change (its
 * open `approval: <action>` step) appeared less than `settleMs` before `nowMs`,
 * as when a live redraw swapped it under the approver's cursor.
 */
export function tooSoonToApprove(
  status: Pick<SessionStatus, 'pendingApproval' | 'timeline'>,
  nowMs: number,
  settleMs: number,
): string | undefined {
  const pending = status.pendingApproval;
  if (!pending || settleMs <= 0) return undefined;
  const step = [...status.timeline]
    .reverse()
    .find((t) => t.name === `approval: ${pending.action}` && t.durationMs === undefined);
  const age = step ? nowMs - Date.parse(step.startedAt) : Infinity;
  if (!(age < settleMs)) return undefined;
  return `change ${pending.change.slice(0, 12)} appeared ${Math.max(0, Math.round(age / 1000))} s ago: look it over, then approve again (in ${Math.ceil((settleMs - age) / 1000)} s at the earliest)`;
}
