/**
 * Review time over HTTP (docs/audit.md, review minutes): the console's review
 * clock reports what it counted on the change on display, and a decision or
 * follow-up sent from the console carries the rest. The times are kept by
 * review/review-time.ts; a decision takes the decider's own total with it.
 */
import type { IncomingMessage } from 'node:http';
import { isReportableMs, type ReviewKey } from '../../review/review-time';
import type { ReviewTime, SessionStatus } from '../../workflows/api';
import { readableStatus } from '../access';
import { HttpError, parseJson, readBody, requireJsonRequest, type ServeContext } from '../http';

type Answer = [number, unknown];

/**
 * The session's changes a reviewer can have seen: each round's, and the one
 * waiting for approval (from the memo when no worker answered the query in time).
 */
export function changesOf(s: SessionStatus): string[] {
  const all = [
    ...(s.rounds ?? []).map((r) => r.change),
    s.pendingApproval?.change,
    s.unanswered?.pendingApproval?.change,
  ];
  return [...new Set(all.filter((c): c is string => typeof c === 'string'))];
}

/** The whole hash of the session's change that `asked` names (12+ characters of it), if any. */
export function changeNamed(s: SessionStatus, asked: unknown): string | undefined {
  if (typeof asked !== 'string' || !/^[0-9a-f]{12,64}$/.test(asked)) return undefined;
  return changesOf(s).find((c) => c.startsWith(asked));
}

/**
 * Adds what the console's clock counted, when the body carries it (`reviewMs`
 * on `change`). A database that fails is logged: the decision or follow-up
 * that carries the count still goes, unmeasured. So does a count on a change
 * that cannot be checked now: a status from the memo (no worker answered the
 * query in time, as on a busy machine) lists no rounds; refusing the decision
 * or follow-up for that would lose the reviewer's action over a measurement.
 */
export async function addConsoleTime(
  ctx: ServeContext,
  s: SessionStatus,
  who: string,
  body: { change?: unknown; reviewMs?: unknown },
): Promise<boolean> {
  if (body.reviewMs === undefined || body.reviewMs === 0 || !ctx.reviews) return false;
  if (!isReportableMs(body.reviewMs)) throw new HttpError(400, 'reviewMs: whole milliseconds, at most 15 minutes');
  const change = changeNamed(s, body.change);
  if (!change && s.unanswered) {
    ctx.log.warn(
      { sessionId: s.sessionId, change: body.change, unanswered: s.unanswered.message },
      "review time not recorded: the session's changes are not known now",
    );
    return false;
  }
  if (!change) throw new HttpError(409, `change: not a change of ${s.sessionId}`);
  return ctx.reviews.addConsole({ sessionId: s.sessionId, change, reviewer: who }, body.reviewMs).then(
    () => true,
    (err: unknown) => {
      ctx.log.error({ sessionId: s.sessionId, err }, 'review time not recorded');
      return false;
    },
  );
}

/** The decider's measured time on the change, for the decision; undefined: unmeasured. */
export async function reviewOf(ctx: ServeContext, key: ReviewKey): Promise<ReviewTime | undefined> {
  return ctx.reviews?.of(key).catch((err: unknown) => {
    ctx.log.error({ sessionId: key.sessionId, err }, 'review time not read: the decision goes unmeasured');
    return undefined;
  });
}

/** POST /api/sessions/:id/review-time `{change, reviewMs}`: the console's clock reports. */
export async function apiReviewTime(ctx: ServeContext, req: IncomingMessage, id: string, who: string): Promise<Answer> {
  requireJsonRequest(req);
  const body = parseJson(await readBody(req, 4_096));
  if (body === null || typeof body !== 'object') throw new HttpError(400, 'body must be a JSON object');
  if (!ctx.reviews) throw new HttpError(503, 'no database configured for review time');
  const recorded = await addConsoleTime(ctx, await readableStatus(ctx, id, who), who, body);
  return [200, { recorded }];
}
