/**
 * GitHub as a forge (forge/forge.ts): the seam's verbs over Octokit, with the
 * worker's token or a GitHub App installation token minted per repository
 * with only what each use needs (github/client.ts). The writes are the
 * idempotent ones of github/writes.ts and github/check-runs.ts.
 */
import type { Octokit } from '@octokit/rest';
import type { ChangeRequestInfo, Forge, ForgeFailure, ForgePurpose, ForgeRepo } from '../forge/forge';
import { upsertCheckRun } from './check-runs';
import {
  gitCredentials,
  GitHubCredentialsError,
  octokitFor,
  PUBLISHING,
  upsertPullRequest,
  type GitHubSettings,
  type TokenPermissions,
} from './client';
import { readTriggerContext } from './task-context';
import { writerRefusal } from './trigger-checks';
import { commentOnce, reactOnce, repoRef, setStatusOnce } from './writes';

/** What an App's installation token may do, per use. */
const PERMISSIONS: Record<ForgePurpose, TokenPermissions> = {
  publish: PUBLISHING,
  context: { issues: 'read', pull_requests: 'read', checks: 'read', actions: 'read' },
  progress: { issues: 'write', statuses: 'write', checks: 'write' },
  server: { contents: 'read', pull_requests: 'read', issues: 'write' },
};

/** Where GitHub's pages live for an API: github.com for api.github.com, else the API's own origin. */
function webOrigin(apiUrl: string): string {
  const api = new URL(apiUrl);
  return api.host === 'api.github.com' ? 'https://github.com' : api.origin;
}

export function githubForge(settings: GitHubSettings): Forge {
  return {
    kind: 'github',
    name: 'GitHub',
    // Check runs (with annotations) are the Apps' API; a token reports commit statuses.
    capabilities: { annotations: Boolean(settings.app), reviews: true },
    owns: (url) =>
      /^(https:\/\/|ssh:\/\/git@|git@)github\.com[/:]/.test(url) || url.startsWith(`${webOrigin(settings.apiUrl)}/`),
    gitCredentials: (url) => gitCredentials(settings, url),
    repo: (path, purpose) => githubRepo(settings, path, purpose),
    failure: (err, context) => githubFailure(err, context),
  };
}

/** One repository; its Octokit (one token) is made at first use and kept for the handle's life. */
function githubRepo(settings: GitHubSettings, path: string, purpose: ForgePurpose): ForgeRepo {
  const where = repoRef(path);
  let client: Promise<Octokit> | undefined;
  const octokit = () => (client ??= octokitFor(settings, where.owner, where.repo, PERMISSIONS[purpose]));
  return {
    path,
    async upsertChangeRequest(spec) {
      return upsertPullRequest(await octokit(), { ...where, ...spec });
    },
    async changeRequest(number): Promise<ChangeRequestInfo> {
      const { data: pr } = await (await octokit()).pulls.get({ ...where, pull_number: number });
      const state = pr.merged_at ? 'merged' : pr.state === 'closed' ? 'closed' : 'open';
      return {
        number,
        url: pr.html_url,
        headBranch: pr.head.ref,
        fromThisRepo: pr.head.repo?.full_name === path,
        headRepo: pr.head.repo?.full_name,
        state,
      };
    },
    async branchHead(branch) {
      try {
        const { data } = await (await octokit()).repos.getBranch({ ...where, branch });
        return data.commit.sha;
      } catch (err) {
        if ((err as { status?: number }).status === 404) return undefined;
        throw err;
      }
    },
    // Issues and pull requests share GitHub's numbers and its comments API.
    async commentOnce(on, key, body) {
      return commentOnce(await octokit(), { ...where, issue: on.number }, key, body);
    },
    async react(on, emoji) {
      await reactOnce(await octokit(), { ...where, comment: on.comment }, emoji);
    },
    async reportCommit(sha, report) {
      const at = { ...where, sha };
      if (!settings.app) {
        await setStatusOnce(await octokit(), at, report.state, report.description, report.link);
        return;
      }
      await upsertCheckRun(await octokit(), at, {
        sessionId: report.sessionId,
        conclusion: report.conclusion,
        title: report.title,
        summary: report.summary,
        detailsUrl: report.link,
        failures: report.failures,
        changedFiles: report.changedFiles,
      });
    },
    async readContext(origin) {
      return readTriggerContext(await octokit(), origin);
    },
    async writerRefusal(user) {
      return writerRefusal(await octokit(), path, user);
    },
    async reviewComments(changeRequest, review, limit) {
      const { data } = await (
        await octokit()
      ).pulls.listCommentsForReview({
        ...where,
        pull_number: changeRequest,
        review_id: review,
        per_page: limit,
      });
      return data.map((c) => ({
        path: c.path,
        line: (c as { line?: number | null }).line ?? (c as { original_line?: number | null }).original_line ?? 1,
        body: c.body,
      }));
    },
  };
}

/**
 * GitHub's answers that a retry cannot change. Publishing: 401/403 (unless
 * rate limited) and 404/422, in words that name the repo; progress and
 * context: any 4xx but 429. 5xx and rate limits are retried.
 */
function githubFailure(
  err: unknown,
  { purpose, repo }: { purpose: ForgePurpose; repo: string },
): ForgeFailure | undefined {
  if (err instanceof GitHubCredentialsError) return { kind: 'auth', message: err.message };
  // Octokit's RequestError, recognised by shape (a copy per Octokit package may exist).
  const e = err as { name?: string; status?: number; message: string; response?: { headers: Record<string, string> } };
  if (purpose !== 'publish') {
    if (e?.status && e.status >= 400 && e.status < 500 && e.status !== 429) {
      return { kind: 'request', message: `GitHub answered ${e.status}: ${e.message}` };
    }
    return undefined;
  }
  if (e?.name !== 'HttpError' || typeof e.status !== 'number') return undefined;
  const what = `GitHub answered ${e.status} for ${repo}: ${e.message.split(' - ')[0]}`;
  if (e.status === 401 || e.status === 403) {
    if (e.response?.headers['x-ratelimit-remaining'] === '0') return undefined; // rate limited: retry later
    return { kind: 'auth', message: `${what} (check the worker's GitHub credentials)` };
  }
  if (e.status === 404 || e.status === 422) return { kind: 'request', message: what };
  return undefined;
}
