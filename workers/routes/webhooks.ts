/**
 * POST /webhooks/github and POST /webhooks/ci: signed deliveries that start a
 * session with the repo's agent once per signed trigger, or record that a
 * drydock pull request closed.
 */
import type { IncomingMessage } from 'node:http';
import type { Octokit } from '@octokit/rest';
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
  refusalFromGitHub,
  sessionOfPullRequest,
  writerRefusal,
} from '../../github/trigger-checks';
import { GitHubCredentialsError, octokitFor, type TokenPermissions } from '../../github/client';
import { commentOnce, repoRef } from '../../github/writes';
import { MAX_COMMENT_CHARS, reviewFollowup } from '../../review/line-comments';
import { scrub } from '../../platform/scrub';
import type { KnownRepo } from '../../repos/registry';
import { FollowupRefused, getStatus, sendFollowup, startSession } from '../../platform/sessions';
import { parsePayload } from '../../github/webhook-payloads';
import {
  bodyHash,
  routeGitHubEvent,
  signatureMatches,
  type FollowupTrigger,
  type PullRequestClosedTrigger,
  type StartTrigger,
} from '../../github/webhooks';
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

export async function githubWebhook(ctx: ServeContext, req: IncomingMessage): Promise<Answer> {
  const secrets = ctx.config.DRYDOCK_WEBHOOK_SECRETS ?? [];
  if (secrets.length === 0) throw new HttpError(503, 'GitHub webhooks are not configured (DRYDOCK_WEBHOOK_SECRETS)');
  const signature = header(req, 'x-hub-signature-256');
  if (!signature?.startsWith('sha256=')) throw new HttpError(401, 'missing or malformed X-Hub-Signature-256');
  const body = await readBody(req, ctx.config.DRYDOCK_HTTP_MAX_BODY);
  if (!(await signatureMatches(secrets, body, signature))) throw new HttpError(401, 'signature does not match');
  const event = header(req, 'x-github-event');
  // Not signed: for the logs only, never for an id.
  const delivery = header(req, 'x-github-delivery');
  if (!event || !delivery || !/^[A-Za-z0-9-]{1,100}$/.test(delivery)) {
    throw new HttpError(400, 'missing X-GitHub-Event or a well-formed X-GitHub-Delivery');
  }
  const payload = parseJson(body);
  if (event === 'ping') return [200, { ok: true, zen: payload?.zen }];
  const trigger = routeGitHubEvent(event, bodyHash(body), payload);
  if (trigger.kind === 'invalid') throw new HttpError(422, `${event} payload: ${trigger.problem}`);
  if (trigger.kind === 'ignore') {
    ctx.log.info({ event, delivery, reason: trigger.reason }, 'webhook ignored');
    return [202, { ignored: trigger.reason }];
  }
  if (trigger.kind === 'start') return startFromTrigger(ctx, trigger, delivery);
  if (trigger.kind === 'followup') return followupFromComment(ctx, trigger, delivery);
  if (trigger.kind === 'ci_failed') return followupFromFailedCi(ctx, trigger, delivery);
  return recordPullRequestClosed(ctx, trigger, event, delivery);
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
  return startFromTrigger(ctx, trigger, header(req, 'x-drydock-delivery') ?? trigger.sessionId);
}

/**
 * Starts the trigger's session with the repo's agent, or finds it again for a
 * redelivery, and records the delivery. Refused (nothing starts): an unknown
 * repo, a repo without an agent, and what GitHub's API says no to.
 */
async function startFromTrigger(ctx: ServeContext, trigger: StartTrigger, delivery: string): Promise<Answer> {
  const found = await ctx.repos.byName(trigger.repo);
  if (!found.ok) throw new HttpError(422, found.reason);
  const onPullRequest = trigger.check?.pullRequest;
  if (onPullRequest && trigger.origin?.comment) {
    // A comment on one of drydock's own pull requests is a follow-up to its session.
    const octokit = await serverOctokit(ctx, trigger.repo);
    const sessionId = await sessionOfPullRequest(octokit, trigger.repo, onPullRequest);
    if (sessionId) {
      const { repo, task: text, requestedBy: by } = trigger;
      const comment = trigger.origin.comment;
      return followupFromComment(
        ctx,
        { kind: 'followup', repo, pullRequest: onPullRequest, sessionId, text, by, comment },
        delivery,
      );
    }
  }
  if (trigger.check) {
    const refusal = await refusalFromGitHub(await serverOctokit(ctx, trigger.repo), trigger);
    if (refusal) {
      ctx.log.info({ sessionId: trigger.sessionId, delivery, reason: refusal.reason }, 'webhook refused');
      if (refusal.answer) await answerOnGitHub(ctx, trigger, refusal.reason);
      if (refusal.status === 202) return [202, { ignored: refusal.reason }];
      throw new HttpError(refusal.status, refusal.reason);
    }
  }
  // A GitHub login acts as its person (the identities file), else as github:<login>.
  const requestedBy = trigger.origin ? ctx.identities.directory.githubActor(trigger.requestedBy) : trigger.requestedBy;
  // A person's request (a label, a comment) needs the requester role too; CI failures are the repo's own automation.
  const refused = trigger.check?.writer && ctx.identities.roles.refusal(requestedBy, found.repo.name, 'requester');
  if (refused) {
    ctx.log.info({ sessionId: trigger.sessionId, delivery, reason: refused }, 'webhook refused by the roles');
    await answerOnGitHub(ctx, trigger, refused);
    throw new HttpError(403, refused);
  }
  // After the checks: only someone who may start work hears how this repo is configured.
  const configured = ctx.repos.triggerSession(found.repo);
  if (!configured.ok) {
    await answerOnGitHub(ctx, trigger, configured.reason);
    throw new HttpError(422, configured.reason);
  }
  const input = triggeredInput({ ...trigger, requestedBy }, found.repo, configured.session);
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

/** The session a trigger starts: the repo's agent and checks, the trigger's task, a pull request at the end. */
export function triggeredInput(trigger: StartTrigger, repo: KnownRepo, session: TriggerSession): SessionInputDraft {
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
      },
    },
    ...(trigger.origin ? { trigger: trigger.origin } : {}),
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

