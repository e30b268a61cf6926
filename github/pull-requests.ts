/**
 * The pull request of an approved, pushed change, on GitHub: the forge
 * activity (forge/activities.ts, openPullRequest) with GitHub as the only
 * forge: opened or updated from the worker, never a second one, audited
 * before and after.
 */
import { createForgeActivities, type ChangeRequestInput } from '../forge/activities';
import { ForgeSet } from '../forge/registry';
import type { Logger } from '../platform/log';
import type { AuditTrail } from '../store/audit';
import type { GitHubSettings } from './client';
import { githubForge } from './provider';

export type PullRequestInput = ChangeRequestInput;

/** What the pull request uses of the worker. */
export interface PullRequestDeps {
  /** The worker's GitHub App or token. */
  github: GitHubSettings;
  /** Link to a session in the Temporal Web UI, for pull request bodies. */
  sessionLink: (sessionId: string) => string;
  audit: AuditTrail;
  log: Logger;
}

export function createPullRequestActivities(deps: PullRequestDeps) {
  const forges = new ForgeSet([githubForge(deps.github)]);
  const { openPullRequest } = createForgeActivities({ ...deps, forges, secrets: {} });
  return { openPullRequest };
}
