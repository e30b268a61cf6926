/**
 * Starting a session of a repo's agent for a request from Slack or Linear:
 * the same settings a GitHub trigger runs (DRYDOCK_TRIGGER_SESSION), the
 * requester's identity, and where the session reports back. Started once per
 * signed request: a retry or a redelivery finds the same session. Refused, with
 * the reason said in the chat, when the repo's queue is at its bound.
 */
import type { StartTrigger } from '../../github/webhooks';
import { sessionState, startSession } from '../../platform/sessions';
import { parseSessionInput, type NotifyTargets } from '../../workflows/input';
import type { ServeContext } from '../http';
import { recordDelivery, triggeredInput } from './webhooks';
import { queueBound } from './api';

export interface ChatRequest {
  sessionId: string;
  /** "owner/name" of a registered repo. */
  repo: string;
  task: string;
  /** A person's name from the identities file. */
  requestedBy: string;
  /** For the log and the audit trail: where it came from. */
  source: string;
  notify: NotifyTargets;
}

/** The repo and its configured agent, or why there is none (or why the requester may not start one: 403). */
export async function startFromChat(
  ctx: ServeContext,
  request: ChatRequest,
  delivery: string,
): Promise<{ ok: true } | { ok: false; reason: string; status?: 403 }> {
  const found = await ctx.repos.byName(request.repo);
  if (!found.ok) return { ok: false, reason: found.reason };
  // The roles first: only someone who may start work hears how this repo is configured.
  const refused = ctx.identities.roles.refusal(request.requestedBy, found.repo.name, 'requester');
  if (refused) return { ok: false, reason: refused, status: 403 };
  const configured = ctx.repos.triggerSession(found.repo);
  if (!configured.ok) return { ok: false, reason: configured.reason };
  const trigger: StartTrigger = { kind: 'start', ...request, repo: found.repo.name };
  const input = { ...triggeredInput(trigger, found.repo, configured.session), notify: request.notify };
  const parsed = parseSessionInput(input);
  if (!parsed.ok) return { ok: false, reason: `cannot start a session: ${parsed.problems.join('; ')}` };
  // A redelivery of a request whose session started finds it, whatever the queue holds now.
  const full = await queueBound(ctx, found.repo);
  if (full && (await sessionState(ctx.client, request.sessionId)).state === 'missing')
    return { ok: false, reason: full };
  await startSession(ctx.client, input, {
    sessionId: request.sessionId,
    taskQueue: ctx.config.DRYDOCK_TASK_QUEUE,
    ifExists: 'reuse',
  });
  await recordDelivery(ctx, trigger, delivery, found.repo.name);
  ctx.log.info(
    { sessionId: request.sessionId, repo: found.repo.name, source: request.source },
    'session started (or found again)',
  );
  return { ok: true };
}

/** `key=owner/name` bindings (DRYDOCK_SLACK_CHANNELS, DRYDOCK_LINEAR_TEAMS): the repo bound to `key`. */
export function boundRepo(bindings: string[] | undefined, key: string): string | undefined {
  for (const entry of bindings ?? []) {
    const at = entry.indexOf('=');
    if (entry.slice(0, at).trim() === key) return entry.slice(at + 1).trim();
  }
  return undefined;
}
