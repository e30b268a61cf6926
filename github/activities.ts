/**
 * A webhook-started session's dealings with GitHub, on the worker: the forge
 * activities (forge/activities.ts) with GitHub as the only forge. The worker
 * composes every configured forge instead (activities/forges.ts); this
 * factory serves callers that know the repository is on GitHub.
 */
import { createForgeActivities } from '../forge/activities';
import { commitReport, type ProgressInput } from '../forge/progress';
import { ForgeSet } from '../forge/registry';
import type { Logger } from '../platform/log';
import type { CheckReport } from './check-runs';
import type { GitHubSettings } from './client';
import { githubForge } from './provider';

export { endComment, type ProgressInput, type ProgressStage } from '../forge/progress';

/** The session's check run: its title drydock's words, the error and the tests' summary fenced below. */
export function checkReport(input: ProgressInput, _words: string, link: string): CheckReport {
  const report = commitReport(input, link);
  return {
    sessionId: report.sessionId,
    conclusion: report.conclusion,
    title: report.title,
    summary: report.summary,
    detailsUrl: link,
    failures: report.failures,
    changedFiles: report.changedFiles,
  };
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

export function createGitHubActivities(deps: GitHubDeps) {
  const { triggerTask, reportToGitHub } = createForgeActivities({
    ...deps,
    forges: new ForgeSet([githubForge(deps.github)]),
    knownSecrets: () => (deps.github.token ? [deps.github.token] : []),
  });
  return { triggerTask, reportToGitHub };
}
