/**
 * The review console: server-rendered HTML, no bundle, no CDN. The only
 * script is the Approve / Reject handler (inline, allowed by a per-response
 * nonce in the Content-Security-Policy); everything else works without it.
 */
import { html as diffToHtml, parse as parseDiff } from 'diff2html';
import { reportRows, type Report } from '../store/pilot-report';
import type { SessionRow } from '../platform/sessions';
import { OUTCOMES, RUNNING_PHASES, type SessionStatus, type StepRecord, type Unanswered } from '../workflows/api';
import { describeVerification, screenshotsOf } from '../workflows/rules/verification';

export function esc(value: unknown): string {
  return String(value ?? '').replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  );
}

const STYLE = `
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:1rem 1.5rem;color:#222}
h1{font-size:1.3rem}h2{font-size:1.05rem;margin-top:1.6rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:.25rem .5rem;border-bottom:1px solid #eee;vertical-align:top}
pre{background:#f6f8fa;padding:.6rem;overflow:auto;max-height:32rem}.add{color:#116329}.del{color:#a40e26}
.phase{font-weight:600}.ok{color:#116329}.bad{color:#a40e26}.pending{background:#fff8c5;padding:.6rem 1rem;border:1px solid #d4a72c}
img.shot{max-width:100%;border:1px solid #ccc;margin:.3rem 0}button{font-size:1rem;margin-right:.5rem;padding:.3rem .9rem}
header{display:flex;justify-content:space-between;align-items:baseline}details.file{margin:.4rem 0}details.file>summary{cursor:pointer;padding:.2rem 0}`;

/** A whole page; `nonce` allows its one inline script. */
export function page(
  title: string,
  body: string,
  opts: { nonce?: string; script?: string; who?: string; head?: string } = {},
) {
  const script = opts.script && opts.nonce ? `<script nonce="${opts.nonce}">${opts.script}</script>` : '';
  const who = opts.who
    ? `<form method="post" action="/logout">${esc(opts.who)} <button type="submit">sign out</button></form>`
    : '';
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${esc(title)} · drydock</title>
<meta name="viewport" content="width=device-width,initial-scale=1">${opts.head ?? ''}<style>${STYLE}</style></head>
<body><header><span><a href="/">drydock review console</a> · <a href="/report">report</a> · <a href="/tokens">CLI token</a></span>${who}</header>${body}${script}</body></html>`;
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
  const script = `document.getElementById('issue').addEventListener('click', async () => {
  const out = document.getElementById('token');
  const res = await fetch('/api/tokens', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  const body = await res.json();
  out.textContent = res.ok ? body.token : body.error;
});`;
  return page(
    'CLI token',
    `<h1>A CLI token for ${esc(who)}</h1>
<p>It acts as you for 30 days. It is shown once: paste it into <code>drydock login --server ${esc(server)}</code>.</p>
<p><button type="button" id="issue">Issue a CLI token</button></p><pre id="token"></pre>`,
    { who, nonce, script },
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
<table><tr><th>session</th><th>repo</th><th>task</th><th>started</th></tr>
${list
  .map((r) => {
    const task = r.task.split('\n')[0].slice(0, 100);
    const pending = r.pending ? ` <em>(${esc(r.pending)} waits)</em>` : '';
    return `<tr><td><a href="/sessions/${encodeURIComponent(r.sessionId)}">${esc(r.sessionId)}</a>${pending}</td><td>${esc(r.repo)}</td><td>${esc(task)}</td><td>${esc(r.started)}</td></tr>`;
  })
  .join('\n')}</table></section>`,
    )
    .join('\n');
  return page('sessions', `<h1>Sessions</h1>${body || '<p>No sessions yet. Try <code>bin/drydock demo</code>.</p>'}`, {
    who,
  });
}

function seconds(ms?: number): string {
  return ms === undefined ? 'running' : `${(ms / 1000).toFixed(1)} s`;
}

function timelineRow(step: StepRecord): string {
  const mark = step.ok === undefined ? '…' : step.ok ? '<span class="ok">ok</span>' : '<span class="bad">failed</span>';
  const exit = step.exitCode !== undefined && step.exitCode !== 0 ? `exit ${step.exitCode}` : '';
  return `<tr><td>${esc(step.name)}</td><td>${esc(step.phase)}</td><td>${mark}</td><td>${seconds(step.durationMs)}</td><td>${esc(step.detail ?? exit)}</td></tr>`;
}

