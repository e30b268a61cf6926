/**
 * The console's desktop page: noVNC (served by drydock serve from the
 * project's node_modules, as ES modules) on a WebSocket to the session's
 * desktop, a virtual display beside its sandbox (sandbox/desktop.ts). The
 * socket's rules are workers/routes/desktop.ts's; the page carries its ticket.
 */
import type { SessionStatus } from '../../workflows/api';
import { esc, page } from './page';

export function desktopPage(s: SessionStatus, opts: { who: string; nonce: string; ticket: string }): string {
  const id = encodeURIComponent(s.sessionId);
  const body = `<h1>Desktop: <a href="/sessions/${id}">${esc(s.sessionId)}</a></h1>
<p>A display beside the sandbox, as <strong>${esc(opts.who)}</strong>: a browser check's Chromium draws here while it
runs, and the Chromium on it is yours to drive the app by hand (its address is the app's on <code>localhost</code>;
it reaches nothing else). The agent goes on meanwhile: nothing you do here changes the session's files. Opening and
closing it are recorded in the audit trail under your name; it stops 15 minutes after its last viewer leaves.</p>
<p><span id="desktop-state" role="status">starting the desktop…</span></p>
<div id="desktop" data-session="${esc(s.sessionId)}" data-ticket="${esc(opts.ticket)}"
style="width:100%;height:48rem;background:#222"></div>`;
  return page(`desktop ${s.sessionId}`, body, {
    nonce: opts.nonce,
    who: opts.who,
    head: `<script type="module" nonce="${opts.nonce}" src="/assets/console/desktop.js"></script>`,
  });
}
