/**
 * Parallel attempts as pure decisions (docs/attempts.md): each attempt's
 * session input, whether a pick counts, and how the whole ends.
 */
import type { AttemptsStatus, Outcome, PickInput, SessionProgress } from '../api';
import { OUTCOMES } from '../api';
import type { SessionInput, SessionInputDraft } from '../input';
import { sessionSchemas } from '../schemas';
import { agentLabel } from './metrics';
import { defaultBranch, refuseDecision } from './policy';

export interface PlannedAttempt {
  index: number;
  sessionId: string;
  agent: string;
  input: SessionInputDraft;
}

/**
 * The attempts an input asks for, each a session input of its own: the
 * attempt's agent, the parent named (its first gate waits for the pick), and
 * the parent's branch, which only the picked attempt pushes. Problems name the attempt.
 */
export function plannedAttempts(
  parentId: string,
  raw: Record<string, unknown>,
  input: SessionInput,
): { ok: true; attempts: PlannedAttempt[] } | { ok: false; problems: string[] } {
  const agents = typeof input.attempts === 'number' ? Array(input.attempts).fill(undefined) : (input.attempts ?? []);
  const rawAgents = Array.isArray(raw.attempts) ? (raw.attempts as { agent?: unknown }[]) : [];
  const rawPublish = (raw.publish ?? {}) as Record<string, unknown>;
  const problems: string[] = [];
  const rest = { ...raw };
  delete rest.attempts;
  const attempts = agents.map((_, i): PlannedAttempt => {
    const childInput = {
      ...rest,
      agent: rawAgents[i]?.agent ?? raw.agent,
      publish: { ...rawPublish, branch: input.publish.branch ?? defaultBranch(parentId) },
      attemptOf: { session: parentId, index: i + 1, count: agents.length },
    } as SessionInputDraft;
    const parsed = sessionSchemas().parseSessionInput(childInput);
    if (!parsed.ok) problems.push(...parsed.problems.map((p) => `attempts.${i}: ${p}`));
    const agent = parsed.ok ? agentLabel(parsed.input.agent) : '?';
    return { index: i + 1, sessionId: `${parentId}.${i + 1}`, agent, input: childInput };
  });
  return problems.length ? { ok: false, problems } : { ok: true, attempts };
}

/** Why a pick does not count, or undefined: the attempt waits at its gate and the picker may approve it. */
export function refusePick(status: AttemptsStatus, input: Partial<PickInput> | undefined): string | undefined {
  if (!input || typeof input !== 'object') return 'a pick needs {attempt, by}';
  if (status.picked) return `attempt ${status.picked.attempt} was already picked by ${status.picked.by}`;
  const attempt = status.attempts.find((a) => a.index === input.attempt);
  if (!attempt) return `no attempt ${String(input.attempt)}: pick 1 to ${status.attempts.length}`;
  const progress = attempt.progress;
  if (!progress?.pending || progress.phase !== 'awaiting_approval') {
    return `attempt ${attempt.index} is not waiting for review (phase: ${progress?.phase ?? 'starting'})`;
  }
  const { pending, policy } = progress;
  // A pick is an approval: it names the change reviewed, or a change that moved meanwhile would be approved.
  if (input.change === undefined) return "a pick names the change it approves: 'change', the attempt's pending change";
  return refuseDecision(
    { phase: progress.phase, pendingApproval: pending, requestedBy: progress.requestedBy },
    policy ?? { approvers: [], forbidSelfApproval: false },
    { decision: 'approve', action: pending.action, by: input.by!, change: input.change, comment: input.comment },
  );
}

export const isOutcome = (phase: string | undefined): phase is Outcome =>
  (OUTCOMES as readonly string[]).includes(phase ?? '');

/** Whether every attempt has ended (its last report is an outcome). */
export const allEnded = (progress: (SessionProgress | undefined)[]) => progress.every((p) => isOutcome(p?.phase));

/**
 * How the attempts end: as the picked one did; without a pick, rejected when
 * every attempt was rejected, timed out when all timed out, else failed.
 */
export function finalOutcome(status: Pick<AttemptsStatus, 'attempts' | 'picked'>): Outcome {
  if (status.picked) {
    const phase = status.attempts.find((a) => a.index === status.picked!.attempt)?.progress?.phase;
    return isOutcome(phase) ? phase : 'failed';
  }
  const phases = status.attempts.map((a) => a.progress?.phase);
  for (const same of ['rejected', 'timed_out', 'cancelled'] as const) if (phases.every((p) => p === same)) return same;
  return 'failed';
}