/**
 * The change, one collapsible section per file with line numbers, rendered
 * here by diff2html (its stylesheet is served from the project, /assets).
 */
export function diffHtml(diff: string): string {
  const files = parseDiff(diff);
  if (files.length === 0) return `<pre>${esc(diff)}</pre>`;
  return files
    .map((file) => {
      const name =
        file.oldName !== file.newName && file.oldName !== '/dev/null' && file.newName !== '/dev/null'
          ? `${file.oldName} → ${file.newName}`
          : file.newName === '/dev/null'
            ? file.oldName
            : file.newName;
      const body = diffToHtml([file], { drawFileList: false, outputFormat: 'line-by-line', matching: 'none' });
      return `<details open class="file"><summary><code>${esc(name)}</code> <span class="add">+${file.addedLines}</span> <span class="del">−${file.deletedLines}</span></summary>${body}</details>`;
    })
    .join('\n');
}

/** A status without a worker: the last known state, said plainly. */
function unansweredBanner(u: Unanswered): string {
  const since = u.since ? `; a worker last polled at ${esc(u.since)}` : '';
  const pending = u.pendingActivities
    .map(
      (a) =>
        `<li>${esc(a.activity)} (${esc(a.state)}, attempt ${a.attempt})${a.lastFailure ? `: ${esc(a.lastFailure)}` : ''}</li>`,
    )
    .join('');
  return `<section class="pending" id="unanswered"><p>Last known state: ${esc(u.message)}${since}.</p>${pending ? `<ul>${pending}</ul>` : ''}</section>`;
}

/** What a session page shows besides the status: the whole diff, and the running step's output so far. */
export interface LiveExtras {
  diff?: string;
  /** The tail of the running step's streamed output. */
  running?: string;
  /** This server's address, for `drydock attach --server`. */
  server?: string;
}

/** One session for a reviewer: what was asked, what changed, how it was checked, and the decision. */
export function sessionPage(
  s: SessionStatus,
  extra: LiveExtras & { who: string; nonce: string; temporalLink: string },
): string {
  const body = `<h1>${esc(s.sessionId)}: <span class="phase" id="phase">${esc(s.phase)}</span></h1>
<p>${esc(s.repo)} · requested by ${esc(s.requestedBy ?? 'unknown')} · started ${esc(s.startedAt)} · <a href="${esc(extra.temporalLink)}">in the Temporal UI</a>
· <span id="live-state">${OUTCOMES.includes(s.phase as never) ? 'ended' : 'live'}</span></p>
<pre id="task">${esc(s.task)}</pre>
<div id="live">${sessionLive(s, extra, extra.who)}</div>`;
  return page(s.sessionId, body, {
    nonce: extra.nonce,
    script: SAY_SCRIPT + DECIDE_SCRIPT + FOLLOWUP_SCRIPT + LIVE_SCRIPT,
    who: extra.who,
    head: '<link rel="stylesheet" href="/assets/diff2html.css">',
  });
}

/** The part of a session page that changes while it runs; the events stream sends it again on each change. */
export function sessionLive(s: SessionStatus, extra: LiveExtras, who: string): string {
  const running = extra.running ? `<h2>Running now</h2><pre id="running">${esc(extra.running)}</pre>` : '';
  return `${s.unanswered ? unansweredBanner(s.unanswered) : ''}
${s.error ? `<p class="bad" id="error">${esc(s.error)}</p>` : ''}
${approvalSection(s, who)}
${followupBox(s, who)}
${attachSection(s, extra.server)}
<h2>Agent</h2><div id="agent">${agentPanel(s)}</div>
${running}
<h2>Diff</h2>${
    extra.diff !== undefined
      ? `<div id="diff">${diffHtml(extra.diff)}</div>`
      : s.agent?.diffstat
        ? `<pre id="diff">${esc(s.agent.diffstat)}</pre>`
        : '<p id="diff">No change.</p>'
  }
<h2>Tests</h2><div id="tests">${testsSection(s)}</div>
<h2>Screenshots</h2><div id="screenshots">${screenshotsSection(s)}</div>
<h2>Timeline</h2><table id="timeline"><tr><th>step</th><th>phase</th><th></th><th>duration</th><th>detail</th></tr>${s.timeline.map(timelineRow).join('')}</table>
<h2>Decisions</h2><ul id="decisions">${decisionsList(s)}</ul>
${roundsList(s)}
${s.pushed ? `<p>Pushed <code>${esc(s.branch)}</code> at <code>${esc(s.pushed.commit.slice(0, 12))}</code>.</p>` : ''}
${s.pullRequest ? `<p>Pull request: <a href="${esc(s.pullRequest.url)}">${esc(s.pullRequest.url)}</a></p>` : ''}`;
}

