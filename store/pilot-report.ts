/**
 * `drydock report`: the pilot's figures over a window, from session_metrics.
 * Definitions (docs/audit.md): a session is *reviewed* when a person approved
 * or rejected it; *accepted* when a person approved it; the acceptance rate
 * is accepted / reviewed. Review minutes are measured (review/review-time.ts);
 * waiting for review is its own figure.
 */
import type { Pool } from 'pg';
import { durationMs } from '../workflows/input';

export interface Report {
  since: string;
  repo?: string;
  sessions: number;
  completed: number;
  approved: number;
  merged: number;
  /** accepted / reviewed, null when nothing was reviewed. */
  acceptanceRate: number | null;
  medianTimeToReadySeconds: number | null;
  /** Accepted changes whose every decision was measured, per measured review minute spent on them. */
  acceptedChangesPerReviewMinute: number | null;
  /** Measured review minutes, every session and reviewer of the window. */
  reviewMinutes: number;
  /** Median over accepted changes with a measured review of the minutes reviewers spent. */
  medianReviewMinutesPerAcceptedChange: number | null;
  /** Accepted changes with a decision made without a measurement (a signal, the API without a view). */
  acceptedUnmeasured: number;
  /** Median over reviewed sessions of the minutes their changes waited for a decision. */
  medianWaitForReviewMinutes: number | null;
  totalCostUsd: number;
  /** All sessions' model cost divided by the merged pull requests; null when none merged. */
  costPerMergedPrUsd: number | null;
  failuresByCause: Record<string, number>;
}

function median(values: number[]): number | null {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** The start of a report window given as "7d", "24h"...; undefined when it is not such a duration. */
export function windowStart(since: string, now = Date.now()): Date | undefined {
  return /^\d+(ms|s|m|h|d)$/.test(since) ? new Date(now - durationMs(since)) : undefined;
}

const round = (n: number | null, digits = 2) => (n === null ? null : Number(n.toFixed(digits)));

export async function buildReport(pool: Pool, opts: { since: Date; repo?: string }): Promise<Report> {
  const { rows } = await pool.query<{
    outcome: string;
    failure_cause: string | null;
    time_to_ready_ms: string | null;
    cost_usd: string;
    review_wait_ms: string;
    review_active_ms: string | null;
    decisions_unmeasured: number;
    approved: boolean;
    merged: boolean | null;
  }>(
    `select outcome, failure_cause, time_to_ready_ms, cost_usd, review_wait_ms, review_active_ms,
            decisions_unmeasured, approved, merged
       from session_metrics where started_at >= $1 and ($2::text is null or repo = $2)`,
    [opts.since.toISOString(), opts.repo ?? null],
  );
  const accepted = rows.filter((r) => r.approved);
  const reviewed = rows.filter((r) => r.approved || r.outcome === 'rejected');
  const merged = rows.filter((r) => r.merged === true).length;
  const totalCost = rows.reduce((sum, r) => sum + Number(r.cost_usd), 0);
  const failuresByCause: Record<string, number> = {};
  for (const r of rows) {
    if (r.outcome === 'completed') continue;
    const cause = r.failure_cause ?? r.outcome;
    failuresByCause[cause] = (failuresByCause[cause] ?? 0) + 1;
  }
  const ready = rows.filter((r) => r.time_to_ready_ms !== null).map((r) => Number(r.time_to_ready_ms) / 1000);
  const minutes = (ms: string | null) => Number(ms ?? 0) / 60_000;
  const measured = accepted.filter((r) => r.review_active_ms !== null && r.decisions_unmeasured === 0);
  const measuredMinutes = measured.reduce((sum, r) => sum + minutes(r.review_active_ms), 0);
  const waited = reviewed.filter((r) => Number(r.review_wait_ms) > 0).map((r) => minutes(r.review_wait_ms));
  return {
    since: opts.since.toISOString(),
    repo: opts.repo,
    sessions: rows.length,
    completed: rows.filter((r) => r.outcome === 'completed').length,
    approved: accepted.length,
    merged,
    acceptanceRate: reviewed.length ? round(accepted.length / reviewed.length, 4) : null,
    medianTimeToReadySeconds: round(median(ready)),
    acceptedChangesPerReviewMinute: measuredMinutes > 0 ? round(measured.length / measuredMinutes, 3) : null,
    reviewMinutes: round(rows.reduce((sum, r) => sum + minutes(r.review_active_ms), 0))!,
    medianReviewMinutesPerAcceptedChange: round(median(measured.map((r) => minutes(r.review_active_ms)))),
    acceptedUnmeasured: accepted.length - measured.length,
    medianWaitForReviewMinutes: round(median(waited)),
    totalCostUsd: round(totalCost, 6)!,
    costPerMergedPrUsd: merged ? round(totalCost / merged, 6) : null,
    failuresByCause,
  };
}

const LABELS: [keyof Report, string][] = [
  ['sessions', 'sessions'],
  ['completed', 'completed'],
  ['approved', 'approved'],
  ['merged', 'merged'],
  ['acceptanceRate', 'acceptance rate'],
  ['medianTimeToReadySeconds', 'median time to ready (s)'],
  ['acceptedChangesPerReviewMinute', 'accepted changes per review minute'],
  ['reviewMinutes', 'review minutes (measured)'],
  ['medianReviewMinutesPerAcceptedChange', 'median review minutes per accepted change'],
  ['acceptedUnmeasured', 'accepted, review unmeasured'],
  ['medianWaitForReviewMinutes', 'median wait for review (min)'],
  ['totalCostUsd', 'model cost (USD)'],
  ['costPerMergedPrUsd', 'cost per merged PR (USD)'],
];

const show = (v: unknown) => (v === null || v === undefined ? '-' : String(v));

/** The report as labelled rows, failures by cause last. */
export function reportRows(report: Report): [string, string][] {
  const rows: [string, string][] = LABELS.map(([key, label]) => [label, show(report[key])]);
  for (const [cause, n] of Object.entries(report.failuresByCause)) rows.push([`failures: ${cause}`, String(n)]);
  return rows;
}

export function formatReport(report: Report, format: 'table' | 'csv' | 'json'): string {
  if (format === 'json') return JSON.stringify(report, null, 2);
  const rows = reportRows(report);
  if (format === 'csv') {
    const quote = (s: string) => (/[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s);
    return ['metric,value', ...rows.map(([k, v]) => `${quote(k)},${quote(v)}`)].join('\n');
  }
  const width = Math.max(...rows.map(([k]) => k.length));
  const scope = `since ${report.since}${report.repo ? `, repo ${report.repo}` : ''}`;
  return [scope, '', ...rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`)].join('\n');
}
