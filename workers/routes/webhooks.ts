/**
 * POST /webhooks/github and POST /webhooks/ci: signed deliveries that start a
 * session once per delivery, or record that a drydock pull request closed.
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import {
  WorkflowExecutionAlreadyStartedError,
  WorkflowIdConflictPolicy,
  WorkflowIdReusePolicy,
  WorkflowNotFoundError,
} from '@temporalio/client';
import { startSession } from '../../lib/sessions';
import {
  routeGitHubEvent,
  signatureMatches,
  type PullRequestClosedTrigger,
  type StartTrigger,
} from '../../lib/webhooks';
import { PR_CLOSED_WORKFLOW_TYPE, REPO_ATTRIBUTE, type PullRequestClosed } from '../../workflows/api';
import { parseSessionInput, type SessionInputDraft } from '../../workflows/input';
import { header, HttpError, parseJson, readBody, type ServeContext } from '../http';

type Answer = [number, unknown];

export async function githubWebhook(ctx: ServeContext, req: IncomingMessage): Promise<Answer> {
  const secrets = ctx.config.DRYDOCK_WEBHOOK_SECRETS ?? [];
  if (secrets.length === 0) throw new HttpError(503, 'GitHub webhooks are not configured (DRYDOCK_WEBHOOK_SECRETS)');
  const signature = header(req, 'x-hub-signature-256');
  if (!signature?.startsWith('sha256=')) throw new HttpError(401, 'missing or malformed X-Hub-Signature-256');
  const body = await readBody(req, ctx.config.DRYDOCK_HTTP_MAX_BODY);
  if (!(await signatureMatches(secrets, body, signature))) throw new HttpError(401, 'signature does not match');
  const event = header(req, 'x-github-event');
  const delivery = header(req, 'x-github-delivery');
  if (!event || !delivery || !/^[A-Za-z0-9-]{1,100}$/.test(delivery)) {
    throw new HttpError(400, 'missing X-GitHub-Event or a well-formed X-GitHub-Delivery');
  }
  const payload = parseJson(body);
  if (event === 'ping') return [200, { ok: true, zen: payload?.zen }];
  const trigger = routeGitHubEvent(event, delivery, payload);
  if (trigger.kind === 'ignore') {
    ctx.log.info({ event, delivery, reason: trigger.reason }, 'webhook ignored');
    return [202, { ignored: trigger.reason }];
  }
  if (trigger.kind === 'start') return [202, await startFromTrigger(ctx, trigger, delivery)];
  return recordPullRequestClosed(ctx, trigger, event, delivery);
}

/** `{repo: "owner/name", ref?, task, sha?, requestedBy?}`, HMAC-signed like GitHub's deliveries. */
export async function ciWebhook(ctx: ServeContext, req: IncomingMessage): Promise<Answer> {
  const secret = ctx.config.DRYDOCK_CI_SECRET;
  if (!secret) throw new HttpError(503, 'the CI trigger is not configured (DRYDOCK_CI_SECRET)');
  const signature = header(req, 'x-drydock-signature-256');
  if (!signature?.startsWith('sha256=')) throw new HttpError(401, 'missing or malformed X-Drydock-Signature-256');
  const body = await readBody(req, ctx.config.DRYDOCK_HTTP_MAX_BODY);
  if (!(await signatureMatches([secret], body, signature))) throw new HttpError(401, 'signature does not match');
  const payload = parseJson(body);
  if (payload === null || typeof payload !== 'object') throw new HttpError(400, 'body must be a JSON object');
  if (typeof payload.task !== 'string' || !payload.task.trim()) throw new HttpError(422, 'task: required text');
  // The same delivery (or, without an id, the same body) starts one session.
  const delivery = header(req, 'x-drydock-delivery') ?? createHash('sha256').update(body).digest('hex').slice(0, 20);
  if (!/^[A-Za-z0-9-]{1,100}$/.test(delivery)) throw new HttpError(400, 'X-Drydock-Delivery: letters, digits, -');
  const ref = payload.sha ?? payload.ref;
  const trigger: StartTrigger = {
    kind: 'start',
    sessionId: `ci-${delivery.toLowerCase()}`,
    repo: payload.repo,
    ...(typeof ref === 'string' && ref ? { ref } : {}),
    task: payload.task,
    requestedBy: typeof payload.requestedBy === 'string' ? payload.requestedBy : 'ci',
    ...(typeof payload.ref === 'string' && payload.ref ? { pullRequestBase: payload.ref } : {}),
    source: 'CI trigger',
  };
  return [202, await startFromTrigger(ctx, trigger, delivery)];
}

