/**
 * The review console's pages: sign-in and sign-out, the session list, a
 * session, its artifacts and the metrics. The HTML itself is in ../console.
 */
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import path from 'node:path';
import { buildReport, windowStart } from '../../lib/report';
import { listSessions } from '../../lib/sessions';
import { sessionLink } from '../../lib/temporal';
import { listPage, loginPage, reportPage, sessionPage } from '../console';
import { COOKIE, HttpError, readBody, sendHtml, statusOr404, type ServeContext } from '../http';

/** POST /login: a token from the form becomes the console cookie. */
export async function login(ctx: ServeContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const form = new URLSearchParams((await readBody(req, ctx.config.DRYDOCK_HTTP_MAX_BODY)).toString('utf8'));
  const token = form.get('token') ?? '';
  const who = ctx.tokens.identify(token);
  if (!who) {
    ctx.log.warn({ ip: req.socket.remoteAddress }, 'console sign-in refused');
    return sendHtml(res, 401, loginPage('That token is not valid.'));
  }
  const secure = ctx.config.DRYDOCK_CONSOLE_URL?.startsWith('https:') ? '; Secure' : '';
  res.writeHead(303, {
    location: '/',
    'set-cookie': `${COOKIE}=${encodeURIComponent(token)}; HttpOnly; SameSite=Strict; Path=/${secure}`,
  });
  res.end();
}

/** POST /logout: the cookie is cleared. */
export function logout(res: ServerResponse): void {
  res.writeHead(303, {
    location: '/login',
    'set-cookie': `${COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0`,
  });
  res.end();
}

/** GET /: the newest sessions. */
export async function consoleList(ctx: ServeContext, res: ServerResponse, who: string): Promise<void> {
  const rows = await listSessions(ctx.client, { limit: 100 });
  sendHtml(res, 200, listPage(rows, who));
}

/** GET /sessions/:id: status, diff and the approval buttons. */
export async function consoleSession(ctx: ServeContext, res: ServerResponse, id: string, who: string): Promise<void> {
  const s = await statusOr404(ctx.client, id);
  const diff = s.agent?.diff ? (await ctx.artifacts.get(s.sessionId, 'change.diff'))?.toString('utf8') : undefined;
  const nonce = randomBytes(16).toString('base64');
  sendHtml(res, 200, sessionPage(s, { diff, who, nonce, temporalLink: sessionLink(ctx.config, id) }), nonce);
}

/** GET /artifacts/:ref: screenshots and logs from the artifact store, confined to it. */
export async function artifact(ctx: ServeContext, res: ServerResponse, ref: string): Promise<void> {
  const root = ctx.artifacts.pathOf('');
  const file = path.resolve(root, ref);
  if (!file.startsWith(root) || ref.split('/').includes('..')) throw new HttpError(400, 'bad artifact reference');
  const content = await readFile(file).catch(() => undefined);
  if (!content) throw new HttpError(404, `no artifact ${ref}`);
  const type = file.endsWith('.png') ? 'image/png' : 'text/plain; charset=utf-8';
  res.writeHead(200, { 'content-type': type, 'x-content-type-options': 'nosniff', 'cache-control': 'private' });
  res.end(content);
}

/** GET /report?since&repo: the pilot report (the figures of `drydock report`). */
export async function report(ctx: ServeContext, res: ServerResponse, url: URL, who: string): Promise<void> {
  if (!ctx.pool) throw new HttpError(503, 'no database configured for metrics');
  const asked = url.searchParams.get('since') || '7d';
  const since = windowStart(asked);
  if (!since) throw new HttpError(400, `since: expected a duration like 7d, got "${asked}"`);
  const repo = url.searchParams.get('repo') || undefined;
  const figures = await buildReport(ctx.pool, { since, repo });
  sendHtml(res, 200, reportPage(figures, who));
}
