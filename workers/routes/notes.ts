/**
 * Repo memory over HTTP (docs/agents.md, Repo memory): the notes sessions
 * proposed, a maintainer's decision on each, and the console's page of them.
 * Reading a repo's notes needs the reader role on it; approving, editing or
 * dropping one needs approver (the identities file's roles). Each decision
 * is a new version of the note (repos/notes.ts) and an audit event in the
 * repo's notes chain (`notes:<repo>`). The HTML is in ../console/notes.ts.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  auditDecision,
  NoteRefused,
  RepoNotes,
  type NoteDecision,
  type NoteStatus,
  type RepoNote,
} from '../../repos/notes';
import { NOTE_LIMITS } from '../../workflows/rules/repo-notes';
import { requireRole } from '../access';
import { notesPage } from '../console/notes';
import { HttpError, parseJson, readBody, requireJsonRequest, sendHtml, sendJson, type ServeContext } from '../http';

const STATUSES: readonly NoteStatus[] = ['proposed', 'approved', 'dropped'];

const store = (ctx: ServeContext) => {
  if (!ctx.pool) throw new HttpError(503, 'no database configured for repo notes');
  return new RepoNotes(ctx.pool);
};

/** The notes `who` may read: `repo` and `status` narrow them. */
async function readableNotes(ctx: ServeContext, url: URL, who: string): Promise<RepoNote[]> {
  const status = url.searchParams.get('status') || undefined;
  if (status && !STATUSES.includes(status as NoteStatus)) throw new HttpError(400, `status: ${STATUSES.join(', ')}`);
  const repo = url.searchParams.get('repo') || undefined;
  const notes = await store(ctx).list({ repo, status: status as NoteStatus | undefined });
  const roles = ctx.identities.roles;
  return notes.filter((n) => !roles.configured || roles.holds(who, n.repo, 'reader'));
}

/** A note `who` may read, or 404 in the same words as one that does not exist. */
async function readableNote(ctx: ServeContext, id: string, who: string): Promise<RepoNote> {
  const note = /^\d{1,15}$/.test(id) ? await store(ctx).get(Number(id)) : undefined;
  const roles = ctx.identities.roles;
  if (!note || (roles.configured && !roles.holds(who, note.repo, 'reader'))) throw new HttpError(404, `no note ${id}`);
  return note;
}

/** The decision in a body `{action, text?}`, bounded. */
function decisionOf(body: any): NoteDecision {
  if (body === null || typeof body !== 'object') throw new HttpError(400, 'body must be a JSON object');
  const { action, text } = body;
  if (!['approve', 'edit', 'drop'].includes(action)) throw new HttpError(422, 'action: approve, edit or drop');
  if (text !== undefined && typeof text !== 'string') throw new HttpError(422, 'text: a string');
  if (typeof text === 'string' && text.length > NOTE_LIMITS.noteChars) {
    throw new HttpError(422, `text: at most ${NOTE_LIMITS.noteChars} characters`);
  }
  return action === 'drop' ? { action } : { action, ...(text !== undefined ? { text } : {}) };
}

/** POST /api/notes/:id `{action, text?}`: approve (as it is, or with text), edit or drop; audited. */
async function decideNote(ctx: ServeContext, req: IncomingMessage, id: string, who: string) {
  requireJsonRequest(req);
  const decision = decisionOf(parseJson(await readBody(req, 8_192)));
  const note = await readableNote(ctx, id, who);
  requireRole(ctx, who, note.repo, 'approver');
  let decided: RepoNote;
  try {
    decided = await store(ctx).decide(note.id, decision, who);
  } catch (err) {
    if (err instanceof NoteRefused) throw new HttpError(409, err.message);
    throw err;
  }
  if (ctx.audit) await auditDecision(ctx.audit, decided, decision.action, who);
  return decided;
}

/** Serves the notes' API and page; false when `req` is not one of them. */
export async function serveNotesRoute(
  ctx: ServeContext,
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  who: string,
): Promise<boolean> {
  const method = req.method ?? 'GET';
  const p = url.pathname;
  let match: RegExpExecArray | null;
  if (method === 'GET' && p === '/api/notes') {
    sendJson(res, 200, await readableNotes(ctx, url, who));
  } else if (method === 'GET' && (match = /^\/api\/notes\/([^/]+)$/.exec(p))) {
    const note = await readableNote(ctx, decodeURIComponent(match[1]), who);
    sendJson(res, 200, { ...note, versions: await store(ctx).versions(note.id) });
  } else if (method === 'POST' && (match = /^\/api\/notes\/([^/]+)$/.exec(p))) {
    sendJson(res, 200, await decideNote(ctx, req, decodeURIComponent(match[1]), who));
  } else if (method === 'GET' && p === '/notes') {
    if (!url.searchParams.has('status')) url.searchParams.set('status', 'proposed');
    const nonce = randomBytes(16).toString('base64');
    const notes = await readableNotes(ctx, url, who);
    sendHtml(res, 200, notesPage(notes, { who, nonce, status: url.searchParams.get('status') ?? '' }), nonce);
  } else {
    return false;
  }
  return true;
}
