/**
 * POST /webhooks/github, /webhooks/gitlab, /webhooks/gitea and /webhooks/ci: deliveries that start a
 * session with the repo's agent once per signed trigger, or record that a
 * drydock pull request closed.
 */
import type { IncomingMessage } from 'node:http';
import {
  WorkflowExecutionAlreadyStartedError,
  WorkflowIdConflictPolicy,
  WorkflowIdReusePolicy,
  WorkflowNotFoundError,
} from '@temporalio/client';
import { z } from 'zod';
import {
  notSessionsFollowup,
  notSessionsPullRequest,
  refusalFromForge,
  sessionOfChangeRequest,
} from '../../forge/change-requests';
import type { Forge, ForgeKind, ForgeRepo, ForgeWebhooks } from '../../forge/forge';
import {
  bodyHash,
  COMMAND,
  parsePayload,
  type FollowupTrigger,
  type PullRequestClosedTrigger,
  type StartTrigger,
} from '../../forge/triggers';
import { githubWebhooks, signatureMatches } from '../../github/webhooks';
import { gitlabWebhooks } from '../../gitlab/webhooks';
import { giteaWebhooks } from '../../gitea/webhooks';
import { projectSecretsOf } from '../../forge/webhook-secrets';
import { MAX_COMMENT_CHARS, reviewFollowup } from '../../review/line-comments';
import { scrub } from '../../platform/scrub';
import type { KnownRepo } from '../../repos/registry';
import {
  answeredStatus,
  FollowupRefused,
  getStatus,
  sendFollowup,
  startSession,
  StatusUnanswered,
} from '../../platform/sessions';
import {
  MEMO_KEY,
  PR_CLOSED_WORKFLOW_TYPE,
  pullRequestClosed,
  REPO_ATTRIBUTE,
  type LastKnown,
  type PullRequestClosed,
} from '../../workflows/api';
import { parseSessionInput, type SessionInputDraft, type TriggerSession } from '../../workflows/input';
import { steeringRefused } from '../access';
import { followupFromFailedCi } from './ci-followup';
import { header, HttpError, parseJson, readBody, type ServeContext } from '../http';

type Answer = [number, unknown];

/** POST /webhooks/github: GitHub's deliveries through the forge seam. */
export function githubWebhook(ctx: ServeContext, req: IncomingMessage): Promise<Answer> {
  return forgeWebhook(ctx, githubWebhooks(ctx.config.DRYDOCK_WEBHOOK_SECRETS ?? [], projectSecrets(ctx)), req);
}

/** POST /webhooks/gitlab: GitLab's deliveries (X-Gitlab-Token) through the forge seam. */
export function gitlabWebhook(ctx: ServeContext, req: IncomingMessage): Promise<Answer> {
  return forgeWebhook(ctx, gitlabWebhooks(ctx.config.DRYDOCK_GITLAB_WEBHOOK_TOKENS ?? [], projectSecrets(ctx)), req);
}

/** POST /webhooks/gitea: Gitea's deliveries (X-Gitea-Signature) through the forge seam. */
export function giteaWebhook(ctx: ServeContext, req: IncomingMessage): Promise<Answer> {
  return forgeWebhook(ctx, giteaWebhooks(ctx.config.DRYDOCK_GITEA_WEBHOOK_SECRETS ?? [], projectSecrets(ctx)), req);
}

/** The registered repos' own webhook secrets: their names in the registry, their values in serve's environment. */
const projectSecrets = (ctx: ServeContext) => projectSecretsOf(() => ctx.repos.list(), ctx.config.secrets);

/** A webhook's forge with the server's credentials, and how it acts on a trigger. */
interface Via {
  forge: Forge;
  /** The server's handle on a repository: checks, and answers on an issue or change request. */
  repo(path: string): ForgeRepo;
}

function via(ctx: ServeContext, kind: ForgeKind): Via {
  const forge = ctx.forges.get(kind);
  if (!forge) throw new HttpError(503, `no ${kind} forge is configured on this server (see docs/forges.md)`);
  return { forge, repo: (path) => forge.repo(path, 'server') };
}

/**
 * Any forge's delivery: checked by its provider (signature or token, size,
 * headers), routed to a trigger, then acted on the same way for every forge.
 */
