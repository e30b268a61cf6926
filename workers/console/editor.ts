/**
 * The console's editor page: it holds the takeover (its WebSocket, whose
 * rules are workers/routes/editor.ts's) and, once the editor runs in the
 * sandbox, links to VS Code on the session's editor origin; a Detach button
 * hands the session back to the agent. It lists who is in the session (VS
 * Code, the terminal, the desktop). With `watch`, a reader's page: the list
 * alone, no editor.
 */
import type { SessionStatus } from '../../workflows/api';
import { esc, page } from './page';

export function editorPage(
  s: SessionStatus,
  opts: { who: string; nonce: string; ticket: string; watch?: boolean },
): string {
  const id = encodeURIComponent(s.sessionId);
  const about = opts.watch
    ? `<p>Watching who is in the session's VS Code, as <strong>${esc(opts.who)}</strong>: you see who is in it and in the
terminal, live; you get no editor, and watching does not make the agent wait. What they save is in the session's change
once they detach; you may also <a href="/sessions/${id}/terminal?watch=1">watch the terminal</a>.</p>`
    : `<p>VS Code on the sandbox's <code>/workspace</code>, as <strong>${esc(opts.who)}</strong>. While this page is open, the agent
waits; when you detach (or the last person in closes the page), the session commits the edits you saved, verifies them,
and they are reviewed again. The editor opens on an origin of the session's own, in a tab of its own; keep this page open
while you edit. It stops after a while in which nothing of yours reached it (15 minutes unless set otherwise). Opening and closing it are in the
session's audit trail under your name. Others may <a href="/sessions/${id}/editor?watch=1">watch</a> who is in.</p>`;
  const body = `<h1>Editor: <a href="/sessions/${id}">${esc(s.sessionId)}</a></h1>
${about}
<p><button type="button" id="detach" disabled>${opts.watch ? 'Stop watching' : 'Detach'}</button> <span id="editor-state" role="status">connecting…</span></p>
<p>Here: <span id="presence" aria-live="polite">nobody yet</span></p>
<p><a id="open-editor-window" href="#" target="_blank" rel="noopener" hidden>Open VS Code</a></p>
<div id="editor" data-session="${esc(s.sessionId)}" data-ticket="${esc(opts.ticket)}" data-watch="${opts.watch ? 'yes' : 'no'}"></div>`;
  return page(`editor ${s.sessionId}`, body, { nonce: opts.nonce, scripts: ['editor.js'], who: opts.who });
}
