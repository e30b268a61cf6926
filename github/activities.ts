/**
 * A webhook-started session's dealings with GitHub, on the worker (which holds
 * the credentials): reading the task's context, and reporting progress back
 * idempotently (a retried activity looks before it writes). What came out of
 * the sandbox (an error's tail, the tests' summary) is fenced as code and
 * loses its mentions (github/sandbox-text.ts): drydock's identity publishes
 * no Markdown the agent wrote.
 */
import { randomBytes } from 'node:crypto';
import type { Octokit } from '@octokit/rest';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType, type Outcome, type TestReport } from '../workflows/api';
import { upsertCheckRun, type CheckConclusion, type CheckReport } from './check-runs';
import type { TriggerOrigin } from '../workflows/input';
import type { Logger } from '../platform/log';
import { GitHubCredentialsError, octokitFor, type GitHubSettings, type TokenPermissions } from './client';
import { fenced, withoutMentions } from './sandbox-text';
import { readTriggerContext, taskWithContext } from './task-context';
import { commentOnce, reactOnce, repoRef, setStatusOnce, type RepoRef, type StatusState } from './writes';

/** Moments of a session that GitHub hears about. */
export type ProgressStage = 'started' | 'awaiting_approval' | 'pull_request' | Outcome;

export interface ProgressInput {
  sessionId: string;
  trigger: TriggerOrigin;
  stage: ProgressStage;
  /** The commit the session started from: its `drydock` status follows the session. */
  commit?: string;
  pullRequestUrl?: string;
  /** Why the session ended, for a failed outcome. */
  detail?: string;
  /** The verification so far: a check run's summary, and its failing tests as annotations. */
  tests?: { summary: string; failures: TestReport['failures'] };
  /** The files the session's change touched: the only ones its check run annotates. */
  changedFiles?: string[];
}

/** A GitHub App's token for reading the context, and for reporting. */
const CONTEXT_PERMISSIONS: TokenPermissions = {
  issues: 'read',
  pull_requests: 'read',
  checks: 'read',
  actions: 'read',
};
const PROGRESS_PERMISSIONS: TokenPermissions = { issues: 'write', statuses: 'write', checks: 'write' };

/** The commit status of each stage. */
const STATUS: Record<ProgressStage, [StatusState, string]> = {
  started: ['pending', 'in progress'],
  awaiting_approval: ['pending', 'waiting for review'],
  pull_request: ['pending', 'pull request opened'],
  completed: ['success', 'done'],
  failed: ['failure', 'failed'],
  rejected: ['failure', 'rejected in review'],
  timed_out: ['failure', 'timed out'],
  cancelled: ['error', 'cancelled'],
};

/** What the issue hears besides the acknowledgement: the pull request, or why there is none. */
async function commentOn(octokit: Octokit, where: RepoRef & { issue: number }, input: ProgressInput, link: string) {
  const { stage, sessionId } = input;
  if (stage === 'pull_request' && input.pullRequestUrl) {
    const body = `drydock opened a pull request for this: ${input.pullRequestUrl} (session: ${link})`;
    await commentOnce(octokit, where, `pr/${sessionId}`, body);
  } else if (stage === 'completed' && !input.pullRequestUrl) {
    await commentOnce(octokit, where, `end/${sessionId}`, `drydock's session made no change: ${link}`);
  } else if (ENDED[stage]) {
    await commentOnce(octokit, where, `end/${sessionId}`, endComment(input, link));
  }
}

/** Why a session ended, for its issue: drydock's words, then the error as the sandbox left it, fenced. */
export function endComment(input: ProgressInput, link: string): string {
  const head = `drydock's session ${ENDED[input.stage] ?? input.stage} (${link})`;
  return input.detail ? `${head}:\n\n${fenced(input.detail)}` : head;
}

/** A check run's conclusion per outcome; undefined while the session runs. */
const CONCLUSION: Partial<Record<ProgressStage, CheckConclusion>> = {
  completed: 'success',
  failed: 'failure',
  rejected: 'failure',
  timed_out: 'timed_out',
  cancelled: 'cancelled',
};