export async function forgeWebhook(ctx: ServeContext, webhooks: ForgeWebhooks, req: IncomingMessage): Promise<Answer> {
  const headers = Object.fromEntries(
    Object.entries(req.headers).map(([name, value]) => [name, Array.isArray(value) ? value[0] : value]),
  );
  const checked = await webhooks.check(headers, () => readBody(req, ctx.config.DRYDOCK_HTTP_MAX_BODY));
  if (!checked.ok) throw new HttpError(checked.status, checked.problem);
  const { event, delivery, body } = checked;
  const payload = parseJson(body);
  if (event === 'ping') return [200, { ok: true, zen: payload?.zen }];
  const trigger = webhooks.route(event, bodyHash(body), payload);
  if (trigger.kind === 'invalid') throw new HttpError(422, `${event} payload: ${trigger.problem}`);
  if (trigger.kind === 'ignore') {
    ctx.log.info({ event, delivery, reason: trigger.reason, forge: webhooks.kind }, 'webhook ignored');
    return [202, { ignored: trigger.reason }];
  }
  const on = via(ctx, webhooks.kind);
  if (trigger.kind === 'start') return startFromTrigger(ctx, trigger, delivery, on);
  if (trigger.kind === 'followup') return followupFromComment(ctx, trigger, delivery, on);
  if (trigger.kind === 'ci_failed') return followupFromFailedCi(ctx, trigger, delivery);
  return recordPullRequestClosed(ctx, trigger, event, delivery, on);
}

/** What the CI trigger reads from its (signed) body. */
const ciRequest = z.object({
  repo: z.string().min(1),
  task: z.string().trim().min(1),
  ref: z.string().min(1).optional(),
  sha: z.string().min(1).optional(),
  requestedBy: z.string().min(1).optional(),
  /** The caller's id for this request; default: the body's hash. */
  id: z
    .string()
    .regex(/^[A-Za-z0-9-]{1,64}$/, 'letters, digits and -')
    .optional(),
});

/**
 * `{repo: "owner/name", task, ref?, sha?, requestedBy?, id?}`, HMAC-signed
 * together with X-Drydock-Timestamp: sha256 over "<timestamp>.<body>". A
 * signed request older than the replay window is refused; within it, the same
 * body is the same session.
 */
export async function ciWebhook(ctx: ServeContext, req: IncomingMessage): Promise<Answer> {
  const secret = ctx.config.DRYDOCK_CI_SECRET;
  if (!secret) throw new HttpError(503, 'the CI trigger is not configured (DRYDOCK_CI_SECRET)');
  const signature = header(req, 'x-drydock-signature-256');
  if (!signature?.startsWith('sha256=')) throw new HttpError(401, 'missing or malformed X-Drydock-Signature-256');
  const timestamp = header(req, 'x-drydock-timestamp');
  if (!timestamp || !/^\d{1,12}$/.test(timestamp)) {
    throw new HttpError(401, 'missing X-Drydock-Timestamp (seconds since the epoch, signed with the body)');
  }
  const body = await readBody(req, ctx.config.DRYDOCK_HTTP_MAX_BODY);
  const signed = Buffer.concat([Buffer.from(`${timestamp}.`), body]);
  if (!(await signatureMatches([secret], signed, signature))) throw new HttpError(401, 'signature does not match');
  if (Math.abs(Date.now() - Number(timestamp) * 1000) > ctx.config.DRYDOCK_CI_REPLAY_WINDOW) {
    throw new HttpError(401, 'X-Drydock-Timestamp is outside the replay window: sign the request again');
  }
  const parsed = parsePayload(ciRequest, parseJson(body));
  if (!parsed.ok) throw new HttpError(422, parsed.problem);
  const request = parsed.payload;
  const ref = request.sha ?? request.ref;
  const trigger: StartTrigger = {
    kind: 'start',
    sessionId: `ci-${(request.id ?? bodyHash(body)).toLowerCase()}`,
    repo: request.repo,
    ...(ref ? { ref } : {}),
    task: request.task,
    requestedBy: request.requestedBy ?? 'ci',
    ...(request.ref ? { pullRequestBase: request.ref } : {}),
    source: 'CI trigger',
  };
  const delivery = req.headers['x-drydock-delivery'];
  return startFromTrigger(ctx, trigger, (Array.isArray(delivery) ? delivery[0] : delivery) ?? trigger.sessionId);
}

/**
 * Starts the trigger's session with the repo's agent, or finds it again for a
 * redelivery, and records the delivery. Refused (nothing starts): an unknown
 * repo, a repo without an agent, and what the forge's API says no to. `on`:
 * the forge the trigger came from (none for the CI trigger).
 */
