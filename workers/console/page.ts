/**
 * The review console's page chrome and its small pages: sign-in, the session
 * list, the report. Server-rendered HTML, no bundle, no CDN; scripts are the
 * project's own files under ./assets, allowed by a per-response nonce.
 */
import { reportRows, type Report } from '../../store/pilot-report';
import type { SessionRow } from '../../platform/sessions';
import { OUTCOMES, RUNNING_PHASES } from '../../workflows/api';

export function esc(value: unknown): string {
  return String(value ?? '').replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  );
}

const STYLE = `
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:1rem 1.5rem;color:#222}
h1{font-size:1.3rem;overflow-wrap:anywhere}h2{font-size:1.05rem;margin-top:1.6rem;border-bottom:1px solid #ddd}h3{font-size:.95rem;margin:.8rem 0 .3rem}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:.25rem .5rem;border-bottom:1px solid #eee;vertical-align:top}
pre{background:#f6f8fa;padding:.6rem;overflow:auto;max-height:32rem;white-space:pre-wrap;overflow-wrap:anywhere}.add{color:#116329}.del{color:#a40e26}
.phase{font-weight:600}.ok{color:#116329}.bad{color:#a40e26}.pending{background:#fff8c5;padding:.6rem 1rem;border:1px solid #d4a72c}
img.shot,video.shot{max-width:100%;border:1px solid #ccc;margin:.3rem 0}button{font-size:1rem;margin:.15rem .5rem .15rem 0;padding:.3rem .9rem}
header{display:flex;flex-wrap:wrap;gap:.5rem;justify-content:space-between;align-items:baseline}
details.file{margin:.4rem 0}details.file>summary{cursor:pointer;padding:.2rem 0;overflow-wrap:anywhere}details.file.viewed>summary{opacity:.6}
.scroll{overflow-x:auto}.viewed-box{float:right;font-size:.85rem}
:root{--d2h-dim-color:#595959;--d2h-ins-label-color:#0f5323;--d2h-del-label-color:#8a0c21;--d2h-change-label-color:#6a4a00;--d2h-moved-label-color:#2c5d91}.d2h-file-wrapper{overflow-x:auto}.d2h-code-linenumber{cursor:pointer}
.attention .high{color:#a40e26;font-weight:600}.attention .medium{color:#7a4d00}.pair{display:grid;grid-template-columns:1fr 1fr;gap:.6rem}
textarea,input[type=text]{max-width:100%;box-sizing:border-box}:focus-visible{outline:3px solid #0969da;outline-offset:2px}
.keys{font-size:.85rem;color:#555}kbd{border:1px solid #bbb;border-radius:3px;padding:0 .25rem;font-size:.85rem}
@media (max-width:640px){body{padding:.5rem .6rem}.pair{grid-template-columns:1fr}button{width:100%}textarea{width:100%}
td,th{padding:.2rem .3rem}.d2h-code-line{width:auto}}`;

