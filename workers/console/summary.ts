/**
 * The summary a reviewer reads first: what the change touches, what ran for
 * it, how each test did (failures first), the agent's own account, and the
 * parts that need the most attention (the rules in review/change-kinds.ts).
 */
import { attentionOf, changeKinds, type ChangedFile, type FileKind, type WhatRan } from '../../review/change-kinds';
import type { TestCase } from '../../review/test-cases';
import type { SessionStatus } from '../../workflows/api';
import { esc } from './page';

/** What the summary is made of, gathered by the route (workers/routes/console.ts). */
export interface ReviewFacts {
  files: ChangedFile[];
  ran: WhatRan;
  cases: TestCase[];
}

const KIND_LABELS: [FileKind, string][] = [
  ['test', 'tests added or changed'],
  ['lockfile', 'lockfiles'],
  ['manifest', 'dependency manifests'],
  ['ci', 'CI and workflow files'],
  ['migration', 'migrations'],
  ['environment', 'build environment'],
  ['generated', 'generated files'],
];

const codes = (paths: string[]) => paths.map((p) => `<code>${esc(p)}</code>`).join(', ');

function touches(files: ChangedFile[]): string {
  const kinds = changeKinds(files);
  const rows = KIND_LABELS.map(
    ([kind, label]) =>
      `<tr data-kind="${kind}"><th scope="row">${label}</th><td>${kinds.byKind[kind].length ? codes(kinds.byKind[kind]) : 'none'}</td></tr>`,
  ).join('');
  return `<p id="size">${kinds.files} file(s), <span class="add">+${kinds.added}</span> <span class="del">−${kinds.deleted}</span></p>
<div class="scroll" tabindex="0" role="region" aria-label="files by kind"><table id="touches">${rows}</table></div>`;
}

function ranList(ran: WhatRan): string {
  const commands = ran.commands
    .slice(0, 30)
    .map(
      (c) =>
        `<li><code>${esc(c.command || c.step)}</code>${c.exitCode ? ` <span class="bad">exit ${c.exitCode}</span>` : ''}</li>`,
    )
    .join('');
  const more =
    ran.commands.length > 30 ? `<li>… and ${ran.commands.length - 30} more (the audit trail has all)</li>` : '';
  const { egress } = ran;
  return `<ul id="ran">${commands}${more}
<li id="egress">egress: ${egress.hosts.length ? `allowed to ${codes(egress.hosts)}; ` : 'none allowed; '}${egress.allowed} request(s) made, ${egress.refused} blocked</li>
<li id="secrets">secrets granted: ${ran.secrets.length ? codes(ran.secrets) : 'none'}</li>
<li id="redactions">redacted: ${ran.redactions.length ? ran.redactions.map((r) => `${esc(r.where)} (${r.count}×)`).join('; ') : 'nothing'}</li></ul>`;
}

function casesList(s: SessionStatus, cases: TestCase[]): string {
  const checks = (s.verification?.browser?.checks ?? []).map((c) => ({
    name: `browser: ${c.path}`,
    outcome: c.ok ? 'passed' : 'failed',
    message: c.message,
  }));
  const all = [...cases, ...checks].sort((a, b) => Number(a.outcome === 'passed') - Number(b.outcome === 'passed'));
  if (!all.length)
    return `<p>${s.verification ? esc(s.verification.summary || 'no per-test report') : 'not verified'}</p>`;
  const items = all
    .map(
      (c) =>
        `<li class="${c.outcome === 'failed' ? 'bad' : c.outcome === 'passed' ? 'ok' : ''}">${esc(c.outcome)}: ${esc(c.name)}${c.message ? ` — ${esc(c.message)}` : ''}</li>`,
    )
    .join('');
  return `<ul id="test-cases">${items}</ul>`;
}

function account(s: SessionStatus): string {
  const a = s.agent;
  if (a?.summary) return `<pre id="account">${esc(a.summary)}</pre>`;
  if (!a?.kind || a.kind === 'script')
    return '<p id="account">A scripted agent gives no account of its own: its steps are under “what ran”.</p>';
  return '<p id="account">The agent gave no account.</p>';
}

export function summarySection(s: SessionStatus, facts: ReviewFacts): string {
  const kinds = changeKinds(facts.files);
  const failedChecks = (s.verification?.browser?.checks ?? []).filter((c) => !c.ok).length;
  const failedTests = s.verification?.report?.failed ?? 0;
  const attention = attentionOf(kinds, facts.ran, { passed: s.verification?.passed, failedTests, failedChecks });
  const items = attention
    .map((a) => `<li class="${a.level}"><strong>${esc(a.what)}</strong>: ${esc(a.why)}</li>`)
    .join('');
  return `<section id="summary-first" aria-labelledby="summary-title"><h2 id="summary-title">Summary</h2>
<h3>Needs attention first</h3><ol id="attention" class="attention">${items || '<li>Nothing stands out: read the diff.</li>'}</ol>
<div class="pair"><div><h3>What the change touches</h3>${touches(facts.files)}</div>
<div><h3>What ran</h3>${ranList(facts.ran)}</div></div>
<div class="pair"><div><h3>Verification, per test</h3>${casesList(s, facts.cases)}</div>
<div><h3>The agent's account</h3>${account(s)}</div></div></section>`;
}
