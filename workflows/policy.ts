/** Pure decisions of a session, unit-tested without Temporal. */
import { ACTIONS, type DecideInput, type SessionStatus } from './api';

/**
 * Why a decision must be refused, or undefined when it counts. A decision
 * counts only for the approval pending right now, so nobody approves a change
 * they have not been shown.
 */
export function refuseDecision(
  state: Pick<SessionStatus, 'phase' | 'pendingApproval'>,
  approvers: readonly string[],
  input: Partial<DecideInput> | undefined,
): string | undefined {
  if (!input || typeof input !== 'object') return 'a decision needs {action, by}';
  if (input.decision !== undefined && input.decision !== 'approve' && input.decision !== 'reject') {
    return `unknown decision '${String(input.decision)}'; use approve or reject`;
  }
  if (!ACTIONS.includes(input.action as never)) {
    return `unknown action '${String(input.action)}'; known actions: ${ACTIONS.join(', ')}`;
  }
  if (typeof input.by !== 'string' || input.by.trim() === '') return "'by' must name who decides";
  if (approvers.length > 0 && !approvers.includes(input.by)) {
    return `${input.by} is not an approver of this session (approvers: ${approvers.join(', ')})`;
  }
  if (state.pendingApproval?.action !== input.action) {
    return `no approval is pending for ${input.action} (phase: ${state.phase})`;
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