/** The session's check run: its title drydock's words, the error and the tests' summary fenced below. */
export function checkReport(input: ProgressInput, words: string, link: string): CheckReport {
  const { tests, detail } = input;
  return {
    sessionId: input.sessionId,
    conclusion: CONCLUSION[input.stage],
    title: `drydock: ${words}`,
    summary: [
      `Session [${input.sessionId}](${link}): ${words}.`,
      detail ? fenced(detail) : '',
      tests ? `Tests:\n\n${fenced(tests.summary)}` : '',
    ]
      .filter(Boolean)
      .join('\n\n'),
    detailsUrl: link,
    failures: tests?.failures,
    changedFiles: input.changedFiles ?? [],
  };
}

const ENDED: Partial<Record<ProgressStage, string>> = {
  failed: 'failed',
  rejected: 'was rejected in review',
  timed_out: 'timed out',
  cancelled: 'was cancelled',
};

/** GitHub refusing the worker's credentials or the request will not change on a retry. */
function permanent(err: unknown): never {
  if (err instanceof GitHubCredentialsError) throw ApplicationFailure.nonRetryable(err.message, ErrorType.GitHubAuth);
  const status = (err as { status?: number }).status;
  if (status && status >= 400 && status < 500 && status !== 429) {
    throw ApplicationFailure.nonRetryable(
      `GitHub answered ${status}: ${(err as Error).message}`,
      ErrorType.GitHubRequest,
    );
  }
  throw err;
}

/** What GitHub's activities use of the worker. */
export interface GitHubDeps {
  /** The worker's GitHub App or token (DRYDOCK_GITHUB_*). */
  github: GitHubSettings;
  /** Link to a session in the Temporal Web UI. */
  sessionLink: (sessionId: string) => string;
  /** Link to a session in the review console, for GitHub (default: sessionLink). */
  reviewLink?: (sessionId: string) => string;
  /** The secrets a session may grant: scrubbed from what GitHub is told. */
  secrets: Record<string, string>;
  log: Logger;
}

export function createGitHubActivities({ github, sessionLink, reviewLink, secrets, log }: GitHubDeps) {
  const linkTo = (sessionId: string) => (reviewLink ?? sessionLink)(sessionId);
  const octokitOf = (repo: string, permissions: TokenPermissions) =>
    octokitFor(github, repoRef(repo).owner, repoRef(repo).repo, permissions);

  return {
    /** The task with what GitHub holds about its origin, bounded, scrubbed and delimited as data. */
    async triggerTask(input: { sessionId: string; task: string; trigger: TriggerOrigin }): Promise<string> {
      try {
        const octokit = await octokitOf(input.trigger.repo, CONTEXT_PERMISSIONS);
        const sections = await readTriggerContext(octokit, input.trigger);
        const known = [github.token, ...Object.values(secrets)].filter((s): s is string => Boolean(s));
        return taskWithContext(input.task, sections, randomBytes(8).toString('hex'), known);
      } catch (err) {
        permanent(err);
      }
    },

    /** Tells GitHub where the session is: an acknowledgement, the commit's status, the pull request's link. */
    async reportToGitHub(input: ProgressInput): Promise<void> {
      const { sessionId, trigger, stage } = input;
      const where = repoRef(trigger.repo);
      const link = linkTo(sessionId);
      try {
        const octokit = await octokitOf(trigger.repo, PROGRESS_PERMISSIONS);
        if (stage === 'started' && trigger.comment) {
          await reactOnce(octokit, { ...where, comment: trigger.comment }, 'eyes');
        } else if (stage === 'started' && trigger.issue) {
          await commentOnce(
            octokit,
            { ...where, issue: trigger.issue },
            `ack/${sessionId}`,
            `drydock is working on this: ${link}`,
          );
        }
        if (trigger.issue) await commentOn(octokit, { ...where, issue: trigger.issue }, input, link);
        const commit = trigger.commit ?? input.commit;
        if (commit) {
          const [state, words] = STATUS[stage];
          // A status's description is plain text (no Markdown to fence), its mentions dropped all the same.
          const description =
            input.detail && state !== 'success' ? `${words}: ${withoutMentions(input.detail)}` : words;
          // A GitHub App reports a check run (with annotations); a token, the commit status.
          if (github.app) await upsertCheckRun(octokit, { ...where, sha: commit }, checkReport(input, words, link));
          else await setStatusOnce(octokit, { ...where, sha: commit }, state, description, link);
        }
        log.info({ sessionId, stage, repo: trigger.repo }, 'reported to GitHub');
      } catch (err) {
        permanent(err);
      }
    },
  };
}
