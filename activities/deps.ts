/**
 * What the worker hands the registry: the union of what each capability's
 * activities declare they use (each factory takes only its own part). The
 * worker builds one; tests hand a factory only its part. No capability
 * folder imports this: it is the registry's.
 */
import type { AgentLoopDeps } from '../agent-loop/activities';
import type { ForgeSet } from '../forge/registry';
import type { GitHubDeps } from '../github/activities';
import type { PullRequestDeps } from '../github/pull-requests';
import type { LinearDeps } from '../linear/activities';
import type { AgentCliDeps } from '../models/agent-cli-activities';
import type { SandboxDeps } from '../sandbox';
import type { SlackDeps } from '../slack/activities';
import type { AuditDeps } from './audit';
import type { PilotDeps } from './pilot';
import type { PublishDeps } from './publish';
import type { RepoPolicyDeps } from './repo-policy';
import type { RepoNotesDeps } from './repo-notes';

export type ActivityDeps = SandboxDeps &
  AgentLoopDeps &
  AgentCliDeps &
  GitHubDeps &
  PullRequestDeps &
  PublishDeps &
  SlackDeps &
  LinearDeps &
  PilotDeps &
  AuditDeps &
  RepoPolicyDeps &
  RepoNotesDeps & {
    /** The configured forges (activities/forges.ts); default: GitHub from `github`. */
    forges?: ForgeSet;
  };
