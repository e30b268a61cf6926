/**
 * Fixing its own pull request (docs/webhooks.md, CI on a drydock pull
 * request): a check run or workflow run that failed on a drydock branch
 * becomes a follow-up round of the session that pushed it. The server reads
 * the failure's annotations and log tail from GitHub (as a CI-started
 * session's worker does), bounded, scrubbed and fenced as data, and sends it
 * as a follow-up from drydock; the session's validator takes at most
 * DRYDOCK_CI_FIX_ROUNDS such rounds per pull request, and none while a
 * person's follow-up waits. The first refusal at the cap is said on the pull request.
 */
import { randomBytes } from 'node:crypto';
import { WorkflowNotFoundError } from '@temporalio/client';
import { GitHubCredentialsError, octokitFor, type TokenPermissions } from '../../github/client';
import { readTriggerContext, taskWithContext } from '../../github/task-context';
import type { CiFailedTrigger } from '../../github/webhooks';
import { commentOnce, repoRef } from '../../github/writes';
import { answeredStatus, FollowupRefused, sendFollowup, StatusUnanswered } from '../../platform/sessions';
import { CI_FOLLOWUP_TEXT_LIMIT, CI_SENDER } from '../../workflows/rules/followup';
import { HttpError, type ServeContext } from '../http';

type Answer = [number, unknown];

/** Read the failure; answer on the pull request when the cap refuses one. */
const PERMISSIONS: TokenPermissions = { checks: 'read', actions: 'read', issues: 'write' };

/** Characters of GitHub's text (annotations, log tail) in one CI follow-up: room for the words around it. */
const CONTEXT_CHARS = CI_FOLLOWUP_TEXT_LIMIT - 2_000;

export async function followupFromFailedCi(
  ctx: ServeContext,
  trigger: CiFailedTrigger,
  delivery: string,
): Promise<Answer> {
  const cap = ctx.config.DRYDOCK_CI_FIX_ROUNDS;
  if (cap === 0) return [202, { ignored: 'CI failures are not sent to sessions (DRYDOCK_CI_FIX_ROUNDS=0)' }];
  const { sessionId } = trigger;
  let status;
  try {
    // Its pull request and pushed commit are the worker's to say: the memo has neither.
    status = await answeredStatus(ctx.client, sessionId);
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return [202, { ignored: `no running drydock session ${sessionId}` }];
    if (err instanceof StatusUnanswered) throw new HttpError(503, err.message);
    throw err;
  }
  const pr = status.pullRequest;
  // Only the session's own pull request, in the repository the webhook came from.
  if (!pr || !pr.url.toLowerCase().includes(`/${trigger.repo.toLowerCase()}/pull/`)) {
    return [202, { ignored: `session ${sessionId} has no open pull request in ${trigger.repo}` }];
  }
  // Only a failure of the commit on the pull request (the last one the session pushed): one of a commit it
  // moved on from is old news, and while a round runs (its commit not known yet) nothing else is its.
  const head = status.pushed?.commit;
  if (head !== trigger.origin.commit) {
    return [202, { ignored: `${trigger.origin.commit.slice(0, 12)} is not the head of session ${sessionId}'s change` }];
  }
  const { owner, repo } = repoRef(trigger.repo);
  const octokit = await octokitFor(ctx.github, owner, repo, PERMISSIONS).catch((err: unknown) => {
    throw err instanceof GitHubCredentialsError ? new HttpError(503, `cannot read from GitHub: ${err.message}`) : err;
  });
  const sections = await readTriggerContext(octokit, trigger.origin);
  const known = [ctx.github.token, ...Object.values(ctx.config.secrets)].filter((s): s is string => Boolean(s));
  const words = [
    `CI failed on your pull request #${pr.number}: ${trigger.summary}.`,
    'Find the cause in the failure below, fix your change, and verify it again.',
  ].join(' ');
  const text = taskWithContext(words, sections, randomBytes(8).toString('hex'), known, 'GitHub', CONTEXT_CHARS);
  const { run, commit } = trigger.origin;
  try {
    // Keyed by the commit: every failed check of one commit is one follow-up.
    const accepted = await sendFollowup(ctx.client, sessionId, {
      by: CI_SENDER,
      text,
      id: `ci-${commit}`,
      ci: { run, commit, cap },
    });
    ctx.log.info({ delivery, sessionId, run, round: accepted.round }, 'webhook: CI failure sent as a follow-up');
    return [202, { sessionId, ...accepted }];
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return [202, { ignored: `no running drydock session ${sessionId}` }];
    if (!(err instanceof FollowupRefused)) throw err;
    ctx.log.info({ delivery, sessionId, run, reason: err.message }, 'webhook: CI failure not sent');
    if (/at most \d+ automatic rounds/.test(err.message)) {
      await commentOnce(
        octokit,
        { owner, repo, issue: pr.number },
        `ci-cap/${sessionId}`,
        `drydock will not fix CI on this pull request again: ${err.message}. A person's follow-up (\`/drydock …\`) still goes to the session.`,
      ).catch((e: unknown) => ctx.log.warn({ sessionId, err: e }, 'could not answer on GitHub'));
    }
    return [202, { ignored: err.message }];
  }
}
