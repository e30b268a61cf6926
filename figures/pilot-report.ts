/**
 * A pilot's report (`drydock pilot report`, the console's pilot page): its
 * agent configurations side by side, from pilot_sessions and each session's
 * session_metrics row, and what each fault did to the outcomes. Definitions
 * (docs/pilot.md) follow docs/audit.md: *accepted* = a person approved;
 * review minutes are measured ones; a session's cost is its model cost plus
 * its sandbox minutes at the operator's price.
 */
import type { Pool } from 'pg';

export interface PilotSessionRecord {
  sessionId: string;
  task: string;
  configuration: string;
  attempt: number;
  faults: string[];
  /** Undefined while the session has not ended (no metrics row yet). */
  ended?: {
    outcome: string;
    failureCause: string | null;
    timeToReviewMs: number | null;
    acceptancePassed: boolean | null;
    approved: boolean;
    costUsd: number;
    sandboxMs: number;
    reviewActiveMs: number | null;
    decisionsUnmeasured: number;
    retries: number;
    restarts: number;
  };
}

/** The figures of one group of sessions (a configuration, or the sessions that took one fault). */
export interface GroupFigures {
  name: string;
  sessions: number;
  ended: number;
  /** Ended sessions whose change waited at an approval gate. */
  reachedReview: number;
  acceptanceRun: number;
  acceptancePassed: number;
  approved: number;
  rejected: number;
  /** approved / (approved + rejected), in %. */
  approvalRate: number | null;
  reviewMinutes: number;
  acceptedPerReviewMinute: number | null;
  acceptedUnmeasured: number;
  modelCostUsd: number;
  sandboxMinutes: number;
  costPerAcceptedUsd: number | null;
  medianSecondsToReview: number | null;
  retries: number;
  restarts: number;
  failures: Record<string, number>;
}

export interface PilotReport {
  pilot: string;
  sandboxMinutePrice: number;
  configurations: GroupFigures[];
  /** Per fault kind, the sessions that took it; "none": the others. */
  faults: GroupFigures[];
  sessions: PilotSessionRecord[];
}

export async function pilotSessions(pool: Pool, pilot: string): Promise<PilotSessionRecord[]> {
  const { rows } = await pool.query(
    `select p.session_id, p.task, p.configuration, p.attempt, p.faults, m.outcome, m.failure_cause,
            m.time_to_review_ms, m.acceptance_passed, m.approved, m.cost_usd::float8 as cost, m.sandbox_ms,
            m.review_active_ms, m.decisions_unmeasured, m.retries, m.restarts
       from pilot_sessions p left join session_metrics m on m.session_id = p.session_id
      where p.pilot = $1 order by p.task, p.configuration, p.attempt`,
    [pilot],
  );
  const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));
  return rows.map((r) => ({
    sessionId: r.session_id,
    task: r.task,
    configuration: r.configuration,
    attempt: r.attempt,
    faults: r.faults,
    ...(r.outcome
      ? {
          ended: {
            outcome: r.outcome,
            failureCause: r.failure_cause,
            timeToReviewMs: num(r.time_to_review_ms),
            acceptancePassed: r.acceptance_passed,
            approved: r.approved,
            costUsd: Number(r.cost),
            sandboxMs: Number(r.sandbox_ms ?? 0),
            reviewActiveMs: num(r.review_active_ms),
            decisionsUnmeasured: r.decisions_unmeasured,
            retries: r.retries,
            restarts: r.restarts,
          },
        }
      : {}),
  }));
}

function median(values: number[]): number | null {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

const round = (n: number | null, digits = 2) => (n === null ? null : Number(n.toFixed(digits)));
const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);

/** The figures of a group of sessions; pure, so the report's arithmetic is unit-tested. */
export function groupFigures(name: string, sessions: PilotSessionRecord[], sandboxMinutePrice: number): GroupFigures {
  const ended = sessions.flatMap((s) => (s.ended ? [s.ended] : []));
  const approved = ended.filter((e) => e.approved);
  const rejected = ended.filter((e) => e.outcome === 'rejected' && !e.approved);
  const measured = approved.filter((e) => e.reviewActiveMs !== null && e.decisionsUnmeasured === 0);
  const measuredMinutes = sum(measured.map((e) => e.reviewActiveMs! / 60_000));
  const modelCost = sum(ended.map((e) => e.costUsd));
  const sandboxMinutes = sum(ended.map((e) => e.sandboxMs / 60_000));
  const failures: Record<string, number> = {};
  for (const e of ended) {
    if (e.outcome === 'completed') continue;
    const cause = e.failureCause ?? e.outcome;
    failures[cause] = (failures[cause] ?? 0) + 1;
  }
  const reviewedCount = approved.length + rejected.length;
  return {
    name,
    sessions: sessions.length,
    ended: ended.length,
    reachedReview: ended.filter((e) => e.timeToReviewMs !== null).length,
    acceptanceRun: ended.filter((e) => e.acceptancePassed !== null).length,
    acceptancePassed: ended.filter((e) => e.acceptancePassed === true).length,
    approved: approved.length,
    rejected: rejected.length,
    approvalRate: reviewedCount ? round((100 * approved.length) / reviewedCount, 1) : null,
    reviewMinutes: round(sum(ended.map((e) => (e.reviewActiveMs ?? 0) / 60_000)))!,
    acceptedPerReviewMinute: measuredMinutes > 0 ? round(measured.length / measuredMinutes, 3) : null,
    acceptedUnmeasured: approved.length - measured.length,
    modelCostUsd: round(modelCost, 6)!,
    sandboxMinutes: round(sandboxMinutes)!,
    costPerAcceptedUsd: approved.length
      ? round((modelCost + sandboxMinutes * sandboxMinutePrice) / approved.length, 6)
      : null,
    medianSecondsToReview: round(
      median(ended.flatMap((e) => (e.timeToReviewMs === null ? [] : [e.timeToReviewMs / 1000]))),
    ),
    retries: sum(ended.map((e) => e.retries)),
    restarts: sum(ended.map((e) => e.restarts)),
    failures,
  };
}