/** Starts the trigger's session, or finds it again for a redelivery, and records the delivery. */
async function startFromTrigger(ctx: ServeContext, trigger: StartTrigger, delivery: string) {
  const found = await ctx.repos.byName(trigger.repo);
  if (!found.ok) throw new HttpError(422, found.reason);
  const input: SessionInputDraft = {
    repo: { url: found.repo.url, ...(trigger.ref ? { ref: trigger.ref } : {}) },
    task: trigger.task,
    requestedBy: trigger.requestedBy,
    publish: {
      pullRequest: { repo: found.repo.name, ...(trigger.pullRequestBase ? { base: trigger.pullRequestBase } : {}) },
    },
  };
  const parsed = parseSessionInput(input);
  if (!parsed.ok) throw new HttpError(422, `cannot start a session: ${parsed.problems.join('; ')}`);
  await startSession(ctx.client, input, {
    sessionId: trigger.sessionId,
    taskQueue: ctx.config.DRYDOCK_TASK_QUEUE,
    ifExists: 'reuse',
  });
  // Recorded in the session's chain; GitHub waits ~10 s for an answer, so this waits at most 5 s.
  await ctx.audit
    ?.append(
      {
        sessionId: trigger.sessionId,
        key: `webhook/${delivery}`,
        kind: 'webhook',
        actor: trigger.requestedBy,
        data: { source: trigger.source, delivery, repo: found.repo.name, ref: trigger.ref, task: trigger.task },
      },
      AbortSignal.timeout(5_000),
    )
    .catch((err: unknown) =>
      ctx.log.error(
        { sessionId: trigger.sessionId, delivery, err },
        'webhook delivery not recorded in the audit trail',
      ),
    );
  ctx.log.info(
    { sessionId: trigger.sessionId, delivery, repo: found.repo.name, source: trigger.source },
    'webhook: session started (or found, for a redelivery)',
  );
  return { sessionId: trigger.sessionId };
}

/** A pull request closed on a drydock branch: record merged or not for the metrics, once. */
async function recordPullRequestClosed(
  ctx: ServeContext,
  trigger: PullRequestClosedTrigger,
  event: string,
  delivery: string,
): Promise<Answer> {
  const found = await ctx.repos.byName(trigger.repo);
  if (!found.ok) throw new HttpError(422, found.reason);
  try {
    await ctx.client.workflow.getHandle(trigger.sessionId).describe();
  } catch (err) {
    if (!(err instanceof WorkflowNotFoundError)) throw err;
    ctx.log.info({ event, delivery, sessionId: trigger.sessionId }, 'webhook ignored: no such session');
    return [202, { ignored: `no drydock session ${trigger.sessionId}` }];
  }
  const record: PullRequestClosed = {
    sessionId: trigger.sessionId,
    repo: trigger.repo,
    number: trigger.number,
    url: trigger.url,
    merged: trigger.merged,
    by: trigger.by,
  };
  const recordId = `pr-closed-${trigger.sessionId}-${trigger.number}`;
  try {
    await ctx.client.workflow.start(PR_CLOSED_WORKFLOW_TYPE, {
      workflowId: recordId,
      taskQueue: ctx.config.DRYDOCK_TASK_QUEUE,
      args: [record],
      workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
      workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
      typedSearchAttributes: [{ key: REPO_ATTRIBUTE, value: found.repo.url }],
    });
  } catch (err) {
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
  }
  ctx.log.info({ delivery, sessionId: trigger.sessionId, merged: trigger.merged, recordId }, 'pull request closed');
  return [202, { recorded: recordId, merged: trigger.merged }];
}
