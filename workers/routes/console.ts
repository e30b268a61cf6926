/**
 * The review console's pages: sign-in and sign-out, the session list, a
 * session, its artifacts and the metrics. The HTML itself is in ../console.
 */
import { randomBytes } from 'node:crypto';
import { readdir, readFile, stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import path from 'node:path';
import { buildReport, windowStart } from '../../store/pilot-report';
import { listSessions } from '../../platform/sessions';
import { sessionLink } from '../../platform/temporal';
import { OUTCOMES, type SessionStatus } from '../../workflows/api';
import {
  changedFilesOf,
  listPage,
  liveVersion,
  reportPage,
  sessionLive,
  sessionPage,
  type LiveExtras,
  type ReviewFacts,
} from '../console';
import { lastSeenRound, roundDiffName } from '../../review/rounds';
import { testCasesOf } from '../../review/test-cases';
import { auditRowsOf, whatRanOf } from '../../review/what-ran';
import { readableRepos, readableStatus, requireReadableId, requireReadsEverything, stillReads } from '../access';
import { consoleUrl, HttpError, sendHtml, statusOr404, type ServeContext } from '../http';

/** GET /: the newest sessions (of the repos `who` may read). */
export async function consoleList(ctx: ServeContext, res: ServerResponse, who: string): Promise<void> {
  const rows = await listSessions(ctx.client, { limit: 100, within: await readableRepos(ctx, who) });
  sendHtml(res, 200, listPage(rows, who));
}

/** GET /sessions/:id: status, diff and the approval buttons. */
export async function consoleSession(ctx: ServeContext, res: ServerResponse, id: string, who: string): Promise<void> {
  const s = await readableStatus(ctx, id, who);
  const nonce = randomBytes(16).toString('base64');
  const live = await liveExtras(ctx, s, who);
  sendHtml(res, 200, sessionPage(s, { ...live, who, nonce, temporalLink: sessionLink(ctx.config, id) }), nonce);
}

/** How often the events stream looks at the session, and how long one stream lasts (the browser reconnects). */
const LIVE_POLL_MS = 1_000;
const LIVE_STREAM_MS = 10 * 60_000;
const KEEP_ALIVE_MS = 15_000;

/**
 * GET /sessions/:id/events: server-sent events. `update` carries the phase and
 * the page's live part whenever it changed (its id is the part's version: the
 * browser's reconnect names the last it got in `Last-Event-ID`, the page's first
 * connect in `?seen=`, and an update with that version is not sent); `end` when
 * the session has ended. The stream closes without a word once its token no
 * longer reads the session (the browser's reconnect then meets the connect-time check).
 */
export async function consoleEvents(
  ctx: ServeContext,
  req: IncomingMessage,
  res: ServerResponse,
  id: string,
  who: string,
): Promise<void> {
  await readableStatus(ctx, id, who);
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', 'x-accel-buffering': 'no' });
  res.flushHeaders(); // the stream is open now, though its first update may never come (the page has it)
  let open = true;
  req.on('close', () => (open = false));
  const send = (event: string, data: unknown, id?: string) =>
    res.write(`${id ? `id: ${id}\n` : ''}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  let seen = pageSeen(req);
  let last = '';
  let wrote = Date.now();
  for (const until = Date.now() + LIVE_STREAM_MS; open && Date.now() < until;) {
    const s = await statusOr404(ctx.client, id).catch(() => undefined);
    if (s) {
      const html = sessionLive(s, await liveExtras(ctx, s, who), who);
      const version = html === last ? undefined : liveVersion(html);
      if (version && version !== seen) {
        // Read rights are checked again before each update: a revoked token or role ends the stream.
        if (!(await stillReads(ctx, req, who, s.repo))) break;
        send('update', { phase: s.phase, html }, version);
        wrote = Date.now();
      }
      last = html;
      seen = undefined;
      if ((OUTCOMES as readonly string[]).includes(s.phase)) {
        send('end', { phase: s.phase });
        break;
      }
    }
    if (Date.now() - wrote > KEEP_ALIVE_MS) {
      res.write(': keep-alive\n\n');
      wrote = Date.now();
    }
    await new Promise((r) => setTimeout(r, LIVE_POLL_MS));
  }
  res.end();
}

/** The live part's version the page shows (a reconnect's `Last-Event-ID`, else the page's `?seen=`), if well formed. */
function pageSeen(req: IncomingMessage): string | undefined {
  const named = req.headers['last-event-id'] ?? new URL(req.url ?? '/', 'http://console').searchParams.get('seen');
  return typeof named === 'string' && /^[\w-]{22}$/.test(named) ? named : undefined;
}

/**
 * What the page shows besides the status: the whole diff and its summary, the
 * interdiff since the round this reviewer saw last, and while a step runs the
 * tail of its streamed output (the newest log of the session).
 */
async function liveExtras(ctx: ServeContext, s: SessionStatus, who: string): Promise<LiveExtras> {
  const diff = s.agent?.diff ? (await ctx.artifacts.get(s.sessionId, 'change.diff'))?.toString('utf8') : undefined;
  const stepRunning = s.timeline.some((t) => t.ok === undefined && t.name.startsWith('step'));
  return {
    diff,
    interdiff: await interdiffOf(ctx, s, who),
    facts: s.agent?.changed ? await reviewFacts(ctx, s, diff) : undefined,
    running: stepRunning ? await newestLogTail(ctx, s.sessionId) : undefined,
    server: consoleUrl(ctx.config),
    serviceLogs: await serviceLogsOf(ctx, s.sessionId),
  };
}

/** The services' logs the session's last checkpoint kept (sandbox/activities/service-data.ts), by name. */
async function serviceLogsOf(ctx: ServeContext, sessionId: string): Promise<LiveExtras['serviceLogs']> {
  const names = await readdir(path.join(ctx.artifacts.pathOf(sessionId), 'services')).catch(() => [] as string[]);
  const logs = await Promise.all(
    names
      .filter((f) => f.endsWith('.log'))
      .sort()
      .map(async (f) => {
        const ref = `${sessionId}/services/${f}`;
        const text = (await ctx.artifacts.get(sessionId, `services/${f}`))?.toString('utf8') ?? '';
        return { name: f.slice(0, -'.log'.length), ref, text };
      }),
  );
  return logs.length ? logs : undefined;
}

/** The summary's facts: the files of the diff, what ran (the audit trail), each test (the JUnit reports kept). */
async function reviewFacts(ctx: ServeContext, s: SessionStatus, diff: string | undefined): Promise<ReviewFacts> {
  const rows = ctx.pool ? await auditRowsOf(ctx.pool, s.sessionId).catch(() => []) : [];
  const reports = await Promise.all(
    (s.verification?.report?.files ?? []).map(async (f) =>
      (await ctx.artifacts.get(s.sessionId, `junit/${f.replace(/\//g, '_')}`))?.toString('utf8'),
    ),
  );
  return {
    files: diff ? changedFilesOf(diff) : [],
    ran: whatRanOf(rows, s, diff),
    cases: testCasesOf(reports.filter((r): r is string => r !== undefined)),
  };
}

/** A later round: its change since the round this reviewer saw last (else the one before it). */
async function interdiffOf(ctx: ServeContext, s: SessionStatus, who: string): Promise<LiveExtras['interdiff']> {
  const round = s.round ?? 1;
  if (round < 2 || !s.agent?.changed) return undefined;
  const seen = (await ctx.reviews?.seenBy(s.sessionId, who).catch(() => [])) ?? [];
  const last = lastSeenRound(s.rounds ?? [], round, seen);
  const since = last ?? round - 1;
  const diff = (await ctx.artifacts.get(s.sessionId, roundDiffName(round, since)))?.toString('utf8');
  return { round, since, seen: last !== undefined, diff };
}

async function newestLogTail(ctx: ServeContext, sessionId: string): Promise<string | undefined> {
  const dir = ctx.artifacts.pathOf(sessionId);
  const logs = await readdir(dir).catch(() => [] as string[]);
  const dated = await Promise.all(
    logs.filter((f) => f.endsWith('.log')).map(async (f) => ({ f, at: (await stat(path.join(dir, f))).mtimeMs })),
  );
  const newest = dated.sort((a, b) => b.at - a.at)[0];
  if (!newest) return undefined;
  const text = (await readFile(path.join(dir, newest.f))).subarray(-4096).toString('utf8');
  return text || undefined;
}

/** The console's own scripts (./console/assets), by name; nothing else is served from there. */
const SCRIPTS = [
  'attempts.js',
  'desktop.js',
  'editor.js',
  'notes.js',
  'review-clock.js',
  'session.js',
  'terminal.js',
  'tokens.js',
];

/** GET /assets/console/<name>.js: a script of the console's pages (allowed by the page's nonce). */
export async function consoleScript(res: ServerResponse, name: string): Promise<void> {
  if (!SCRIPTS.includes(name)) throw new HttpError(404, `no script ${name}`);
  const js = await readFile(path.join(__dirname, '..', 'console', 'assets', name));
  res.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8', 'cache-control': 'no-cache' });
  res.end(js);
}

/** GET /assets/diff2html.css: the diff renderer's stylesheet, from the project (no CDN). */
export async function diffStylesheet(res: ServerResponse): Promise<void> {
  const css = await readFile(require.resolve('diff2html/bundles/css/diff2html.min.css'));
  res.writeHead(200, { 'content-type': 'text/css; charset=utf-8', 'cache-control': 'public, max-age=86400' });
  res.end(css);
}

/** GET /artifacts/:ref: screenshots, videos and logs from the artifact store, confined to it (`<session>/<name>`). */
export async function artifact(ctx: ServeContext, res: ServerResponse, ref: string, who: string): Promise<void> {
  let file: string;
  try {
    file = ctx.artifacts.fileOf(ref);
  } catch {
    throw new HttpError(400, 'bad artifact reference');
  }
  await requireReadableId(ctx, who, ref.split('/')[0]!).catch((err: unknown) => {
    throw err instanceof HttpError && err.status === 404 ? new HttpError(404, `no artifact ${ref}`) : err;
  });
  const content = await readFile(file).catch(() => undefined);
  if (!content) throw new HttpError(404, `no artifact ${ref}`);
  const type = file.endsWith('.png')
    ? 'image/png'
    : file.endsWith('.webm')
      ? 'video/webm'
      : 'text/plain; charset=utf-8';
  res.writeHead(200, { 'content-type': type, 'x-content-type-options': 'nosniff', 'cache-control': 'private' });
  res.end(content);
}

/** GET /report?since&repo: the pilot report (the figures of `drydock report`). */
export async function report(ctx: ServeContext, res: ServerResponse, url: URL, who: string): Promise<void> {
  requireReadsEverything(ctx, who);
  if (!ctx.pool) throw new HttpError(503, 'no database configured for metrics');
  const asked = url.searchParams.get('since') || '7d';
  const since = windowStart(asked);
  if (!since) throw new HttpError(400, `since: expected a duration like 7d, got "${asked}"`);
  const repo = url.searchParams.get('repo') || undefined;
  const figures = await buildReport(ctx.pool, { since, repo });
  sendHtml(res, 200, reportPage(figures, who));
}