export async function buildPilotReport(
  pool: Pool,
  opts: { pilot: string; sandboxMinutePrice: number },
): Promise<PilotReport> {
  const sessions = await pilotSessions(pool, opts.pilot);
  const price = opts.sandboxMinutePrice;
  const configurations = [...new Set(sessions.map((s) => s.configuration))].map((c) =>
    groupFigures(
      c,
      sessions.filter((s) => s.configuration === c),
      price,
    ),
  );
  const kinds = [...new Set(sessions.flatMap((s) => s.faults))].sort();
  const faults = kinds.map((k) =>
    groupFigures(
      k,
      sessions.filter((s) => s.faults.includes(k)),
      price,
    ),
  );
  if (kinds.length > 0)
    faults.push(
      groupFigures(
        'none',
        sessions.filter((s) => s.faults.length === 0),
        price,
      ),
    );
  return { pilot: opts.pilot, sandboxMinutePrice: price, configurations, faults, sessions };
}

/** The rows of the comparison, one per figure: its label and how to show it. */
const ROWS: [string, (g: GroupFigures) => unknown][] = [
  ['sessions (ended)', (g) => `${g.sessions} (${g.ended})`],
  ['reached review', (g) => g.reachedReview],
  ['acceptance command passed', (g) => `${g.acceptancePassed}/${g.acceptanceRun}`],
  ['approved / rejected', (g) => `${g.approved} / ${g.rejected}`],
  ['approval rate (%)', (g) => g.approvalRate],
  ['accepted changes per review minute', (g) => g.acceptedPerReviewMinute],
  ['review minutes (measured)', (g) => g.reviewMinutes],
  ['accepted, review unmeasured', (g) => g.acceptedUnmeasured],
  ['model cost (USD)', (g) => g.modelCostUsd],
  ['sandbox minutes', (g) => g.sandboxMinutes],
  ['cost per accepted change (USD)', (g) => g.costPerAcceptedUsd],
  ['median time to ready for review (s)', (g) => g.medianSecondsToReview],
  ['retries', (g) => g.retries],
  ['sandboxes replaced', (g) => g.restarts],
  [
    'failures by kind',
    (g) =>
      Object.entries(g.failures)
        .map(([k, n]) => `${k} ${n}`)
        .join(', ') || 'none',
  ],
];

const show = (v: unknown) => (v === null || v === undefined ? '-' : String(v));

/** A table of groups side by side: [label, value per group][]. */
export function comparisonRows(groups: GroupFigures[]): string[][] {
  return ROWS.map(([label, value]) => [label, ...groups.map((g) => show(value(g)))]);
}

export function quoteCsv(s: string): string {
  return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

function markdownTable(header: string[], rows: string[][]): string {
  const cell = (s: string) => s.replace(/\|/g, '\\|');
  return [
    `| ${header.map(cell).join(' | ')} |`,
    `|${header.map(() => ' --- ').join('|')}|`,
    ...rows.map((r) => `| ${r.map(cell).join(' | ')} |`),
  ].join('\n');
}

export function pilotReportMarkdown(report: PilotReport): string {
  const configs = report.configurations;
  const parts = [
    `# Pilot ${report.pilot}`,
    '',
    `${report.sessions.length} sessions; sandbox minutes priced at $${report.sandboxMinutePrice} each. Definitions: docs/pilot.md.`,
    '',
    '## Configurations',
    '',
    markdownTable(['', ...configs.map((c) => c.name)], comparisonRows(configs)),
  ];
  if (report.faults.length > 0) {
    parts.push(
      '',
      '## Faults on purpose',
      '',
      markdownTable(['', ...report.faults.map((f) => f.name)], comparisonRows(report.faults)),
    );
  }
  return parts.join('\n') + '\n';
}

/** One CSV row per group (configurations, then faults), one column per figure. */
export function pilotReportCsv(report: PilotReport): string {
  const groups = [
    ...report.configurations.map((g) => ['configuration', g] as const),
    ...report.faults.map((g) => ['fault', g] as const),
  ];
  const header = ['group', 'name', ...ROWS.map(([label]) => label)];
  const lines = groups.map(([group, g]) =>
    [group, g.name, ...ROWS.map(([, value]) => show(value(g)))].map(quoteCsv).join(','),
  );
  return [header.map(quoteCsv).join(','), ...lines].join('\n') + '\n';
}