async function startFromTrigger(ctx: ServeContext, trigger: StartTrigger, delivery: string, on?: Via): Promise<Answer> {
  const found = await ctx.repos.byName(trigger.repo);
  if (!found.ok) throw new HttpError(422, found.reason);
  const onPullRequest = trigger.check?.pullRequest;
  if (on && onPullRequest && trigger.origin?.comment) {
    // A comment on one of drydock's own change requests is a follow-up to its session.
    const sessionId = await asked(on, () => sessionOfChangeRequest(on.repo(trigger.repo), onPullRequest));
    if (sessionId) {
      const { repo, task: text, requestedBy: by } = trigger;
      const comment = trigger.origin.comment;
      return followupFromComment(
        ctx,
        { kind: 'followup', repo, pullRequest: onPullRequest, sessionId, text, by, comment },
        delivery,
        on,
      );
    }
  }
  if (on && trigger.check) {
    const refusal = await asked(on, () => refusalFromForge(on.repo(trigger.repo), trigger));
    if (refusal) {
      ctx.log.info({ sessionId: trigger.sessionId, delivery, reason: refusal.reason }, 'webhook refused');
      if (refusal.answer) await answerOnForge(ctx, on, trigger, refusal.reason);
      if (refusal.status === 202) return [202, { ignored: refusal.reason }];
      throw new HttpError(refusal.status, refusal.reason);
    }
  }
  // A forge login acts as its person (the identities file), else as github:<login> (gitlab:<login>).
  const requestedBy =
    on && trigger.origin
      ? ctx.identities.directory.forgeActor(on.forge.kind, trigger.requestedBy)
      : trigger.requestedBy;
  // A person's request (a label, a comment) needs the requester role too; CI failures are the repo's own automation.
  const refused = trigger.check?.writer && ctx.identities.roles.refusal(requestedBy, found.repo.name, 'requester');
  if (refused) {
    ctx.log.info({ sessionId: trigger.sessionId, delivery, reason: refused }, 'webhook refused by the roles');
    if (on) await answerOnForge(ctx, on, trigger, refused);
    throw new HttpError(403, refused);
  }
  // After the checks: only someone who may start work hears how this repo is configured.
  const configured = ctx.repos.triggerSession(found.repo);
  if (!configured.ok) {
    if (on) await answerOnForge(ctx, on, trigger, configured.reason);
    throw new HttpError(422, configured.reason);
  }
  const input = triggeredInput({ ...trigger, requestedBy }, found.repo, configured.session, on?.forge.kind);
  const parsed = parseSessionInput(input);
  if (!parsed.ok) throw new HttpError(422, `cannot start a session: ${parsed.problems.join('; ')}`);
  await startSession(ctx.client, input, {
    sessionId: trigger.sessionId,
    taskQueue: ctx.config.DRYDOCK_TASK_QUEUE,
    ifExists: 'reuse',
  });
  await recordDelivery(ctx, { ...trigger, requestedBy }, delivery, found.repo.name);
  ctx.log.info(
    { sessionId: trigger.sessionId, delivery, repo: found.repo.name, source: trigger.source },
    'webhook: session started (or found, for a redelivery)',
  );
  return [202, { sessionId: trigger.sessionId }];
}

/** A check with the forge; without the server's credentials for it, a trigger that needs one cannot start (503). */
async function asked<T>(on: Via, check: () => Promise<T>): Promise<T> {
  try {
    return await check();
  } catch (err) {
    if (on.forge.failure(err, { purpose: 'server', repo: '' })?.kind === 'auth') {
      throw new HttpError(503, `cannot check with ${on.forge.name}: ${(err as Error).message}`);
    }
    throw err;
  }
}

/**
 * The session a trigger starts: the repo's agent and checks, the trigger's
 * task, a change request at the end. A forge other than GitHub is named in
 * the input, so the worker publishes there.
 */
export function triggeredInput(
  trigger: StartTrigger,
  repo: KnownRepo,
  session: TriggerSession,
  forge: ForgeKind = 'github',
): SessionInputDraft {
  const named = forge === 'github' ? {} : { forge };
  const pr = session.publish.pullRequest;
  return {
    ...session,
    repo: { url: repo.url, ...(trigger.ref ? { ref: trigger.ref } : {}) },
    task: trigger.task,
    requestedBy: trigger.requestedBy,
    publish: {
      ...session.publish,
      pullRequest: {
        repo: repo.name,
        draft: typeof pr === 'object' && pr.draft,
        ...(trigger.pullRequestBase ? { base: trigger.pullRequestBase } : {}),
        ...named,
      },
    },
    ...(trigger.origin ? { trigger: { ...trigger.origin, ...named } } : {}),
  };
}

