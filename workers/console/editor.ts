/**
 * The console's editor page: it holds the takeover (its WebSocket, whose
 * rules are workers/routes/editor.ts's) and, once the editor runs in the
 * sandbox, links to VS Code on the session's editor origin; a Detach button
 * hands the session back to the agent.
 */
import type { SessionStatus } from '../../workflows/api';
import { esc, page } from './page';

export function editorPage(s: SessionStatus, opts: { who: string; nonce: string; ticket: string }): string {
  const id = encodeURIComponent(s.sessionId);
  const body = `<h1>Editor: <a href="/sessions/${id}">${esc(s.sessionId)}</a></h1>
<p>VS Code on the sandbox's <code>/workspace</code>, as <strong>${esc(opts.who)}</strong>. While this page is open, the agent
waits; when you detach (or the last person in closes the page), the session commits the edits you saved, verifies them,
and they are reviewed again. The editor opens on an origin of the session's own, in a tab of its own; keep this page open
while you edit. It stops after a while in which nothing of yours reached it (15 minutes unless set otherwise). Opening and closing it are in the
session's audit trail under your name.</p>
<p><button type="button" id="detach" disabled>Detach</button> <span id="editor-state" role="status">connecting…</span></p>
<p><a id="open-editor-window" href="#" target="_blank" rel="noopener" hidden>Open VS Code</a></p>
<div id="editor" data-session="${esc(s.sessionId)}" data-ticket="${esc(opts.ticket)}"></div>`;
  return page(`editor ${s.sessionId}`, body, { nonce: opts.nonce, scripts: ['editor.js'], who: opts.who });
}
