/**
 * A session for a reviewer: the summary first, the approval (bound to the
 * change's hash), the change round by round (an interdiff since the round the
 * reviewer last saw, then the whole change, each file with a "viewed" box and
 * line comments), the evidence, and the rest of what happened. The part that
 * changes while the session runs is sent again by the events stream.
 */
import { createHash } from 'node:crypto';
import { REVIEW_IDLE_MS } from '../../review/review-time';
import { OUTCOMES, type QueuedFor, type SessionStatus, type StepRecord, type Unanswered } from '../../workflows/api';
import { diffHtml } from './diff';
import { roundsSection, screenshotsSection, testsSection } from './evidence';
import { esc, page } from './page';
import { summarySection, type ReviewFacts } from './summary';

/** What a session page shows besides the status. */
export interface LiveExtras {
  /** The whole diff of the change on display. */
  diff?: string;
  /** The round's change since round `since`, the one this reviewer saw last (or the one before). */
  interdiff?: { round: number; since: number; seen: boolean; diff?: string };
  facts?: ReviewFacts;
  /** The tail of the running step's streamed output. */
  running?: string;
  /** This server's address, for `drydock attach --server`. */
  server?: string;
  /** Each service's log as the last checkpoint kept it (the artifact `services/<name>.log`), by name. */
  serviceLogs?: { name: string; ref: string; text: string }[];
}

/** The page's own scripts (./assets), in order. */
const SCRIPTS = ['review-clock.js', 'session.js'];

export function sessionPage(
  s: SessionStatus,
  extra: LiveExtras & { who: string; nonce: string; temporalLink: string },
): string {
  const body = `<h1>${esc(s.sessionId)}: <span class="phase" id="phase">${esc(s.phase)}</span></h1>
<p>${esc(s.repo)} · requested by ${esc(s.requestedBy ?? 'unknown')} · started ${esc(s.startedAt)} · <a href="${esc(extra.temporalLink)}">in the Temporal UI</a>
· <span id="live-state">${OUTCOMES.includes(s.phase as never) ? 'ended' : 'live'}</span></p>${
    s.attemptOf
      ? `
<p>One of parallel attempts: <a href="/attempts/${encodeURIComponent(s.attemptOf)}">compare them and pick one</a>.</p>`
      : ''
  }${
    s.childOf
      ? `
<p>A child session of <a href="/sessions/${encodeURIComponent(s.childOf)}">${esc(s.childOf)}</a>: its change goes there.</p>`
      : ''
  }${childrenList(s)}
<p class="keys" id="keys">Keys: <kbd>j</kbd>/<kbd>k</kbd> next/previous file, <kbd>v</kbd> mark it viewed,
<kbd>c</kbd> comment on it, <kbd>A</kbd> approve, <kbd>R</kbd> reject (the change on display).</p>
<pre id="task">${esc(s.task)}</pre>
<p id="answer" role="status"></p>
${liveDiv(sessionLive(s, extra, extra.who))}`;
  return page(s.sessionId, body, {
    nonce: extra.nonce,
    scripts: SCRIPTS,
    who: extra.who,
    head: '<link rel="stylesheet" href="/assets/diff2html.css">',
  });
}

/**
 * A live part's version, named to the events stream (`?seen=` on its first connect, SSE's
 * `Last-Event-ID` on a reconnect): an update the page already shows is not sent, so the live
 * part is redrawn only when it changed (a redraw closes an open line comment form).
 */
export const liveVersion = (html: string): string => createHash('sha256').update(html).digest('base64url').slice(0, 22);

const liveDiv = (html: string) => `<div id="live" data-seen="${liveVersion(html)}">${html}</div>`;

/** The child sessions the agent started, each a link to its page. */
function childrenList(s: SessionStatus): string {
  if (!s.children?.length) return '';
  const items = s.children.map(
    (c) =>
      `<li><a href="/sessions/${encodeURIComponent(c.sessionId)}">${esc(c.sessionId)}</a>: ${esc(c.phase)}${c.verified === undefined ? '' : c.verified ? ', verified' : ', verification failed'} · ${esc(c.task)}</li>`,
  );
  return `\n<h2>Child sessions</h2>\n<ul id="children">${items.join('')}</ul>`;
}

