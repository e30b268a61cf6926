/**
 * POST /webhooks/linear: an Issue given drydock's label (or assigned to
 * drydock) starts a session of the repo bound to its team, for the person
 * who did it; the session comments back on the issue. The Linear-Signature is
 * checked before anything is parsed, the payload validated, and a delivery
 * older than a minute refused; the same signed body is the same session.
 */
import type { IncomingMessage } from 'node:http';
import { LinearIssues } from '../../linear/client';
import {
  issueEvent,
  LINEAR_REPLAY_WINDOW_MS,
  linearSessionId,
  linearSignatureMatches,
  linearTask,
  routeIssueEvent,
} from '../../linear/webhook';
import { header, HttpError, parseJson, readBody, type ServeContext } from '../http';
import { boundRepo, startFromChat } from './triggered';

type Answer = [number, unknown];

export async function linearWebhook(ctx: ServeContext, req: IncomingMessage): Promise<Answer> {
  const secret = ctx.config.DRYDOCK_LINEAR_WEBHOOK_SECRET;
  if (!secret) throw new HttpError(503, 'Linear webhooks are not configured (DRYDOCK_LINEAR_WEBHOOK_SECRET)');
  const body = await readBody(req, ctx.config.DRYDOCK_HTTP_MAX_BODY);
  if (!linearSignatureMatches(secret, body, header(req, 'linear-signature'))) {
    throw new HttpError(401, 'missing or wrong Linear-Signature');
  }
  // Not signed: for the logs only.
  const delivery = header(req, 'linear-delivery') ?? '';
  const payload = parseJson(body);
  if (payload?.type !== 'Issue') return [202, { ignored: `${String(payload?.type)} events are not read` }];
  const parsed = issueEvent.safeParse(payload);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new HttpError(422, `Issue payload: ${issue.path.join('.')}: ${issue.message}`);
  }
  const event = parsed.data;
  if (Math.abs(Date.now() - event.webhookTimestamp) > LINEAR_REPLAY_WINDOW_MS) {
    throw new HttpError(401, 'webhookTimestamp is more than a minute away: a replay, or a clock that is off');
  }
  const trigger = routeIssueEvent(event, ctx.config.DRYDOCK_LINEAR_LABEL, ctx.config.DRYDOCK_LINEAR_ASSIGNEE);
  if (trigger.kind === 'ignore') return [202, { ignored: trigger.reason }];
  const { issue } = trigger;
  const refuse = async (status: number, reason: string): Promise<never> => {
    ctx.log.info({ issue: issue.identifier, delivery, reason }, 'Linear webhook refused');
    await answerOnLinear(ctx, issue.id, `refused/${linearSessionId(issue.identifier, body)}`, reason);
    throw new HttpError(status, reason);
  };
  const person = trigger.actor ? ctx.identities.directory.personOf('linear', trigger.actor) : undefined;
  if (!person)
    return refuse(403, `Linear user ${trigger.actor ?? '(unknown)'} is not anyone in drydock's identities file`);
  const repo = boundRepo(ctx.config.DRYDOCK_LINEAR_TEAMS, issue.team.key);
  if (!repo) return refuse(422, `no repository is bound to Linear team ${issue.team.key} (DRYDOCK_LINEAR_TEAMS)`);
  const sessionId = linearSessionId(issue.identifier, body);
  const started = await startFromChat(
    ctx,
    {
      sessionId,
      repo,
      task: linearTask(issue),
      requestedBy: person,
      source: `Linear ${issue.identifier} ${trigger.why}`,
      notify: { linear: { issue: issue.id, identifier: issue.identifier } },
    },
    delivery || sessionId,
  );
  if (!started.ok) return refuse(started.status ?? 422, started.reason);
  return [202, { sessionId }];
}

/** Says on the issue why nothing started, once per delivery. */
async function answerOnLinear(ctx: ServeContext, issue: string, key: string, reason: string): Promise<void> {
  const apiKey = ctx.config.DRYDOCK_LINEAR_API_KEY;
  if (!apiKey) return;
  try {
    await new LinearIssues({ apiKey, apiUrl: ctx.config.DRYDOCK_LINEAR_API_URL }).commentOnce(
      issue,
      key,
      `drydock did not start a session: ${reason}.`,
    );
  } catch (err) {
    ctx.log.warn({ issue, err }, 'could not answer on Linear');
  }
}
