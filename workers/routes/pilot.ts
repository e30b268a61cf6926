/**
 * The pilot's pages and API (docs/pilot.md): pilots and their reports
 * (HTML, Markdown, CSV, JSON), figures over time (HTML with charts, CSV),
 * and parallel attempts side by side with the pick (POST /api/sessions/:id/pick,
 * which the console's attempts page calls too). The HTML itself is in ../console/pilot.ts.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { WorkflowNotFoundError } from '@temporalio/client';
import { buildPilotReport, pilotReportCsv, pilotReportMarkdown } from '../../figures/pilot-report';
import { buildFigures, figuresCsv, type Dimension, type Period } from '../../figures/trends';
import { attemptsOf, pickAttempt, PickRefused, pilotOf } from '../../platform/attempts';
import { windowStart } from '../../store/pilot-report';
import { PILOT_WORKFLOW_TYPE, type PickInput } from '../../workflows/api';
import { CHANGE_HASH } from '../../workflows/rules/policy';
import { attemptsPage, pilotListPage, pilotPage, trendsPage } from '../console/pilot';
import { requireDecider, requireReadable, requireReadsEverything } from '../access';
import { HttpError, parseJson, readBody, requireJsonRequest, sendHtml, sendJson, type ServeContext } from '../http';

type Route = (
  ctx: ServeContext,
  req: IncomingMessage,
  res: ServerResponse,
  at: { url: URL; who: string; params: string[] },
) => Promise<void>;

/** The console's pages of this module by method and path; undefined: not one of them. */
export function pilotRoute(method: string, path: string): { route: Route; params: string[] } | undefined {
  for (const [m, pattern, route] of ROUTES) {
    const match = m === method ? pattern.exec(path) : null;
    if (match) return { route, params: match.slice(1).map(decodeURIComponent) };
  }
  return undefined;
}

/** Serves `req` if it is one of this module's; false when it is not. */
export async function servePilotRoute(
  ctx: ServeContext,
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  who: string,
): Promise<boolean> {
  const found = pilotRoute(req.method ?? 'GET', url.pathname);
  if (!found) return false;
  await found.route(ctx, req, res, { url, who, params: found.params });
  return true;
}

const pool = (ctx: ServeContext) => {
  if (!ctx.pool) throw new HttpError(503, 'no database configured for metrics');
  return ctx.pool;
};

async function report(ctx: ServeContext, name: string) {
  return buildPilotReport(pool(ctx), { pilot: name, sandboxMinutePrice: ctx.config.DRYDOCK_SANDBOX_MINUTE_PRICE });
}

const TYPES = { md: 'text/markdown', csv: 'text/csv', json: 'application/json' } as const;

function download(res: ServerResponse, name: string, ext: keyof typeof TYPES, body: string): void {
  res.writeHead(200, {
    'content-type': `${TYPES[ext]}; charset=utf-8`,
    'content-disposition': `attachment; filename="${name.replace(/[^a-z0-9.-]/gi, '_')}.${ext}"`,
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
  });
  res.end(body);
}

function figuresQuery(ctx: ServeContext, url: URL) {
  const since = windowStart(url.searchParams.get('since') || '30d');
  if (!since) throw new HttpError(400, 'since: expected a duration like 30d');
  const by = url.searchParams.get('by') || 'repo';
  const period = url.searchParams.get('period') || 'day';
  if (!['repo', 'agent', 'requester'].includes(by)) throw new HttpError(400, 'by: repo, agent or requester');
  if (!['day', 'week'].includes(period)) throw new HttpError(400, 'period: day or week');
  return buildFigures(pool(ctx), {
    since,
    by: by as Dimension,
    period: period as Period,
    sandboxMinutePrice: ctx.config.DRYDOCK_SANDBOX_MINUTE_PRICE,
  });
}

/** The pilot's live status, while Temporal keeps its workflow. */
const liveStatus = (ctx: ServeContext, name: string) =>
  pilotOf(ctx.client, name).catch((err) => {
    if (err instanceof WorkflowNotFoundError) return undefined;
    throw err;
  });

/** The attempts of `id`: 404 when there are none, or `who` may not read their repo. */
async function readableAttempts(ctx: ServeContext, id: string, who: string) {
  const attempts = await attemptsOf(ctx.client, id).catch((err: unknown) => {
    throw err instanceof WorkflowNotFoundError ? new HttpError(404, `no session ${id}`) : err;
  });
  await requireReadable(ctx, who, id, attempts);
  return attempts;
}

