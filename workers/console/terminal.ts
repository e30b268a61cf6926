/**
 * The console's terminal page: xterm.js (served by drydock serve from the
 * project's node_modules) on a WebSocket to a shell in the session's sandbox,
 * and a Detach button that hands the session back to the agent. The socket's
 * rules are workers/routes/terminal.ts's; the page carries its ticket.
 */
import type { SessionStatus } from '../../workflows/api';
import { esc, page } from './page';

export function terminalPage(
  s: SessionStatus,
  opts: { who: string; nonce: string; ticket: string; watch?: boolean },
): string {
  const id = encodeURIComponent(s.sessionId);
  const about = opts.watch
    ? `<p>Watching the sandbox's shell as <strong>${esc(opts.who)}</strong>: you see what the people in it see; your keys
are not sent. Watching does not make the agent wait.</p>`
    : `<p>A shell in the sandbox (its user, in /workspace), as <strong>${esc(opts.who)}</strong>. While you are in, the agent
waits; when the last person in detaches, the session commits the edits and verifies them, and they are reviewed again.
Everyone who opens this terminal shares one shell. Every key you type is recorded in the session's audit trail under
your name, in batches written within 2 s. Others may <a href="/sessions/${id}/terminal?watch=1">watch</a>.</p>`;
  const body = `<h1>Terminal: <a href="/sessions/${id}">${esc(s.sessionId)}</a></h1>
${about}
<p><button type="button" id="detach" disabled>${opts.watch ? 'Stop watching' : 'Detach'}</button> <span id="terminal-state" role="status">connecting…</span></p>
<p>Here: <span id="presence" aria-live="polite">nobody yet</span></p>
<div id="terminal" data-session="${esc(s.sessionId)}" data-ticket="${esc(opts.ticket)}" data-watch="${opts.watch ? 'yes' : 'no'}" style="height:28rem"></div>`;
  return page(`terminal ${s.sessionId}`, body, {
    nonce: opts.nonce,
    scripts: ['terminal.js'],
    who: opts.who,
    head:
      '<link rel="stylesheet" href="/assets/xterm/xterm.css">' +
      `<script nonce="${opts.nonce}" src="/assets/xterm/xterm.js"></script>`,
  });
}