/** Recorded in the session's chain, once per signed body; GitHub waits ~10 s for an answer, so at most 5 s. */
export async function recordDelivery(ctx: ServeContext, trigger: StartTrigger, delivery: string, repo: string) {
  await ctx.audit
    ?.append(
      {
        sessionId: trigger.sessionId,
        key: `webhook/${trigger.sessionId}`,
        kind: 'webhook',
        actor: trigger.requestedBy,
        data: { source: trigger.source, delivery, repo, ref: trigger.ref, task: trigger.task },
      },
      AbortSignal.timeout(5_000),
    )
    .catch((err: unknown) =>
      ctx.log.error(
        { sessionId: trigger.sessionId, delivery, err },
        'webhook delivery not recorded in the audit trail',
      ),
    );
}

/** Says on the issue why nothing started, once per trigger (a redelivery finds the comment). */
async function answerOnForge(ctx: ServeContext, on: Via, trigger: StartTrigger, reason: string): Promise<void> {
  const issue = trigger.origin?.issue;
  if (!issue) return;
  try {
    await on
      .repo(trigger.repo)
      .commentOnce(
        { number: issue, changeRequest: trigger.origin?.pullRequest ?? false },
        `refused/${trigger.sessionId}`,
        refusalText(reason),
      );
  } catch (err) {
    ctx.log.warn({ sessionId: trigger.sessionId, err }, `could not answer on ${on.forge.name}`);
  }
}

function refusalText(reason: string): string {
  return `drydock did not start a session: ${reason}.`;
}

/**
 * A /drydock comment on a drydock change request: the commenter must be a
 * writer (as for starting a session), then the session's validator decides
 * (an approver or the requester). The comment's id makes a redelivery the
 * same follow-up. A refusal is answered on the change request.
 */
async function followupFromComment(
  ctx: ServeContext,
  trigger: FollowupTrigger,
  delivery: string,
  on: Via,
): Promise<Answer> {
  const found = await ctx.repos.byName(trigger.repo);
  if (!found.ok) throw new HttpError(422, found.reason);
  const repo = on.repo(trigger.repo);
  const sessionId = trigger.sessionId ?? (await asked(on, () => sessionOfChangeRequest(repo, trigger.pullRequest)));
  if (!sessionId) return [202, { ignored: `pull request #${trigger.pullRequest} is not drydock's` }];
  const answer = async (reason: string) => {
    try {
      await repo.commentOnce(
        { number: trigger.pullRequest, changeRequest: true },
        `followup-refused/${trigger.comment}`,
        `drydock did not take this follow-up: ${reason}.`,
      );
    } catch (err) {
      ctx.log.warn({ sessionId, err }, `could not answer on ${on.forge.name}`);
    }
  };
  const notWriter = await asked(on, () => repo.writerRefusal(trigger.by));
  if (notWriter) {
    await answer(notWriter);
    throw new HttpError(403, notWriter);
  }
  const by = ctx.identities.directory.forgeActor(on.forge.kind, trigger.by);
  try {
    const notOurs = notSessionsFollowup(sessionId, await sessionPublished(ctx, sessionId), {
      repo: trigger.repo,
      repoUrl: found.repo.url,
      number: trigger.pullRequest,
    });
    if (notOurs) return [202, { ignored: notOurs }];
    const refused = await steeringRefused(ctx, by, () => getStatus(ctx.client, sessionId));
    if (refused) {
      await answer(refused);
      throw new HttpError(403, refused);
    }
    // A comment is read like a review's body: words for a model or CLI agent, a command for a script.
    const content = await reviewContent(ctx, repo, trigger, sessionId);
    if (!content)
      return [
        202,
        { ignored: `${trigger.review ? `review ${trigger.review}` : 'the comment'} has no comment and no text` },
      ];
    const accepted = await sendFollowup(ctx.client, sessionId, {
      by,
      ...content,
      id: trigger.review ? `${on.forge.kind}-review-${trigger.review}` : `${on.forge.kind}-comment-${trigger.comment}`,
    });
    ctx.log.info({ delivery, sessionId, by: trigger.by, round: accepted.round }, 'webhook: follow-up sent');
    return [202, { sessionId, ...accepted }];
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return [202, { ignored: `no running drydock session ${sessionId}` }];
    if (!(err instanceof FollowupRefused)) throw err;
    await answer(err.message);
    throw new HttpError(409, err.message);
  }
}