/** A pick is an approval of the attempt's change: the approver role, and not one's own request (roles). */
async function pick(ctx: ServeContext, id: string, input: PickInput) {
  await requireDecider(ctx, input.by, () => readableAttempts(ctx, id, input.by), 'approve');
  try {
    return await pickAttempt(ctx.client, id, input);
  } catch (err) {
    if (err instanceof PickRefused) throw new HttpError(409, err.message);
    if (err instanceof WorkflowNotFoundError) throw new HttpError(404, `no session ${id}`);
    throw err;
  }
}

const ROUTES: [string, RegExp, Route][] = [
  [
    'GET',
    /^\/pilots$/,
    async (ctx, _req, res, { who }) => {
      requireReadsEverything(ctx, who);
      const pilots: { name: string; status: string; started: string }[] = [];
      for await (const wf of ctx.client.workflow.list({
        query: `WorkflowType = '${PILOT_WORKFLOW_TYPE}'`,
        pageSize: 100,
      })) {
        pilots.push({
          name: wf.workflowId.replace(/^pilot-/, ''),
          status: wf.status.name,
          started: wf.startTime.toISOString(),
        });
        if (pilots.length >= 100) break;
      }
      sendHtml(res, 200, pilotListPage(pilots, who));
    },
  ],
  [
    'GET',
    /^\/pilots\/([a-z0-9-]+)$/,
    async (ctx, _req, res, { who, params: [name] }) => {
      requireReadsEverything(ctx, who);
      sendHtml(res, 200, pilotPage(await report(ctx, name), await liveStatus(ctx, name), who));
    },
  ],
  [
    'GET',
    /^\/pilots\/([a-z0-9-]+)\/report\.(md|csv|json)$/,
    async (ctx, _req, res, { who, params: [name, extension] }) => {
      requireReadsEverything(ctx, who);
      const ext = extension as keyof typeof TYPES;
      const r = await report(ctx, name);
      const body =
        ext === 'md' ? pilotReportMarkdown(r) : ext === 'csv' ? pilotReportCsv(r) : JSON.stringify(r, null, 2);
      download(res, `pilot-${name}`, ext, body);
    },
  ],
  [
    'GET',
    /^\/trends$/,
    async (ctx, _req, res, { url, who }) => {
      requireReadsEverything(ctx, who);
      sendHtml(res, 200, trendsPage(await figuresQuery(ctx, url), url.searchParams, who));
    },
  ],
  [
    'GET',
    /^\/trends\.csv$/,
    async (ctx, _req, res, { url, who }) => {
      requireReadsEverything(ctx, who);
      download(res, 'trends', 'csv', figuresCsv(await figuresQuery(ctx, url)));
    },
  ],
  [
    'GET',
    /^\/attempts\/([^/]+)$/,
    async (ctx, _req, res, { who, params: [id] }) => {
      const nonce = randomBytes(16).toString('base64');
      sendHtml(res, 200, attemptsPage(await readableAttempts(ctx, id, who), who, nonce), nonce);
    },
  ],
  [
    // The console's pick too (its script): JSON only, so no form on another site can send one with the cookie.
    'POST',
    /^\/api\/sessions\/([^/]+)\/pick$/,
    async (ctx, req, res, { who, params: [id] }) => {
      requireJsonRequest(req);
      const body = parseJson(await readBody(req, ctx.config.DRYDOCK_HTTP_MAX_BODY));
      if (body === null || typeof body !== 'object') throw new HttpError(400, 'body must be a JSON object');
      if (body.by !== undefined && body.by !== who)
        throw new HttpError(403, `you are ${who}; a pick is recorded as its sender`);
      if (typeof body.change !== 'string' || !CHANGE_HASH.test(body.change)) {
        throw new HttpError(400, "change: the attempt's whole change hash (64 hex, its progress.pending.change)");
      }
      const input: PickInput = { attempt: body.attempt, by: who, change: body.change };
      if (typeof body.comment === 'string') input.comment = body.comment;
      sendJson(res, 200, await pick(ctx, id, input));
    },
  ],
  [
    'GET',
    /^\/api\/pilots\/([a-z0-9-]+)$/,
    async (ctx, _req, res, { who, params: [name] }) => {
      requireReadsEverything(ctx, who);
      sendJson(res, 200, { status: await liveStatus(ctx, name), report: await report(ctx, name) });
    },
  ],
];
