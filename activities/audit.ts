/**
 * The audit trail and pilot metrics as activities: events the workflow itself
 * witnessed (a verification result, a reviewer's decision), a pull request
 * GitHub reports closed, and a session's row of metrics when it ends.
 */
import type { Database } from '../store/db';
import { GENESIS, recordEvent, type AuditInput, type AuditTrail } from '../store/audit';
import type { AuditSeal, PullRequestClosed } from '../workflows/api';
import type { SessionMetrics } from '../workflows/rules/metrics';
import {
  activityRetries,
  approvalWait,
  decisionsUnmeasured,
  mergedChanges,
  modelCost,
  reviewTime,
  sandboxSeconds,
  sessionRefusals,
  sessionsEnded,
} from '../platform/metrics';

/**
 * The figures' counters of an ended session (docs/pilot.md). A retried
 * activity counts again: Prometheus counters are rates, the table is the record.
 */
function countEnded(m: SessionMetrics, retries: number): void {
  const agent = m.agent ?? 'unknown';
  sessionsEnded.inc({ outcome: m.outcome, repo: m.repo, agent });
  if (m.sandboxMs) sandboxSeconds.inc({ repo: m.repo, agent }, m.sandboxMs / 1000);
  if (m.costUsd) modelCost.inc({ repo: m.repo, agent }, m.costUsd);
  if (retries) activityRetries.inc({ repo: m.repo }, retries);
  for (const kind of ['egress', 'decisions', 'budget'] as const) {
    if (m.refusals[kind]) sessionRefusals.inc({ kind }, m.refusals[kind]);
  }
}

/** What the audit activities use: the trail and the database it lives in. */
export interface AuditDeps {
  audit: AuditTrail;
  db: Database;
}

export function createAuditActivities({ audit, db }: AuditDeps) {
  return {
    /** An event the workflow itself witnessed: a verification result, a reviewer's decision. */
    async recordAudit(event: Omit<AuditInput, 'activityId' | 'attempt' | 'at'> & { at?: string }): Promise<void> {
      await recordEvent(audit, { ...event, at: event.at ? new Date(event.at) : undefined });
    },

    /** GitHub said a session's pull request was closed: the audit event, and `merged` for the metrics. */
    async recordPullRequestClosed(record: PullRequestClosed): Promise<void> {
      await recordEvent(audit, {
        sessionId: record.sessionId,
        key: `webhook/pull_request-${record.number}-closed`,
        kind: 'webhook',
        actor: record.by,
        data: { event: 'pull_request', action: 'closed', ...record },
      });
      await db.pool.query(
        'update session_metrics set merged = $1, merged_at = case when $1 then now() end where session_id = $2',
        [record.merged, record.sessionId],
      );
      if (record.merged) mergedChanges.inc({ repo: record.repo });
    },

    /**
     * The session's row of pilot metrics, written (or rewritten, on a retry)
     * when it ends; returns the audit chain's seal then, for the session's result.
     */
    async recordSessionMetrics(m: SessionMetrics): Promise<AuditSeal> {
      if (m.reviewWaitMs > 0) approvalWait.observe(m.reviewWaitMs / 1000);
      // One statement: the row, with what the database already holds read inside it: the retries
      // (every audit row written by an attempt after the first one), every reviewer's measured time
      // (the console's and the CLI's records, docs/audit.md), and the audit chain's end for the seal.
      const written = await db.pool.query<{
        retries: number;
        review_ms: string | null;
        seq: number | null;
        hash: string | null;
      }>(
        `insert into session_metrics (session_id, repo, requested_by, started_at, ended_at, outcome, failure_cause,
           time_to_ready_ms, sandbox_ms, snapshot_age_ms, agent_turns, tokens, cost_usd, verification_rounds,
           verification_passed, retries, review_wait_ms, approved, pr_url, review_active_ms, decisions_unmeasured,
           agent, attempt_of, acceptance_passed, time_to_review_ms, restarts, refusals_egress, refusals_decisions,
           refusals_budget, pushed)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
           (select coalesce(sum(greatest(attempt - 1, 0)), 0) from audit_events where session_id = $1),
           $16, $17, $18, (select sum(active_ms) from review_time where session_id = $1), $19,
           $20, $21, $22, $23, $24, $25, $26, $27, $28)
         on conflict (session_id) do update set
           ended_at = excluded.ended_at, outcome = excluded.outcome, failure_cause = excluded.failure_cause,
           time_to_ready_ms = excluded.time_to_ready_ms, sandbox_ms = excluded.sandbox_ms,
           snapshot_age_ms = excluded.snapshot_age_ms, agent_turns = excluded.agent_turns, tokens = excluded.tokens,
           cost_usd = excluded.cost_usd, verification_rounds = excluded.verification_rounds,
           verification_passed = excluded.verification_passed, retries = excluded.retries,
           review_wait_ms = excluded.review_wait_ms, approved = excluded.approved, pr_url = excluded.pr_url,
           review_active_ms = excluded.review_active_ms, decisions_unmeasured = excluded.decisions_unmeasured,
           agent = excluded.agent, attempt_of = excluded.attempt_of, acceptance_passed = excluded.acceptance_passed,
           time_to_review_ms = excluded.time_to_review_ms, restarts = excluded.restarts,
           refusals_egress = excluded.refusals_egress, refusals_decisions = excluded.refusals_decisions,
           refusals_budget = excluded.refusals_budget, pushed = excluded.pushed
         returning retries, review_active_ms as review_ms,
           (select seq from audit_events where session_id = $1 order by seq desc limit 1) as seq,
           (select hash from audit_events where session_id = $1 order by seq desc limit 1) as hash`,
        [
          m.sessionId,
          m.repo,
          m.requestedBy ?? null,
          m.startedAt,
          m.endedAt,
          m.outcome,
          m.failureCause ?? null,
          m.timeToReadyMs ?? null,
          m.sandboxMs ?? null,
          m.snapshotAgeMs ?? null,
          m.agentTurns,
          m.tokens,
          m.costUsd,
          m.verificationRounds,
          m.verificationPassed ?? null,
          m.reviewWaitMs,
          m.approved,
          m.prUrl ?? null,
          m.decisionsUnmeasured,
          m.agent ?? null,
          m.attemptOf ?? null,
          m.acceptancePassed ?? null,
          m.timeToReviewMs ?? null,
          m.restarts,
          m.refusals.egress,
          m.refusals.decisions,
          m.refusals.budget,
          m.pushed,
        ],
      );
      const { retries, review_ms: reviewMs, seq, hash } = written.rows[0];
      if (reviewMs !== null) reviewTime.observe(Number(reviewMs) / 1000);
      decisionsUnmeasured.inc(m.decisionsUnmeasured);
      countEnded(m, retries);
      return { events: seq ?? 0, head: hash ?? GENESIS };
    },
  };
}
