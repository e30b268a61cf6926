/**
 * The console's pilot pages: a pilot's configurations side by side with
 * charts (the figures of `drydock pilot report`), figures over time as
 * charts, and parallel attempts side by side with the pick. Charts are
 * server-rendered SVG (figures/charts.ts): no script, no CDN.
 */
import { barChart, lineChart } from '../../figures/charts';
import { comparisonRows, type GroupFigures, type PilotReport } from '../../figures/pilot-report';
import { FIGURES, seriesOf, type Figures } from '../../figures/trends';
import type { AttemptsStatus, PilotStatus } from '../../workflows/api';
import { esc, page } from './page';

function table(header: string[], rows: string[][], id: string): string {
  return `<div class="scroll" tabindex="0" role="region" aria-label="${esc(id)}"><table id="${esc(id)}"><tr>${header
    .map((h) => `<th scope="col">${esc(h)}</th>`)
    .join('')}</tr>
${rows
  .map(
    (r) =>
      `<tr><th scope="row">${esc(r[0])}</th>${r
        .slice(1)
        .map((c) => `<td>${esc(c)}</td>`)
        .join('')}</tr>`,
  )
  .join('\n')}</table></div>`;
}

const charts = (svgs: string[]) => `<div class="charts">${svgs.map((s) => `<figure>${s}</figure>`).join('')}</div>`;
const CHART_STYLE =
  '<style>.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:.6rem}.charts svg{max-width:100%;height:auto}figure{margin:0}</style>';

/** The bar charts that compare a pilot's configurations. */
function comparisonCharts(groups: GroupFigures[]): string {
  const bars = (title: string, value: (g: GroupFigures) => number | null, unit?: string) =>
    barChart({ title, unit, bars: groups.map((g) => ({ label: g.name, value: value(g) })) });
  return charts([
    bars(
      'Acceptance command passed',
      (g) => (g.acceptanceRun ? Math.round((100 * g.acceptancePassed) / g.acceptanceRun) : null),
      '%',
    ),
    bars('Approved by a reviewer', (g) => g.approvalRate, '%'),
    bars('Accepted changes per review minute', (g) => g.acceptedPerReviewMinute),
    bars('Cost per accepted change', (g) => g.costPerAcceptedUsd, '$'),
    bars('Median time to ready for review', (g) => g.medianSecondsToReview, 's'),
    bars('Retries', (g) => g.retries),
  ]);
}

export function pilotPage(report: PilotReport, live: PilotStatus | undefined, who: string): string {
  const name = encodeURIComponent(report.pilot);
  const state = live
    ? `<p id="pilot-state">${esc(live.phase)}: ${live.counts.ended} ended, ${live.counts.at_gate} waiting for review, ${live.counts.working} working, ${live.counts.planned} not started${live.stoppedBy ? ` (stopped by ${esc(live.stoppedBy)})` : ''}.</p>`
    : '';
  const configs = report.configurations;
  const sessions = report.sessions.map((s) => {
    const e = s.ended;
    return `<tr><td><a href="/sessions/${encodeURIComponent(s.sessionId)}">${esc(s.sessionId)}</a></td><td>${esc(s.task)}</td><td>${esc(s.configuration)}</td><td>${s.attempt}</td><td>${esc(e?.outcome ?? 'under way')}</td><td>${esc(e?.acceptancePassed ?? '-')}</td><td>${esc(e ? (e.approved ? 'approved' : e.outcome === 'rejected' ? 'rejected' : '-') : '-')}</td><td>${esc(s.faults.join(', '))}</td></tr>`;
  });
  const faults = report.faults.length
    ? `<h2>Faults on purpose</h2>${table(['', ...report.faults.map((f) => f.name)], comparisonRows(report.faults), 'faults')}`
    : '';
  return page(
    `pilot ${report.pilot}`,
    `${CHART_STYLE}<h1>Pilot ${esc(report.pilot)}</h1>${state}
<p>Download: <a href="/pilots/${name}/report.md">Markdown</a> · <a href="/pilots/${name}/report.csv">CSV</a> · <a href="/pilots/${name}/report.json">JSON</a>.
Sandbox minutes at $${esc(report.sandboxMinutePrice)} each; review minutes are measured (docs/pilot.md).</p>
<h2>Configurations</h2>${comparisonCharts(configs)}
${table(['', ...configs.map((c) => c.name)], comparisonRows(configs), 'configurations')}${faults}
<h2>Sessions</h2><div class="scroll" tabindex="0" role="region" aria-label="sessions"><table id="sessions"><tr><th>session</th><th>task</th><th>configuration</th><th>attempt</th><th>outcome</th><th>acceptance</th><th>decision</th><th>faults</th></tr>
${sessions.join('\n')}</table></div>`,
    { who },
  );
}