/** The change the reviewer is looking at: the one waiting for approval, else the last round's. */
export function changeOnDisplay(s: SessionStatus): string | undefined {
  return s.pendingApproval?.change ?? s.rounds?.at(-1)?.change;
}

/** The part of a session page that changes while it runs; the events stream sends it again on each change. */
export function sessionLive(s: SessionStatus, extra: LiveExtras, who: string): string {
  const running = extra.running ? `<h2>Running now</h2><pre id="running">${esc(extra.running)}</pre>` : '';
  const change = changeOnDisplay(s);
  const open = !OUTCOMES.includes(s.phase as never);
  return `<span id="review-change" hidden data-idle="${REVIEW_IDLE_MS}" data-change="${esc(open ? (change ?? '') : '')}"></span>
${s.unanswered ? unansweredBanner(s.unanswered) : ''}
${s.queued ? queuedBanner(s.queued) : ''}
${s.error ? `<p class="bad" id="error">${esc(s.error)}</p>` : ''}
${extra.facts ? summarySection(s, extra.facts) : ''}
${approvalSection(s, who)}
${changeSection(s, extra)}
<h2>Screenshots</h2><div id="screenshots">${screenshotsSection(s)}</div>
<h2>Tests</h2><div id="tests">${testsSection(s)}</div>
${reviewBox(s, who)}
${roundsSection(s)}
${attachSection(s, who, extra.server)}
${previewSection(s)}
<h2>Agent</h2><div id="agent">${agentPanel(s)}</div>
${running}
${serviceLogsSection(extra.serviceLogs)}
<h2>Timeline</h2><div class="scroll" tabindex="0" role="region" aria-label="timeline"><table id="timeline"><tr><th>step</th><th>phase</th><th>result</th><th>duration</th><th>detail</th></tr>${s.timeline.map(timelineRow).join('')}</table></div>
<h2>Decisions</h2><ul id="decisions">${decisionsList(s)}</ul>
${s.pushed ? `<p>Pushed <code>${esc(s.branch)}</code> at <code>${esc(s.pushed.commit.slice(0, 12))}</code>.</p>` : ''}
${s.pullRequest ? `<p>Pull request: <a href="${esc(s.pullRequest.url)}">${esc(s.pullRequest.url)}</a></p>` : ''}`;
}

/** Lines of a service's log the page shows (a link gives the rest the checkpoint kept). */
const SERVICE_LOG_SHOWN = 40;

/** The services' logs, as the last checkpoint kept them: the end of each, and a link to what was kept. */
function serviceLogsSection(logs: LiveExtras['serviceLogs']): string {
  if (!logs?.length) return '';
  const each = logs.map(
    (l) => `<h3>${esc(l.name)}</h3>
<div class="scroll" tabindex="0" role="region" aria-label="log of ${esc(l.name)}"><pre class="service-log" data-service="${esc(l.name)}">${esc(l.text.split('\n').slice(-SERVICE_LOG_SHOWN).join('\n'))}</pre></div>
<p><a href="/artifacts/${esc(l.ref)}">the whole log kept</a></p>`,
  );
  return `<section id="service-logs" aria-labelledby="service-logs-title"><h2 id="service-logs-title">Service logs</h2>
<p>As of the last checkpoint (after each agent step).</p>
${each.join('\n')}</section>`;
}

/** The interdiff (a later round), then the whole change. */
function changeSection(s: SessionStatus, extra: LiveExtras): string {
  const commentable = OUTCOMES.includes(s.phase as never) ? false : true;
  const i = extra.interdiff;
  const since = i
    ? `<section id="interdiff-section" aria-labelledby="interdiff-title"><h2 id="interdiff-title">Round ${i.round} since round ${i.since}</h2>
<p>${i.seen ? `Round ${i.since} is the one you saw last` : `You have not seen an earlier round here; this is what round ${i.round} changed`}.</p>
${i.diff !== undefined ? `<div id="interdiff">${diffHtml(i.diff, { id: 'since', commentable: false })}</div>` : '<p id="interdiff">Not kept on this server (another host made the earlier commit).</p>'}</section>`
    : '';
  const whole =
    extra.diff !== undefined
      ? `<div id="diff">${diffHtml(extra.diff, { id: 'all', commentable })}</div>`
      : s.agent?.diffstat
        ? `<pre id="diff">${esc(s.agent.diffstat)}</pre>`
        : '<p id="diff">No change.</p>';
  const setup = s.agent?.setupFiles
    ? `<p id="setup-files">Left out of the change (setup wrote them, nobody changed them since): ${esc(s.agent.setupFiles)}.</p>`
    : '';
  return `${since}<h2>${i ? 'The whole change' : 'Diff'}</h2>${whole}${setup}`;
}