function approvalSection(s: SessionStatus, who: string): string {
  const p = s.pendingApproval;
  if (!p) return '';
  return `<section class="pending" id="approval"><h2>Waiting for approval: ${esc([p.action, ...(p.covers ?? [])].join(' and '))}</h2>
<p>${esc(p.action)} of <code>${esc(p.evidence.branch)}</code> at <code>${esc(p.evidence.commit.slice(0, 12))}</code>,
change <code id="change">${esc(p.change.slice(0, 12))}</code>; deadline ${esc(p.deadline)};
may approve: ${esc(p.approvers.length ? p.approvers.join(', ') : 'anyone')}. You decide as <strong>${esc(who)}</strong>.</p>
<p><label>Comment <input id="comment" size="60"></label></p>
<p><button data-decision="approve" data-action="${esc(p.action)}" data-change="${esc(p.change)}">Approve</button>
<button data-decision="reject" data-action="${esc(p.action)}" data-change="${esc(p.change)}">Reject</button></p>
<p id="answer" role="status"></p></section>`;
}

/** The agent as it is: a script's steps, or a model's or CLI's turns, tokens, cost and summary. */
function agentPanel(s: SessionStatus): string {
  const a = s.agent;
  if (!a) return '<p>The agent has not run yet.</p>';
  const change = a.changed
    ? `commit <code>${esc(a.commit?.slice(0, 12))}</code> on <code>${esc(s.branch)}</code>`
    : 'no changes yet';
  if (!a.kind || a.kind === 'script') {
    return `<p>${a.steps} scripted step(s); ${change}. Cost: none (scripted agent, no model calls).</p>`;
  }
  const u = a.usage;
  const rows: [string, string][] = [
    ['kind', a.kind],
    ['model', a.model ?? 'unknown'],
    ['turns', `${a.turn ?? 0}${a.round && a.round > 1 ? ` (round ${a.round})` : ''}`],
    ['tokens', u ? `${u.totalTokens} (${u.promptTokens} in, ${u.completionTokens} out)` : 'none yet'],
    ['cost', a.costUsd === undefined ? 'unknown' : `$${a.costUsd.toFixed(4)}`],
    ['change', change],
    ...(a.lastTool ? [['last tool', a.lastTool] as [string, string]] : []),
    ...(a.stopReason ? [['stopped', a.stopReason] as [string, string]] : []),
  ];
  const table = rows
    .map(
      ([k, v]) =>
        `<tr><th>${esc(k)}</th><td class="agent-${esc(k.replace(' ', '-'))}">${k === 'change' ? v : esc(v)}</td></tr>`,
    )
    .join('');
  const transcript = a.transcript ? `<p><a href="/artifacts/${esc(a.transcript)}">transcript</a></p>` : '';
  return `<table id="agent-facts">${table}</table>${a.summary ? `<pre id="summary">${esc(a.summary)}</pre>` : ''}${transcript}`;
}

function testsSection(s: SessionStatus): string {
  const v = s.verification;
  if (!v) return '<p>No verification configured.</p>';
  const report = v.report
    ? `<p>${v.report.total} tests: ${v.report.passed} passed, ${v.report.failed} failed, ${v.report.skipped} skipped</p>
<ul>${v.report.failures.map((f) => `<li class="bad">${esc(f.name)}: ${esc(f.message)}</li>`).join('')}</ul>`
    : '';
  return `<p class="${v.passed ? 'ok' : 'bad'}" id="verdict">${esc(describeVerification(v))}</p>
${v.summary ? `<pre>${esc(v.summary)}</pre>` : ''}${report}
${v.outputTail ? `<details><summary>test output (tail)</summary><pre>${esc(v.outputTail)}</pre></details>` : ''}`;
}

function screenshotsSection(s: SessionStatus): string {
  const shots = screenshotsOf(s.verification)
    .map(
      (ref) =>
        `<figure><img class="shot" alt="${esc(ref)}" src="/artifacts/${esc(ref)}"><figcaption>${esc(ref)}</figcaption></figure>`,
    )
    .join('\n');
  return shots || '<p>None.</p>';
}