/** A GitHub App's token on the server: read a branch, a pull request, a permission; answer on an issue. */
const SERVER_PERMISSIONS: TokenPermissions = { contents: 'read', pull_requests: 'read', issues: 'write' };

/** The server's GitHub client for checks; without credentials a trigger that needs one cannot start. */
async function serverOctokit(ctx: ServeContext, repo: string): Promise<Octokit> {
  const { owner, repo: name } = repoRef(repo);
  try {
    return await octokitFor(ctx.github, owner, name, SERVER_PERMISSIONS);
  } catch (err) {
    if (err instanceof GitHubCredentialsError) throw new HttpError(503, `cannot check with GitHub: ${err.message}`);
    throw err;
  }
}

/** Says on the issue why nothing started, once per trigger (a redelivery finds the comment). */
async function answerOnGitHub(ctx: ServeContext, trigger: StartTrigger, reason: string): Promise<void> {
  const issue = trigger.origin?.issue;
  if (!issue) return;
  try {
    const { owner, repo } = repoRef(trigger.repo);
    const octokit = await octokitFor(ctx.github, owner, repo, SERVER_PERMISSIONS);
    await commentOnce(
      octokit,
      { ...repoRef(trigger.repo), issue },
      `refused/${trigger.sessionId}`,
      refusalText(reason),
    );
  } catch (err) {
    ctx.log.warn({ sessionId: trigger.sessionId, err }, 'could not answer on GitHub');
  }
}

function refusalText(reason: string): string {
  return `drydock did not start a session: ${reason}.`;
}

/**
 * A /drydock comment on a drydock pull request: the commenter must have write
 * permission (as for starting a session), then the session's validator decides
 * (an approver or the requester). The comment's id makes a redelivery the same
 * follow-up. A refusal is answered on the pull request.
 */
async function followupFromComment(ctx: ServeContext, trigger: FollowupTrigger, delivery: string): Promise<Answer> {
  const found = await ctx.repos.byName(trigger.repo);
  if (!found.ok) throw new HttpError(422, found.reason);
  const octokit = await serverOctokit(ctx, trigger.repo);
  const sessionId = trigger.sessionId ?? (await sessionOfPullRequest(octokit, trigger.repo, trigger.pullRequest));
  if (!sessionId) return [202, { ignored: `pull request #${trigger.pullRequest} is not drydock's` }];
  const answer = async (reason: string) => {
    try {
      await commentOnce(
        octokit,
        { ...repoRef(trigger.repo), issue: trigger.pullRequest },
        `followup-refused/${trigger.comment}`,
        `drydock did not take this follow-up: ${reason}.`,
      );
    } catch (err) {
      ctx.log.warn({ sessionId, err }, 'could not answer on GitHub');
    }
  };
  const notWriter = await writerRefusal(octokit, trigger.repo, trigger.by);
  if (notWriter) {
    await answer(notWriter);
    throw new HttpError(403, notWriter);
  }
  const by = ctx.identities.directory.githubActor(trigger.by);
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
    const content = trigger.review ? await reviewContent(ctx, octokit, trigger, sessionId) : { text: trigger.text };
    if (!content) return [202, { ignored: `review ${trigger.review} has no comment and no text` }];
    const accepted = await sendFollowup(ctx.client, sessionId, {
      by,
      ...content,
      id: trigger.review ? `github-review-${trigger.review}` : `github-comment-${trigger.comment}`,
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
 * (review/line-comments.ts): its line comments, read from GitHub and
 * scrubbed, and its body; words for a model or CLI agent, commands for a
 * script. Comments that are /drydock commands are follow-ups of their own.
 */
async function reviewContent(
  ctx: ServeContext,
  octokit: Octokit,
  trigger: FollowupTrigger,
  sessionId: string,
): Promise<{ text: string } | { steps: unknown[] } | undefined> {
  const { data } = await octokit.pulls.listCommentsForReview({
    ...repoRef(trigger.repo),
    pull_number: trigger.pullRequest,
    review_id: trigger.review!,
    per_page: REVIEW_COMMENTS,
  });
  const comments = data
    .filter((c) => !c.body.trim().startsWith('/drydock'))
    .map((c) => ({
      path: c.path,
      line: (c as { line?: number | null }).line ?? (c as { original_line?: number | null }).original_line ?? 1,
      body: scrub(c.body).slice(0, MAX_COMMENT_CHARS),
    }));
  const kind = (await getStatus(ctx.client, sessionId)).agent?.kind ?? 'script';
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
    by: ctx.identities.directory.githubActor(trigger.by),
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
