/**
 * The JSON API under /api/sessions: list, start, status, decide and follow-ups. The
 * caller is already identified (bearer token or console cookie).
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { WorkflowNotFoundError, WorkflowUpdateFailedError } from '@temporalio/client';
import { isSafeSessionId } from '../../store/artifacts';
import { followupTarget } from '../../platform/attempts';
import {
  FollowupRefused,
  listSessions,
  queuedOf,
  sendFollowup,
  SessionExists,
  startSession,
} from '../../platform/sessions';
import { parseComments, reviewFollowup } from '../../review/line-comments';
import { GATED_ACTIONS, decide, type DecideInput } from '../../workflows/api';
import { parseSessionInput, type SessionInputDraft } from '../../workflows/input';
import { CHANGE_HASH, tooSoonToApprove } from '../../workflows/rules/policy';
import { consoleUrl, header, HttpError, parseJson, readBody, requireJsonRequest, type ServeContext } from '../http';
import {
  readableRepos,
  readableStatus,
  requireDecider,
  requireReadableId,
  requireRole,
  steeringRefused,
} from '../access';
import { addConsoleTime, changeNamed, reviewOf } from './review';

type Answer = [number, unknown];

/**
 * Session ids drydock serve gives triggered sessions (github/webhooks.ts,
 * workers/routes/webhooks.ts, linear/webhook.ts, slack/requests.ts): an API
 * caller's id there would absorb a later delivery's session.
 */
const TRIGGER_ID_PREFIXES = ['gh-', 'ci-', 'linear-', 'slack-'];

/**
 * What an API caller may not choose: the fields drydock serve sets for a
 * triggered session (`trigger` makes the worker read and comment on that
 * GitHub repository with its own identity; `notify` posts to Slack or
 * Linear), and an id in a trigger's namespace.
 */
export function refuseServeOnlyChoices(body: Record<string, unknown>): void {
  for (const field of ['trigger', 'notify']) {
    if (body[field] !== undefined) throw new HttpError(422, `${field}: set by drydock serve, not by an API caller`);
  }
  const id = body.sessionId;
  if (id === undefined) return;
  if (typeof id !== 'string' || !isSafeSessionId(id)) {
    throw new HttpError(422, 'sessionId: letters, digits, "_" and "-" only');
  }
  // "." joins the ids drydock makes for a session's attempts and a pilot's sessions (`<id>.<n>`):
  // a caller who made one first would have it adopted, or stop the attempts from starting.
  if (id.includes('.')) {
    throw new HttpError(422, `sessionId: "." is for the ids of attempts and pilots' sessions; use "-" or "_"`);
  }
  const reserved = TRIGGER_ID_PREFIXES.find((p) => id.toLowerCase().startsWith(p));
  if (reserved) throw new HttpError(422, `sessionId: "${reserved}" ids are the triggered sessions' own`);
}

/** GET /api/sessions?phase&repo&limit; `repo` as "owner/name" or a URL. Only the repos `who` may read. */
export async function apiList(ctx: ServeContext, url: URL, who: string): Promise<unknown> {
  let repo = url.searchParams.get('repo') ?? undefined;
  if (repo && !repo.includes('://')) {
    const found = await ctx.repos.byName(repo);
    if (!found.ok) throw new HttpError(422, found.reason);
    repo = found.repo.url;
  }
  const limit = Number(url.searchParams.get('limit') ?? 50);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new HttpError(400, 'limit: 1 to 1000');
  try {
    const phase = url.searchParams.get('phase') ?? undefined;
    return await listSessions(ctx.client, { phase, repo, limit, within: await readableRepos(ctx, who) });
  } catch (err) {
    if (err instanceof RangeError) throw new HttpError(400, err.message);
    throw err;
  }
}

/** What a refused start is told to wait before it asks again (seconds): about a queued session's recheck. */
export const QUEUE_RETRY_AFTER_S = 30;

/**
 * Why a new session of `repo` is refused, when DRYDOCK_MAX_QUEUED_PER_REPO of
 * its sessions are queued already (the API answers 429, Slack and Linear say it).
 */
