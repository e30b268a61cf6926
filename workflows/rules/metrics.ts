/**
 * A session's pilot metrics, derived from its final status by a pure
 * function: the workflow hands the result to an activity that writes the
 * session_metrics row (docs/audit.md).
 */
import type { ReviewTime, SessionStatus } from '../api';
import type { AgentSettings } from '../input';

/** The agent configuration as the figures name it: its name, else its kind and model or command. */
export function agentLabel(agent: AgentSettings): string {
  if (agent.name) return agent.name;
  if (agent.kind === 'openai') return `openai ${agent.model ?? ''}`.trim();
  if (agent.kind === 'cli')
    return `cli ${typeof agent.command === 'string' ? agent.command : (agent.command?.[0] ?? '')}`;
  return 'script';
}

/** A well-formed review time (what the console and CLI send); anything else leaves a decision unmeasured. */
export function isReviewTime(value: unknown): value is ReviewTime {
  const r = value as ReviewTime | undefined;
  return (
    typeof r === 'object' &&
    r !== null &&
    Number.isSafeInteger(r.ms) &&
    r.ms >= 0 &&
    (r.via === 'console' || r.via === 'cli')
  );
}

export interface SessionMetrics {
  sessionId: string;
  repo: string;
  requestedBy?: string;
  startedAt: string;
  endedAt: string;
  outcome: string;
  /** Why it did not complete (undefined when it did). */
  failureCause?: string;
  /** From the session's start to its sandbox being ready. */
  timeToReadyMs?: number;
  /** How long the sandbox existed: from ready to torn down. */
  sandboxMs?: number;
  snapshotAgeMs?: number;
  agentTurns: number;
  tokens: number;
  costUsd: number;
  verificationRounds: number;
  verificationPassed?: boolean;
  /** Time changes waited for a decision, over all approval gates: waiting for review, not review time. */
  reviewWaitMs: number;
  /** Decisions made without a measured review time (a signal, the API without a view). */
  decisionsUnmeasured: number;
  /** A reviewer approved at least one action. */
  approved: boolean;
  prUrl?: string;
  /** The agent configuration (agentLabel). */
  agent?: string;
  /** The agentAttempts session this was an attempt of. */
  attemptOf?: string;
  acceptancePassed?: boolean;
  /** From the session's start to its change shown at an approval gate. */
  timeToReviewMs?: number;
  restarts: number;
  refusals: { egress: number; decisions: number; budget: number };
  pushed: boolean;
}

const endOf = (r: { startedAt: string; durationMs?: number }) => Date.parse(r.startedAt) + (r.durationMs ?? 0);

export function sessionMetricsOf(state: SessionStatus, endedAt: string): SessionMetrics {
  const started = Date.parse(state.startedAt);
  const provision = state.timeline.find((r) => r.name === 'provision' && r.ok);
  const teardown = state.timeline.find((r) => r.name === 'teardown');
  const ready = provision ? endOf(provision) : undefined;
  const reviews = state.timeline.filter(
    (r) => r.name.startsWith('approval: ') && r.detail !== 'not required by policy',
  );
  const agent = state.agent;
  const gate = reviews[0];
  return {
    sessionId: state.sessionId,
    repo: state.repo,
    requestedBy: state.requestedBy,
    startedAt: state.startedAt,
    endedAt,
    outcome: state.phase,
    failureCause: state.phase === 'completed' ? undefined : (state.failureCause ?? state.phase),
    timeToReadyMs: ready === undefined ? undefined : ready - started,
    sandboxMs: ready === undefined ? undefined : (teardown ? endOf(teardown) : Date.parse(endedAt)) - ready,
    snapshotAgeMs: state.snapshot?.ageMs,
    agentTurns: agent?.turn ?? 0,
    tokens: agent?.usage?.totalTokens ?? 0,
    costUsd: agent?.costUsd ?? 0,
    verificationRounds: state.verification ? (state.verificationRounds ?? 1) : 0,
    verificationPassed: state.verification?.passed,
    reviewWaitMs: reviews.reduce((sum, r) => sum + (r.durationMs ?? 0), 0),
    decisionsUnmeasured: state.decisions.filter((d) => !d.review).length,
    approved: state.decisions.some((d) => d.decision === 'approve'),
    prUrl: state.pullRequest?.url,
    agent: agent?.label,
    attemptOf: state.attemptOf,
    acceptancePassed: state.acceptance?.passed,
    timeToReviewMs: gate ? Date.parse(gate.startedAt) - started : undefined,
    restarts: state.restarts ?? 0,
    refusals: {
      egress: state.refusals?.egress ?? 0,
      decisions: state.refusedDecisions.length,
      budget: state.refusals?.budget ?? 0,
    },
    pushed: state.pushed !== undefined,
  };
}