function seconds(ms?: number): string {
  return ms === undefined ? 'running' : `${(ms / 1000).toFixed(1)} s`;
}

function timelineRow(step: StepRecord): string {
  const mark = step.ok === undefined ? '…' : step.ok ? '<span class="ok">ok</span>' : '<span class="bad">failed</span>';
  const exit = step.exitCode !== undefined && step.exitCode !== 0 ? `exit ${step.exitCode}` : '';
  return `<tr><td>${esc(step.name)}</td><td>${esc(step.phase)}</td><td>${mark}</td><td>${seconds(step.durationMs)}</td><td>${esc(step.detail ?? exit)}</td></tr>`;
}

/** A session waiting for a sandbox slot: what for, since when, its place in line. */
function queuedBanner(q: QueuedFor): string {
  const place = q.position === undefined ? '' : ` It is number ${q.position} in line.`;
  return `<section class="pending" id="queued"><p>Queued since ${esc(q.since)}: ${esc(q.reason)}.${place}</p></section>`;
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

/**
 * Approve / Reject, bound to the change on display. Their answer (#answer) is
 * outside the live part: a decision moves the session on, and the redraw
 * that follows drops this section, before or after the answer arrives.
 */
function approvalSection(s: SessionStatus, who: string): string {
  const p = s.pendingApproval;
  if (!p) return '';
  const button = (decision: string, label: string, key: string) =>
    `<button data-decision="${decision}" data-action="${esc(p.action)}" data-change="${esc(p.change)}" aria-keyshortcuts="${key}">${label}</button>`;
  return `<section class="pending" id="approval" aria-labelledby="approval-title"><h2 id="approval-title">Waiting for approval: ${esc([p.action, ...(p.covers ?? [])].join(' and '))}</h2>
${planOrChange(p)} <code id="change">${esc(p.change.slice(0, 12))}</code>; deadline ${esc(p.deadline)};
may approve: ${esc(p.approvers.length ? p.approvers.join(', ') : 'anyone')}. You decide as <strong>${esc(who)}</strong>.</p>
<p><label for="comment">Comment</label> <input type="text" id="comment" size="60"></p>
<p>${button('approve', 'Approve', 'Shift+A')}${button('reject', 'Reject', 'Shift+R')}</p></section>`;
}

/**
 * What waits: the agent's plan (its text, as written: escaped, never
 * rendered; a follow-up below amends it) or an action on a change.
 */
function planOrChange(p: NonNullable<SessionStatus['pendingApproval']>): string {
  if (p.evidence.plan) {
    return `<p>The agent's plan, version ${p.evidence.plan.version}: approve it to let the agent start, or send a follow-up below to amend it.</p>
<pre id="plan">${esc(p.evidence.plan.text)}</pre><p>plan`;
  }
  return `<p>${esc(p.action)} of <code>${esc(p.evidence.branch)}</code> at <code>${esc(p.evidence.commit.slice(0, 12))}</code>,
change`;
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
    ['turns', `${a.turn ?? 0}${a.attempt && a.attempt > 1 ? ` (attempt ${a.attempt})` : ''}`],
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

/**
 * The reviewer's comments (added on lines of the diff) and a note, sent
 * together as one follow-up round: words for a model or CLI agent, a shell
 * command or JSON steps for a scripted one.
 */
function reviewBox(s: SessionStatus, who: string): string {
  if (!OPEN_PHASES.includes(s.phase)) return '';
  const script = !s.agent?.kind || s.agent.kind === 'script';
  const open = s.openUntil ? ` The session is open for follow-ups until ${esc(s.openUntil)}.` : '';
  const what = script
    ? "This session's agent is a script: each comment, and the note, is a shell command (or JSON steps) run in the sandbox."
    : 'The agent reads the comments with their files and lines, and the note.';
  return `<section id="followup" aria-labelledby="followup-title"><h2 id="followup-title">Your review</h2>
<p>Comment on lines of the diff (click a line number, or press <kbd>c</kbd>), then send the comments and a note together as one follow-up: the agent continues in the session's sandbox, and the new change is verified and waits for approval again. ${what}${open}
You send it as <strong>${esc(who)}</strong> (an approver or the requester may).</p>
<h3 id="pending-title">Comments to send (<span id="pending-count">0</span>)</h3><ul id="pending-comments" aria-labelledby="pending-title"></ul>
<p><label for="followup-text">Note</label><br><textarea id="followup-text" data-script="${script ? 'yes' : 'no'}" rows="4" cols="80" maxlength="8000"
placeholder="${script ? 'a shell command, or [{&quot;run&quot;: &quot;…&quot;}]' : 'what to change'}"></textarea></p>
<p><button id="followup-send">Send review</button></p><p id="followup-answer" role="status"></p></section>`;
}

/** Phases in which a person may attach (the validator has the last word). */
const ATTACH_PHASES = ['agent', 'verifying', 'awaiting_approval', 'attached'];

/** Who is in the sandbox, or the exact commands to get in: on the sandbox's host, or through this server. */
function attachSection(s: SessionStatus, who: string, server?: string): string {
  const a = s.attached;
  if (a) {
    return `<section class="pending" id="attach"><h2>Attached</h2><p><strong>${esc(a.by)}</strong> is in the sandbox
<code>${esc(a.sandbox)}</code> since ${esc(a.at)}: the agent waits until they exit the shell; then the session
commits and verifies their edits.${a.by === who ? ` <a id="open-terminal" href="/sessions/${encodeURIComponent(s.sessionId)}/terminal">Back to your terminal</a>` : ''}
Anyone who reads the session may watch <a id="watch-terminal" href="/sessions/${encodeURIComponent(s.sessionId)}/terminal?watch=1">the
terminal</a> or <a id="watch-editor" href="/sessions/${encodeURIComponent(s.sessionId)}/editor?watch=1">who is in VS Code</a>.</p></section>`;
  }
  if (!ATTACH_PHASES.includes(s.phase) || !s.sandbox) return '';
  const id = shellQuote(s.sessionId);
  const remote = server ? `DRYDOCK_API_TOKEN=&lt;your token&gt; drydock attach ${esc(id)} --server ${esc(server)}` : '';
  return `<section id="attach"><h2>Take over</h2><p>A shell in the sandbox (its user, in /workspace); the agent waits
until you exit, then your edits are committed and verified as part of the change.
<a id="open-terminal" href="/sessions/${encodeURIComponent(s.sessionId)}/terminal">Open a terminal here</a>
(approvers and the requester), <a id="open-editor" href="/sessions/${encodeURIComponent(s.sessionId)}/editor">VS Code</a>
(the same takeover, in an editor), or <a id="open-desktop" href="/sessions/${encodeURIComponent(s.sessionId)}/desktop">the
desktop</a> (the app and the browser check's Chromium, live; the agent goes on). On the sandbox's host
(<code>${esc(s.sandbox.host)}</code>):</p><pre id="attach-command">drydock attach ${esc(id)}</pre>
${remote ? `<p>From another machine, through this server:</p><pre id="attach-remote">${remote}</pre>` : ''}</section>`;
}

/** The app's preview (workers/routes/preview.ts), for everyone who reads the session, while its sandbox lives. */
function previewSection(s: SessionStatus): string {
  if (!s.sandbox?.appPort || s.parked || ['tearing_down', ...OUTCOMES].includes(s.phase)) return '';
  return `<section id="preview"><h2>The app</h2><p>The app running in the sandbox (port ${s.sandbox.appPort}), on an origin of
this session's own: <a id="open-preview" href="/sessions/${encodeURIComponent(s.sessionId)}/preview" target="_blank"
rel="noopener">Open the preview</a>. While the session waits at its gate, the preview can start it.</p></section>`;
}

/** A session id as one shell word (ids are letters, digits, ".", "_" and "-": quoting is for safety only). */
function shellQuote(word: string): string {
  return /^[A-Za-z0-9._-]+$/.test(word) ? word : `'${word.replace(/'/g, "'\\''")}'`;
}