/** Line comments of one review read: the rest of a long review is left out. */
const REVIEW_COMMENTS = 50;

/**
 * A submitted review as one follow-up, as the console sends one
 * (review/line-comments.ts): its line comments, read from the forge and
 * scrubbed, and its body; words for a model or CLI agent, commands for a
 * script. Comments that are /drydock commands are follow-ups of their own.
 */
async function reviewContent(
  ctx: ServeContext,
  repo: ForgeRepo,
  trigger: FollowupTrigger,
  sessionId: string,
): Promise<{ text: string } | { steps: unknown[] } | undefined> {
  const listed = trigger.review
    ? ((await repo.reviewComments?.(trigger.pullRequest, trigger.review, REVIEW_COMMENTS)) ?? [])
    : [];
  const comments = listed
    .filter((c) => !c.body.trim().startsWith(COMMAND))
    .map((c) => ({ path: c.path, line: c.line, body: scrub(c.body).slice(0, MAX_COMMENT_CHARS) }));
  // The agent's kind is the worker's to say (the memo has none): a model session's review is words, a script's steps.
  const status = await answeredStatus(ctx.client, sessionId).catch((err: unknown) => {
    throw err instanceof StatusUnanswered ? new HttpError(503, err.message) : err;
  });
  const kind = status.agent?.kind ?? 'script';
  const review = reviewFollowup(kind, comments, trigger.text);
  if (!review.ok) return undefined;
  return 'text' in review ? { text: review.text } : { steps: review.steps };
}

/** A pull request closed on a drydock branch: record merged or not for the metrics, once. */
async function recordPullRequestClosed(
  ctx: ServeContext,
  trigger: PullRequestClosedTrigger,
  event: string,
  delivery: string,
  on: Via,
): Promise<Answer> {
  const found = await ctx.repos.byName(trigger.repo);
  if (!found.ok) throw new HttpError(422, found.reason);
  let published: string | undefined;
  try {
    published = (await sessionPublished(ctx, trigger.sessionId)).pullRequest;
  } catch (err) {
    if (!(err instanceof WorkflowNotFoundError)) throw err;
    ctx.log.info({ event, delivery, sessionId: trigger.sessionId }, 'webhook ignored: no such session');
    return [202, { ignored: `no drydock session ${trigger.sessionId}` }];
  }
  const notOurs = notSessionsPullRequest(trigger.sessionId, published, trigger);
  if (notOurs) {
    ctx.log.warn({ event, delivery, sessionId: trigger.sessionId, repo: trigger.repo }, `webhook ignored: ${notOurs}`);
    return [202, { ignored: notOurs }];
  }
  const record: PullRequestClosed = {
    sessionId: trigger.sessionId,
    repo: trigger.repo,
    number: trigger.number,
    url: trigger.url,
    merged: trigger.merged,
    by: ctx.identities.directory.forgeActor(on.forge.kind, trigger.by),
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
  // A session still open for follow-ups ends with its pull request.
  try {
    await ctx.client.workflow
      .getHandle(trigger.sessionId)
      .signal(pullRequestClosed, { merged: trigger.merged, by: record.by, number: trigger.number });
  } catch (err) {
    if (!(err instanceof WorkflowNotFoundError)) throw err;
  }
  ctx.log.info({ delivery, sessionId: trigger.sessionId, merged: trigger.merged, recordId }, 'pull request closed');
  return [202, { recorded: recordId, merged: trigger.merged }];
}

/**
 * A session's repository and the URL of the pull request it published: its
 * status's, else (no worker answered, or not yet) its memo's. Throws
 * WorkflowNotFoundError for no such session.
 */
async function sessionPublished(ctx: ServeContext, sessionId: string): Promise<{ repo: string; pullRequest?: string }> {
  const status = await getStatus(ctx.client, sessionId);
  if (status.pullRequest) return { repo: status.repo, pullRequest: status.pullRequest.url };
  const memo = (await ctx.client.workflow.getHandle(sessionId).describe()).memo?.[MEMO_KEY] as LastKnown | undefined;
  return { repo: status.repo, ...(memo?.pullRequest ? { pullRequest: memo.pullRequest } : {}) };
}