export async function queueBound(ctx: ServeContext, repo: { name: string; url: string }): Promise<string | undefined> {
  const bound = ctx.config.DRYDOCK_MAX_QUEUED_PER_REPO;
  if (bound === 0) return undefined;
  // Without an answer from visibility the start goes ahead: the hosts' admission still bounds what runs.
  const queued = await queuedOf(ctx.client, repo.url).catch((err: unknown) => {
    ctx.log.warn({ err, repo: repo.name }, 'the queue bound was not checked: visibility did not answer');
    return 0;
  });
  if (queued < bound) return undefined;
  return `${bound} sessions of ${repo.name} are queued for a sandbox already (DRYDOCK_MAX_QUEUED_PER_REPO); try again later`;
}

async function refuseOverBound(ctx: ServeContext, repo: { name: string; url: string }): Promise<void> {
  const refused = await queueBound(ctx, repo);
  if (refused) throw new HttpError(429, refused, { 'retry-after': String(QUEUE_RETRY_AFTER_S) });
}

/** POST /api/sessions: a session input, with `repo` as "owner/name" or {name|url, ref}; only repos drydock serves. */
export async function apiStart(ctx: ServeContext, req: IncomingMessage, who: string): Promise<Answer> {
  requireJsonRequest(req);
  const body = parseJson(await readBody(req, ctx.config.DRYDOCK_HTTP_MAX_BODY));
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new HttpError(400, 'body must be a JSON object');
  }
  refuseServeOnlyChoices(body);
  const { sessionId: requestedId, repo, ...rest } = body;
  const spec = typeof repo === 'string' ? { name: repo } : (repo ?? {});
  const found = await (spec.name !== undefined ? ctx.repos.byName(spec.name) : ctx.repos.byUrl(spec.url));
  if (!found.ok) throw new HttpError(422, found.reason);
  requireRole(ctx, who, found.repo.name, 'requester');
  const input = {
    ...rest,
    repo: { url: found.repo.url, ...(spec.ref ? { ref: spec.ref } : {}) },
    requestedBy: who,
  };
  const parsed = parseSessionInput(input);
  if (!parsed.ok) throw new HttpError(422, `invalid session input: ${parsed.problems.join('; ')}`);
  await refuseOverBound(ctx, found.repo);
  const sessionId = requestedId ?? `api-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
  try {
    await startSession(ctx.client, input as SessionInputDraft, { sessionId, taskQueue: ctx.config.DRYDOCK_TASK_QUEUE });
  } catch (err) {
    if (err instanceof SessionExists) throw new HttpError(409, err.message);
    throw err;
  }
  ctx.log.info({ sessionId, by: who, repo: found.repo.name }, 'API started a session');
  return [201, { sessionId, url: `${consoleUrl(ctx.config)}/sessions/${encodeURIComponent(sessionId)}` }];
}

/** POST /api/sessions/:id/decide `{decision, action?, change?, comment?}`; the decider is the token's owner. */
export async function apiDecide(ctx: ServeContext, req: IncomingMessage, id: string, who: string): Promise<Answer> {
  requireJsonRequest(req);
  const body = parseJson(await readBody(req, ctx.config.DRYDOCK_HTTP_MAX_BODY));
  if (body === null || typeof body !== 'object') throw new HttpError(400, 'body must be a JSON object');
  if (body.by !== undefined && body.by !== who) {
    throw new HttpError(403, `you are ${who}; a decision is recorded as its sender`);
  }
  const current = await readableStatus(ctx, id, who);
  await requireDecider(ctx, who, current, body.decision === 'approve' ? 'approve' : 'reject');
  const action = body.action ?? current.pendingApproval?.action;
  if (action === undefined) throw new HttpError(409, `${id} is not waiting for an approval (${current.phase})`);
  // An approval names what was reviewed: without it, a follow-up or an attach could swap the change first.
  if (body.decision === 'approve' && body.change === undefined) {
    throw new HttpError(400, 'change: the change you approve (its whole hash, pendingApproval.change)');
  }
  if (body.change !== undefined && (typeof body.change !== 'string' || !CHANGE_HASH.test(body.change))) {
    throw new HttpError(400, 'change: the whole hash of the change (64 hex, pendingApproval.change), not a prefix');
  }
  if (!GATED_ACTIONS.includes(action)) throw new HttpError(400, `action: one of ${GATED_ACTIONS.join(', ')}`);
  // The console (a cookie, no bearer token) approves only a change that has been on display a while.
  if (body.decision === 'approve' && header(req, 'authorization') === undefined) {
    const early = tooSoonToApprove(current, Date.now(), ctx.config.DRYDOCK_APPROVAL_SETTLE);
    if (early) throw new HttpError(409, early);
  }
  // The console's last count first; then the decider's own total goes with the decision (none: unmeasured).
  const onDisplay = changeNamed(current, body.change) ?? current.pendingApproval?.change;
  await addConsoleTime(ctx, current, who, body);
  const review = onDisplay ? await reviewOf(ctx, { sessionId: id, change: onDisplay, reviewer: who }) : undefined;
  const input: DecideInput = {
    decision: body.decision,
    action,
    by: who,
    ...(body.comment !== undefined ? { comment: body.comment } : {}),
    ...(body.change !== undefined ? { change: body.change } : {}),
    ...(review ? { review } : {}),
  };
  try {
    const decision = await ctx.client.workflow.getHandle(id).executeUpdate(decide, { args: [input] });
    ctx.log.info({ sessionId: id, by: who, decision: decision.decision, action }, 'decision accepted');
    return [200, decision];
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError) {
      throw new HttpError(409, (err.cause as Error | undefined)?.message ?? err.message);
    }
    if (err instanceof WorkflowNotFoundError) throw new HttpError(404, `no session ${id}`);
    throw err;
  }
}

/**
 * What a follow-up carries: `steps` as they are; else the line `comments` and
 * the `text` as one review (review/line-comments.ts): words for a model or CLI
 * agent, steps for a script agent (a command, or JSON steps).
 */
function followupContent(kind: 'script' | 'openai' | 'cli', body: any): { text?: string; steps?: unknown[] } {
  if (body.steps !== undefined) return { steps: body.steps };
  if (body.text !== undefined && typeof body.text !== 'string') throw new HttpError(400, 'text: a string');
  const comments = parseComments(body.comments);
  if (!comments.ok) throw new HttpError(400, comments.reason);
  if (kind !== 'script' && !comments.comments.length) return { text: body.text };
  const review = reviewFollowup(kind, comments.comments, body.text ?? '');
  if (!review.ok) throw new HttpError(400, review.reason);
  return 'text' in review ? { text: review.text } : { steps: review.steps };
}

/**
 * POST /api/sessions/:id/followups `{text}` (or `{steps}` for a script agent, or
 * `{comments: [{path, line, body}], text?}`; with `change` and `reviewMs` from the console);
 * the sender is the token's owner, who must be an approver or the requester.
 */
export async function apiFollowup(ctx: ServeContext, req: IncomingMessage, id: string, who: string): Promise<Answer> {
  requireJsonRequest(req);
  const body = parseJson(await readBody(req, ctx.config.DRYDOCK_HTTP_MAX_BODY));
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new HttpError(400, 'body must be a JSON object');
  }
  if (body.by !== undefined && body.by !== who) {
    throw new HttpError(403, `you are ${who}; a follow-up is recorded as its sender`);
  }
  await requireReadableId(ctx, who, id);
  // Parallel attempts: the follow-up is the picked attempt's.
  const target = await followupTarget(ctx.client, id).catch((err: unknown) => {
    throw err instanceof WorkflowNotFoundError ? new HttpError(404, `no session ${id}`) : err;
  });
  if (typeof target !== 'string') throw new HttpError(409, target.refused);
  const current = await readableStatus(ctx, target, who);
  const refused = await steeringRefused(ctx, who, current);
  if (refused) throw new HttpError(403, refused);
  await addConsoleTime(ctx, current, who, body);
  const content = followupContent(current.agent?.kind ?? 'script', body);
  try {
    const accepted = await sendFollowup(ctx.client, target, { by: who, ...content });
    ctx.log.info({ sessionId: id, by: who, round: accepted.round }, 'follow-up accepted');
    return [202, accepted];
  } catch (err) {
    if (err instanceof FollowupRefused) throw new HttpError(409, err.message);
    if (err instanceof WorkflowNotFoundError) throw new HttpError(404, `no session ${id}`);
    throw err;
  }
}
