/**
 * GET /metrics: the sessions by phase for Prometheus. Counts over every repo,
 * so a scraper needs what the other figures spanning every repo need: a
 * bearer token whose holder reads every repo (a role on "*" once the
 * identities file has roles; any token without them).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { requireReadsEverything } from '../access';
import { HttpError, identify, type ServeContext } from '../http';

export async function metricsScrape(ctx: ServeContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const who = await identify(req, ctx.identities);
  if (!who) throw new HttpError(401, 'a valid bearer token is required');
  requireReadsEverything(ctx, who);
  res.writeHead(200, { 'content-type': ctx.sessionMetrics.contentType, 'cache-control': 'no-store' });
  res.end(await ctx.sessionMetrics.metrics());
}
