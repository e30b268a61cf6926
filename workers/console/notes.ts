/**
 * The console's page of repo notes (docs/agents.md, Repo memory): each note
 * an agent proposed, its text in a box a maintainer can edit, and Approve,
 * Save edit and Drop, which send JSON to POST /api/notes/:id (notes.js).
 */
import type { RepoNote } from '../../repos/notes';
import { esc, page } from './page';

export function notesPage(notes: RepoNote[], opts: { who: string; nonce: string; status: string }): string {
  const tabs = ['proposed', 'approved', 'dropped']
    .map((s) => (s === opts.status ? `<b>${s}</b>` : `<a href="/notes?status=${s}">${s}</a>`))
    .join(' · ');
  const rows = notes.map((n) => {
    const actions =
      n.status === 'dropped'
        ? ''
        : `<p><button type="button" data-note="${n.id}" data-action="${n.status === 'proposed' ? 'approve' : 'edit'}">${n.status === 'proposed' ? 'Approve' : 'Save edit'}</button>` +
          `<button type="button" data-note="${n.id}" data-action="drop">Drop</button></p>`;
    const decided = n.decidedBy ? ` · ${esc(n.status)} by ${esc(n.decidedBy)} at ${esc(n.decidedAt)}` : '';
    return `<section class="note" aria-label="note ${n.id}"><h2>#${n.id} · ${esc(n.repo)} · v${n.version}</h2>
<p>proposed in <a href="/sessions/${encodeURIComponent(n.sessionId)}">${esc(n.sessionId)}</a> at ${esc(n.proposedAt)}${decided}</p>
<textarea id="text-${n.id}" rows="4" cols="100" aria-label="text of note ${n.id}"${n.status === 'dropped' ? ' readonly' : ''}>${esc(n.text)}</textarea>
${actions}</section>`;
  });
  return page(
    'repo notes',
    `<h1>Repo notes</h1><p>${tabs}</p>
<p>Notes sessions proposed for their repo. An approved note is given to the repo's later sessions (as hints, fenced);
drydock never writes it into the repo.</p><p id="answer" role="status"></p>
${rows.join('\n') || '<p>No notes here.</p>'}`,
    { who: opts.who, nonce: opts.nonce, scripts: ['notes.js'] },
  );
}