export function pilotListPage(pilots: { name: string; status: string; started: string }[], who: string): string {
  const rows = pilots.map(
    (p) =>
      `<tr><td><a href="/pilots/${encodeURIComponent(p.name)}">${esc(p.name)}</a></td><td>${esc(p.status)}</td><td>${esc(p.started)}</td></tr>`,
  );
  return page(
    'pilots',
    `<h1>Pilots</h1>${rows.length ? `<table><tr><th>pilot</th><th>run</th><th>started</th></tr>${rows.join('')}</table>` : '<p>No pilot yet: <code>bin/drydock pilot start &lt;file&gt;</code>.</p>'}`,
    { who },
  );
}

export function trendsPage(figures: Figures, query: URLSearchParams, who: string): string {
  const option = (name: string, values: string[], current: string) =>
    `<label>${name} <select name="${name}">${values.map((v) => `<option${v === current ? ' selected' : ''}>${v}</option>`).join('')}</select></label>`;
  const since = query.get('since') ?? '30d';
  const svgs = FIGURES.map((f) =>
    lineChart({
      title: `${f.title} by ${figures.by}`,
      unit: f.unit,
      labels: figures.periods,
      series: seriesOf(figures, f.key),
    }),
  );
  const csv = `/trends.csv?${new URLSearchParams({ since, by: figures.by, period: figures.period })}`;
  return page(
    'trends',
    `${CHART_STYLE}<h1>Figures over time</h1>
<form method="get" action="/trends">${option('by', ['repo', 'agent', 'requester'], figures.by)} ${option('period', ['day', 'week'], figures.period)}
<label>since <input name="since" value="${esc(since)}" size="5"></label> <button type="submit">show</button></form>
<p>Sessions started since ${esc(figures.since)}; cost is model cost plus sandbox minutes at $${esc(figures.sandboxMinutePrice)}.
Escaped defects: merged changes reverted, or whose lines a fix changed, within the window. <a href="${esc(csv)}">CSV</a> · Prometheus: <code>drydock_*_total</code>.</p>
${charts(svgs)}`,
    { who },
  );
}

/** The attempts side by side; `nonce` allows attempts.js, whose Pick sends JSON to the API. */
export function attemptsPage(s: AttemptsStatus, who: string, nonce: string): string {
  const cards = s.attempts.map((a) => {
    const p = a.progress;
    const seconds = p ? Math.round((Date.parse(p.at) - Date.parse(p.startedAt)) / 1000) : 0;
    const pickable = !s.picked && p?.phase === 'awaiting_approval' && p.pending;
    const form = pickable
      ? `<p><button type="button" data-pick="${a.index}" data-change="${esc(p.pending!.change)}">Pick attempt ${a.index}</button></p>`
      : '';
    const picked = s.picked?.attempt === a.index ? `<p class="ok">picked by ${esc(s.picked.by)}</p>` : '';
    return `<section class="attempt" aria-label="attempt ${a.index}"><h2>${a.index}. ${esc(a.agent)}</h2>${picked}
<p><a href="/sessions/${encodeURIComponent(a.sessionId)}">${esc(a.sessionId)}</a>: <span class="phase">${esc(p?.phase ?? 'starting')}</span></p>
<p>verification: ${p?.verification ? (p.verification.passed ? '<span class="ok">passed</span>' : '<span class="bad">failed</span>') : '-'}${p?.acceptance ? ` · acceptance ${p.acceptance.passed ? 'passed' : 'failed'}` : ''}</p>
<p>cost $${(p?.agent?.costUsd ?? 0).toFixed(4)} · ${p?.agent?.turns ?? 0} model calls · ${seconds}s</p>
${p?.change ? `<pre>${esc(p.change.diffstat)}</pre>` : ''}${p?.pending ? `<p>change <code>${esc(p.pending.change.slice(0, 12))}</code></p>` : ''}${form}</section>`;
  });
  return page(
    `attempts ${s.sessionId}`,
    `<style>.attempts{display:grid;grid-template-columns:repeat(auto-fit,minmax(260px,1fr));gap:.8rem}.attempt{border:1px solid #ddd;padding:.5rem .8rem}</style>
<h1>${esc(s.task.split('\n')[0])}</h1><p>${esc(s.sessionId)} · ${esc(s.repo)} · <span class="phase" id="phase">${esc(s.phase)}</span></p>
<p id="answer" role="status"></p>
<p>Each attempt's diff and evidence is on its own page. Picking one approves its change (one approval, bound to its hash); the others end without a push.</p>
<div class="attempts">${cards.join('\n')}</div>`,
    { who, nonce, scripts: ['attempts.js'] },
  );
}