function decisionsList(s: SessionStatus): string {
  const items = [
    ...s.decisions.map(
      (d) =>
        `<li>${esc(d.decision)} ${esc(d.action)} by ${esc(d.by)} at ${esc(d.at)}${d.comment ? `: ${esc(d.comment)}` : ''}</li>`,
    ),
    ...s.refusedDecisions.map((r) => `<li class="bad">refused (${esc(r.input?.by)}): ${esc(r.reason)}</li>`),
  ].join('');
  return items || '<li>None yet.</li>';
}

/** Phases in which the session takes a follow-up (the validator has the last word). */
const OPEN_PHASES = ['agent', 'verifying', 'awaiting_approval', 'publishing', 'awaiting_followup', 'attached'];

/** A box for a follow-up: text for a model or CLI agent, steps (JSON) for a script agent. */
function followupBox(s: SessionStatus, who: string): string {
  if (!OPEN_PHASES.includes(s.phase)) return '';
  const script = !s.agent?.kind || s.agent.kind === 'script';
  const open = s.openUntil ? ` The session is open for follow-ups until ${esc(s.openUntil)}.` : '';
  return `<section id="followup"><h2>Follow-up</h2>
<p>Ask for more on this change: the agent continues in the session's sandbox, a new commit is verified and waits for approval again.${open}
You send it as <strong>${esc(who)}</strong> (an approver or the requester may).</p>
<p><textarea id="followup-text" data-script="${script ? 'yes' : 'no'}" rows="4" cols="80" maxlength="8000"
placeholder="${script ? '[{&quot;run&quot;: &quot;…&quot;}] (script steps as JSON)' : 'what to change'}"></textarea></p>
<p><button id="followup-send">Send follow-up</button></p><p id="followup-answer" role="status"></p></section>`;
}

/** Phases in which a person may attach (the validator has the last word). */
const ATTACH_PHASES = ['agent', 'verifying', 'awaiting_approval', 'attached'];

/** Who is in the sandbox, or the exact commands to get in: on the sandbox's host, or through this server. */
function attachSection(s: SessionStatus, server?: string): string {
  const a = s.attached;
  if (a) {
    return `<section class="pending" id="attach"><h2>Attached</h2><p><strong>${esc(a.by)}</strong> is in the sandbox
<code>${esc(a.sandbox)}</code> since ${esc(a.at)}: the agent waits until they exit the shell; then the session
commits and verifies their edits.</p></section>`;
  }
  if (!ATTACH_PHASES.includes(s.phase) || !s.sandbox) return '';
  const id = shellQuote(s.sessionId);
  const remote = server ? `DRYDOCK_API_TOKEN=&lt;your token&gt; drydock attach ${esc(id)} --server ${esc(server)}` : '';
  return `<section id="attach"><h2>Take over</h2><p>A shell in the sandbox (its user, in /workspace); the agent waits
until you exit, then your edits are committed and verified as part of the change. On the sandbox's host
(<code>${esc(s.sandbox.host)}</code>):</p><pre id="attach-command">drydock attach ${esc(id)}</pre>
${remote ? `<p>From another machine, through this server:</p><pre id="attach-remote">${remote}</pre>` : ''}</section>`;
}

/** A session id as one shell word (ids are letters, digits, ".", "_" and "-": quoting is for safety only). */
function shellQuote(word: string): string {
  return /^[A-Za-z0-9._-]+$/.test(word) ? word : `'${word.replace(/'/g, "'\\''")}'`;
}

/** The session's rounds: the task, then each follow-up, with the change it ended with. */
function roundsList(s: SessionStatus): string {
  if (!s.rounds?.length) return '';
  const items = s.rounds.map(
    (r) =>
      `<li>round ${r.round} by ${esc(r.by ?? 'unknown')}: ${esc(r.request.split('\n')[0].slice(0, 200))}` +
      `${r.commit ? ` → <code>${esc(r.commit.slice(0, 12))}</code>` : ''}${r.pushed ? ' (pushed)' : ''}</li>`,
  );
  return `<h2>Rounds</h2><ol id="rounds">${items.join('')}</ol>`;
}

/**
 * Send follow-up: POST it as JSON (the same rule as the decision: no
 * cross-site form can) and show the answer. Delegated: the live part is redrawn.
 */
