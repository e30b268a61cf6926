/**
 * The pull request of an approved, pushed change: opened or updated from the
 * worker (which holds the credentials), never a second one, and recorded in
 * the audit trail before and after.
 */
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/api';
import type { Logger } from '../platform/log';
import { recordAction, type AuditTrail } from '../store/audit';
import { GitHubCredentialsError, octokitFor, upsertPullRequest, type GitHubSettings } from './client';

export interface PullRequestInput {
  sessionId: string;
  /** "owner/name". */
  repo: string;
  head: string;
  base?: string;
  draft: boolean;
  title: string;
  /** The body without the session link, which the worker adds. */
  body: string;
  /** The session's round: a follow-up round updates the same pull request, audited on its own. */
  round?: number;
}

/** GitHub's answers that a retry cannot change become non-retryable; 5xx and rate limits are retried. */
function githubFailure(err: unknown, repo: string): never {
  if (err instanceof GitHubCredentialsError) throw ApplicationFailure.nonRetryable(err.message, ErrorType.GitHubAuth);
  // Octokit's RequestError, recognised by shape (a copy per Octokit package may exist).
  const e = err as { name?: string; status?: number; message: string; response?: { headers: Record<string, string> } };
  if (e?.name === 'HttpError' && typeof e.status === 'number') {
    const what = `GitHub answered ${e.status} for ${repo}: ${e.message.split(' - ')[0]}`;
    if (e.status === 401 || e.status === 403) {
      if (e.response?.headers['x-ratelimit-remaining'] === '0') throw err; // rate limited: retry later
      throw ApplicationFailure.nonRetryable(`${what} (check the worker's GitHub credentials)`, ErrorType.GitHubAuth);
    }
    if (e.status === 404 || e.status === 422) throw ApplicationFailure.nonRetryable(what, ErrorType.GitHubRequest);
  }
  throw err;
}

/** What the pull request uses of the worker. */
export interface PullRequestDeps {
  /** The worker's GitHub App or token. */
  github: GitHubSettings;
  /** Link to a session in the Temporal Web UI, for pull request bodies. */
  sessionLink: (sessionId: string) => string;
  audit: AuditTrail;
  log: Logger;
}

export function createPullRequestActivities({ github, sessionLink, audit, log }: PullRequestDeps) {
  return {
    /** Opens or updates the pull request for the pushed branch; never a second one. */
    async openPullRequest(input: PullRequestInput): Promise<{ number: number; url: string; created: boolean }> {
      const [owner, repo] = input.repo.split('/');
      const target = { repo: input.repo, head: input.head, base: input.base, draft: input.draft };
      await recordAction(audit, input.sessionId, 'pull_request', 'intent', target, input.round);
      try {
        const octokit = await octokitFor(github, owner, repo);
        const pr = await upsertPullRequest(octokit, {
          owner,
          repo,
          head: input.head,
          base: input.base,
          draft: input.draft,
          title: input.title,
          body: `${input.body}\n\n---\nSession: ${sessionLink(input.sessionId)}\n`,
        });
        log.info({ sessionId: input.sessionId, pr: pr.url, created: pr.created }, 'pull request');
        await recordAction(audit, input.sessionId, 'pull_request', 'done', { ...target, ...pr }, input.round);
        return pr;
      } catch (err) {
        githubFailure(err, input.repo);
      }
    },
  };
}
