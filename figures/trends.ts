/**
 * Figures over time (docs/pilot.md): per day or week and per repo, agent
 * configuration or requester, from session_metrics and escaped_defects:
 * merge rate, time to merge, escaped defects, cost per merged change,
 * sandbox minutes, retries and refusals. The console draws them
 * (workers/console/trends.ts); `drydock trends` prints them as CSV.
 */
import type { Pool } from 'pg';
import { quoteCsv } from './pilot-report';

export const DIMENSIONS = { repo: 'repo', agent: 'agent', requester: 'requested_by' } as const;
export type Dimension = keyof typeof DIMENSIONS;
export type Period = 'day' | 'week';

export interface FigureRow {
  /** The period's first day (UTC), YYYY-MM-DD. */
  period: string;
  /** The repo, agent configuration or requester ("(none)" when unknown). */
  key: string;
  sessions: number;
  /** Sessions that opened a pull request, and those merged. */
  pullRequests: number;
  merged: number;
  /** merged / pullRequests, in %; null without a pull request. */
  mergeRate: number | null;
  /** Median hours from the session's start to its merge. */
  medianHoursToMerge: number | null;
  /** Merged changes of the period later reverted, or whose lines a fix changed. */
  escapedDefects: number;
  /** (model cost + sandbox minutes × price) / merged; null when none merged. */
  costPerMergedUsd: number | null;
  sandboxMinutes: number;
  retries: number;
  refusals: number;
}

export interface Figures {
  since: string;
  by: Dimension;
  period: Period;
  /** USD per sandbox minute in the cost. */
  sandboxMinutePrice: number;
  periods: string[];
  rows: FigureRow[];
}

const round = (n: number, digits = 2) => Number(n.toFixed(digits));

export async function buildFigures(
  pool: Pool,
  opts: { since: Date; by: Dimension; period: Period; sandboxMinutePrice: number },
): Promise<Figures> {
  const column = DIMENSIONS[opts.by];
  const { rows } = await pool.query(
    `select to_char(date_trunc($2, m.started_at at time zone 'UTC'), 'YYYY-MM-DD') as period,
            coalesce(m.${column}, '(none)') as key,
            count(*)::int as sessions,
            count(m.pr_url)::int as pull_requests,
            count(*) filter (where m.merged)::int as merged,
            percentile_cont(0.5) within group (order by extract(epoch from m.merged_at - m.started_at))
              filter (where m.merged) as merge_seconds,
            count(*) filter (where m.merged and exists
              (select 1 from escaped_defects d where d.session_id = m.session_id))::int as defects,
            coalesce(sum(m.cost_usd), 0)::float8 as cost,
            coalesce(sum(m.sandbox_ms), 0)::float8 / 60000 as sandbox_minutes,
            coalesce(sum(m.retries), 0)::int as retries,
            coalesce(sum(m.refusals_egress + m.refusals_decisions + m.refusals_budget), 0)::int as refusals
       from session_metrics m where m.started_at >= $1
      group by 1, 2 order by 1, 2`,
    [opts.since.toISOString(), opts.period],
  );
  const figureRows: FigureRow[] = rows.map((r) => {
    const cost = r.cost + r.sandbox_minutes * opts.sandboxMinutePrice;
    return {
      period: r.period,
      key: r.key,
      sessions: r.sessions,
      pullRequests: r.pull_requests,
      merged: r.merged,
      mergeRate: r.pull_requests ? round((100 * r.merged) / r.pull_requests, 1) : null,
      medianHoursToMerge: r.merge_seconds === null ? null : round(Number(r.merge_seconds) / 3600),
      escapedDefects: r.defects,
      costPerMergedUsd: r.merged ? round(cost / r.merged, 4) : null,
      sandboxMinutes: round(r.sandbox_minutes),
      retries: r.retries,
      refusals: r.refusals,
    };
  });
  return {
    since: opts.since.toISOString(),
    by: opts.by,
    period: opts.period,
    sandboxMinutePrice: opts.sandboxMinutePrice,
    periods: periodsOf(opts.since, new Date(), opts.period),
    rows: figureRows,
  };
}

/** Every period from `since` to `until`, so a chart shows the empty ones too (at most 120). */
export function periodsOf(since: Date, until: Date, period: Period): string[] {
  const start = new Date(Date.UTC(since.getUTCFullYear(), since.getUTCMonth(), since.getUTCDate()));
  // date_trunc('week') starts on Monday.
  if (period === 'week') start.setUTCDate(start.getUTCDate() - ((start.getUTCDay() + 6) % 7));
  const step = period === 'week' ? 7 : 1;
  const out: string[] = [];
  for (const d = start; d <= until && out.length < 120; d.setUTCDate(d.getUTCDate() + step)) {
    out.push(d.toISOString().slice(0, 10));
  }
  return out;
}

/** The figures a chart can show, with their unit. */
export const FIGURES: { key: keyof FigureRow; title: string; unit?: string }[] = [
  { key: 'mergeRate', title: 'Merge rate', unit: '%' },
  { key: 'medianHoursToMerge', title: 'Median time to merge', unit: 'h' },
  { key: 'escapedDefects', title: 'Escaped defects' },
  { key: 'costPerMergedUsd', title: 'Cost per merged change', unit: '$' },
  { key: 'sandboxMinutes', title: 'Sandbox minutes' },
  { key: 'retries', title: 'Retries' },
  { key: 'refusals', title: 'Refusals' },
];

/** One figure as series: one per key (the busiest first, at most `max`), a value per period. */
export function seriesOf(
  figures: Figures,
  figure: keyof FigureRow,
  max = 6,
): { name: string; values: (number | null)[] }[] {
  const totals = new Map<string, number>();
  for (const r of figures.rows) totals.set(r.key, (totals.get(r.key) ?? 0) + r.sessions);
  const keys = [...totals.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([k]) => k)
    .slice(0, max);
  return keys.map((key) => ({
    name: key,
    values: figures.periods.map((p) => {
      const row = figures.rows.find((r) => r.key === key && r.period === p);
      return row ? (row[figure] as number | null) : null;
    }),
  }));
}

const COLUMNS: (keyof FigureRow)[] = [
  'period',
  'key',
  'sessions',
  'pullRequests',
  'merged',
  'mergeRate',
  'medianHoursToMerge',
  'escapedDefects',
  'costPerMergedUsd',
  'sandboxMinutes',
  'retries',
  'refusals',
];

export function figuresCsv(figures: Figures): string {
  const header = COLUMNS.map((c) => (c === 'key' ? figures.by : c)).join(',');
  const lines = figures.rows.map((r) => COLUMNS.map((c) => quoteCsv(r[c] === null ? '' : String(r[c]))).join(','));
  return [header, ...lines].join('\n') + '\n';
}