/** A whole page; `nonce` allows its scripts (`scripts`: files under /assets/console/). */
export function page(
  title: string,
  body: string,
  opts: { nonce?: string; scripts?: string[]; who?: string; head?: string } = {},
) {
  const scripts =
    opts.nonce && opts.scripts
      ? opts.scripts.map((s) => `<script nonce="${opts.nonce}" src="/assets/console/${esc(s)}"></script>`).join('')
      : '';
  const who = opts.who
    ? `<form method="post" action="/logout">${esc(opts.who)} <button type="submit">sign out</button></form>`
    : '';
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${esc(title)} · drydock</title>
<meta name="viewport" content="width=device-width,initial-scale=1">${opts.head ?? ''}<style>${STYLE}</style></head>
<body><header><nav aria-label="drydock"><a href="/">drydock review console</a> · <a href="/report">report</a> · <a href="/trends">trends</a> · <a href="/pilots">pilots</a> · <a href="/notes">notes</a> · <a href="/tokens">CLI token</a></nav>${who}</header>
<main>${body}</main>${scripts}</body></html>`;
}

export function loginPage(sso: boolean, message?: string): string {
  const single = sso
    ? '<p><a class="button" id="sso" href="/auth/login">Sign in with single sign-on</a></p><p>or with a token:</p>'
    : '';
  return page(
    'sign in',
    `<h1>Sign in</h1>${message ? `<p class="bad" id="message">${esc(message)}</p>` : ''}${single}
<form method="post" action="/login"><label>Token <input type="password" name="token" autocomplete="current-password" required></label>
<button type="submit">Sign in</button></form>
<p>A personal token (<code>drydock token issue</code>, or the console's <em>CLI token</em> page) names you; a machine's API token (<code>DRYDOCK_API_TOKENS</code>) names <code>machine:&lt;name&gt;</code>.</p>`,
  );
}

/** After a single sign-on: a same-site step to the console, so the Strict cookie goes with it. */
export function signedInPage(person: string): string {
  return page(
    'signed in',
    `<h1>Signed in as ${esc(person)}</h1><p><a href="/" id="continue">Continue to the console</a></p>`,
    { head: '<meta http-equiv="refresh" content="0;url=/">' },
  );
}

/** GET /tokens: issue a CLI token for the signed-in person (shown once), with how to use it. */
export function tokensPage(who: string, server: string, nonce: string): string {
  return page(
    'CLI token',
    `<h1>A CLI token for ${esc(who)}</h1>
<p>It acts as you for 30 days. It is shown once: paste it into <code>drydock login --server ${esc(server)}</code>.</p>
<p><button type="button" id="issue">Issue a CLI token</button></p><pre id="token" aria-live="polite"></pre>`,
    { who, nonce, scripts: ['tokens.js'] },
  );
}

const PHASE_ORDER = ['awaiting_approval', ...RUNNING_PHASES.filter((p) => p !== 'awaiting_approval'), ...OUTCOMES];

/** Sessions grouped by phase, the ones waiting for a person first. */
export function listPage(rows: SessionRow[], who: string): string {
  const groups = PHASE_ORDER.map((phase) => [phase, rows.filter((r) => r.phase === phase)] as const).filter(
    ([, list]) => list.length > 0,
  );
  const other = rows.filter((r) => !PHASE_ORDER.includes(r.phase as never));
  if (other.length) groups.push(['other', other]);
  const body = groups
    .map(
      ([phase, list]) => `<section data-phase="${esc(phase)}"><h2>${esc(phase.replace('_', ' '))} (${list.length})</h2>
<div class="scroll" tabindex="0" role="region" aria-label="${esc(phase.replace('_', ' '))} sessions"><table><tr><th>session</th><th>repo</th><th>task</th><th>started</th></tr>
${list
  .map((r) => {
    const task = r.task.split('\n')[0].slice(0, 100);
    const pending = r.pending ? ` <em>(${esc(r.pending)} waits)</em>` : '';
    return `<tr><td><a href="/sessions/${encodeURIComponent(r.sessionId)}">${esc(r.sessionId)}</a>${pending}</td><td>${esc(r.repo)}</td><td>${esc(task)}</td><td>${esc(r.started)}</td></tr>`;
  })
  .join('\n')}</table></div></section>`,
    )
    .join('\n');
  return page('sessions', `<h1>Sessions</h1>${body || '<p>No sessions yet. Try <code>bin/drydock demo</code>.</p>'}`, {
    who,
  });
}

/** The pilot metrics of `drydock report`, for the window asked for (?since=7d&repo=...). */
export function reportPage(report: Report, who: string): string {
  const rows = reportRows(report)
    .map(([label, value]) => `<tr><th scope="row">${esc(label)}</th><td>${esc(value)}</td></tr>`)
    .join('\n');
  return page(
    'report',
    `<h1>Report</h1><p>Sessions started since ${esc(report.since)}${report.repo ? ` on ${esc(report.repo)}` : ''}.</p>
<form method="get" action="/report"><label>since <input name="since" value="7d" size="5"></label>
<label>repo <input name="repo" value="${esc(report.repo ?? '')}"></label> <button type="submit">show</button></form>
<table id="metrics">${rows}</table>
<p>Review minutes are measured: the console counts the time its page is visible and in use, the CLI from its
<code>status</code> or <code>diff</code> view to the decision; a decision made elsewhere is counted as unmeasured.
Waiting for review is its own figure. Definitions: <code>docs/audit.md</code>. The same figures: <code>bin/drydock report</code>.</p>`,
    { who },
  );
}
