/**
 * The console's terminal page: xterm.js (served by drydock serve from the
 * project's node_modules) on a WebSocket to a shell in the session's sandbox,
 * and a Detach button that hands the session back to the agent. The socket's
 * rules are workers/routes/terminal.ts's; the page carries its ticket.
 */
import type { SessionStatus } from '../../workflows/api';
import { esc, page } from './page';

export function terminalPage(s: SessionStatus, opts: { who: string; nonce: string; ticket: string }): string {
  const id = encodeURIComponent(s.sessionId);
  const body = `<h1>Terminal: <a href="/sessions/${id}">${esc(s.sessionId)}</a></h1>
<p>A shell in the sandbox (its user, in /workspace), as <strong>${esc(opts.who)}</strong>. While you are in, the agent
waits; when you detach, the session commits your edits and verifies them, and they are reviewed again. Every key you
type is recorded in the session's audit trail under your name, in batches written within 2 s.</p>
<p><button type="button" id="detach" disabled>Detach</button> <span id="terminal-state" role="status">connecting…</span></p>
<div id="terminal" data-session="${esc(s.sessionId)}" data-ticket="${esc(opts.ticket)}" style="height:28rem"></div>`;
  return page(`terminal ${s.sessionId}`, body, {
    nonce: opts.nonce,
    scripts: ['terminal.js'],
    who: opts.who,
    head:
      '<link rel="stylesheet" href="/assets/xterm/xterm.css">' +
      `<script nonce="${opts.nonce}" src="/assets/xterm/xterm.js"></script>`,
  });
}