const FOLLOWUP_SCRIPT = `
document.addEventListener('click', async (event) => {
  const send = event.target.closest && event.target.closest('#followup-send');
  if (!send) return;
  const box = document.getElementById('followup-text');
  let body;
  try {
    body = box.dataset.script === 'yes' ? { steps: JSON.parse(box.value) } : { text: box.value };
  } catch (err) {
    say('followup-answer', 'steps must be JSON: ' + err.message, 'bad');
    return;
  }
  say('followup-answer', 'sending…', '');
  try {
    const res = await fetch(location.pathname.replace(/^\\/sessions\\//, '/api/sessions/') + '/followups', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const data = await res.json();
    say('followup-answer', res.ok ? 'accepted for round ' + data.round : 'refused: ' + data.error, res.ok ? 'ok' : 'bad');
    if (res.ok) document.getElementById('followup-text').value = '';
  } catch (err) {
    say('followup-answer', 'failed: ' + err, 'bad');
  }
});`;

/**
 * Approve / Reject: POST the decision (bound to the change on display) and
 * show the answer. Delegated from the document: the live part is redrawn.
 */
const DECIDE_SCRIPT = `
document.addEventListener('click', async (event) => {
  const button = event.target.closest && event.target.closest('button[data-decision]');
  if (!button) return;
  say('answer', 'sending…', '');
  const comment = document.getElementById('comment').value.trim();
  const body = { decision: button.dataset.decision, action: button.dataset.action, change: button.dataset.change };
  if (comment) body.comment = comment;
  try {
    const res = await fetch(location.pathname.replace(/^\\/sessions\\//, '/api/sessions/') + '/decide', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const data = await res.json();
    const text = res.ok
      ? (data.decision === 'approve' ? 'approved ' : 'rejected ') + data.action + ' as ' + data.by
      : 'refused: ' + data.error;
    say('answer', text, res.ok ? 'ok' : 'bad');
    if (res.ok) for (const b of document.querySelectorAll('button[data-decision]')) b.disabled = true;
  } catch (err) {
    say('answer', 'failed: ' + err, 'bad');
  }
});`;

/**
 * Writes an answer into the element that has the id now: the live part may have been
 * redrawn while a request was under way, and the element of the click is then gone.
 */
const SAY_SCRIPT = `
function say(id, text, className) {
  const answer = document.getElementById(id);
  if (!answer) return;
  answer.textContent = text;
  answer.className = className;
}`;

/**
 * Keeps the page current: server-sent events from /sessions/<id>/events carry
 * the phase and the live part, already rendered and escaped by the server. A
 * comment or follow-up being typed, and the answer to the last one sent, survive a
 * redraw; the stream ends when the session does.
 */
const LIVE_SCRIPT = `
const events = new EventSource(location.pathname + '/events');
events.addEventListener('update', (event) => {
  const update = JSON.parse(event.data);
  const kept = ['comment', 'followup-text'].map((id) => [id, document.getElementById(id)?.value ?? '']);
  const said = ['answer', 'followup-answer'].map((id) => [id, document.getElementById(id)]);
  document.getElementById('phase').textContent = update.phase;
  document.getElementById('live').innerHTML = update.html;
  for (const [id, typed] of kept) {
    const again = document.getElementById(id);
    if (again) again.value = typed;
  }
  for (const [id, before] of said) {
    const again = document.getElementById(id);
    if (again && before && before.textContent) {
      again.textContent = before.textContent;
      again.className = before.className;
    }
  }
});
events.addEventListener('end', () => {
  events.close();
  document.getElementById('live-state').textContent = 'ended';
});`;

/** The pilot metrics of `drydock report`, for the window asked for (?since=7d&repo=...). */
export function reportPage(report: Report, who: string): string {
  const rows = reportRows(report)
    .map(([label, value]) => `<tr><th>${esc(label)}</th><td>${esc(value)}</td></tr>`)
    .join('\n');
  return page(
    'report',
    `<h1>Report</h1><p>Sessions started since ${esc(report.since)}${report.repo ? ` on ${esc(report.repo)}` : ''}.</p>
<form method="get" action="/report"><label>since <input name="since" value="7d" size="5"></label>
<label>repo <input name="repo" value="${esc(report.repo ?? '')}"></label> <button type="submit">show</button></form>
<table id="metrics">${rows}</table>
<p>Definitions: <code>docs/audit.md</code>. The same figures: <code>bin/drydock report</code>.</p>`,
    { who },
  );
}
