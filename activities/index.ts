/**
 * Every activity of drydock, as the two sets a worker registers (model: the
 * Temporal samples' worker-specific task queues):
 * - the shared queue's (`drydock`), which any worker serves: provisioning
 *   (the worker that runs it becomes the sandbox's host), the session's
 *   settings, the forges (context, progress, the change request), deploy,
 *   the audit trail;
 * - a host queue's (`drydock@<host>`), which only the worker on the
 *   sandbox's host (Docker engine or Kubernetes node) serves: whatever works in an existing sandbox.
 * Workflows proxy each set with its own type (workflows/session/proxies.ts),
 * so a host-bound activity on the shared queue does not compile.
 * Each factory takes only the dependencies it uses; the worker hands in one
 * ActivityDeps, which has them all.
 */
import { createAuditActivities } from './audit';
import type { ActivityDeps } from './deps';
import { createPilotActivities } from './pilot';
import { createPublishActivities } from './publish';
import { createRepoPolicyActivities } from './repo-policy';
import { createAgentLoopActivities } from '../agent-loop/activities';
import { createForgeActivities } from '../forge/activities';
import { forgesFrom } from './forges';
import { createAgentCliActivities } from '../models/agent-cli-activities';
import { heartbeating } from '../platform/heartbeat';
import {
  createCommitActivities,
  createFaultActivities,
  createPoolActivities,
  createProvisionActivities,
  createReaperActivities,
  createSnapshotActivities,
  createStepActivities,
  createVerifyActivities,
  createAgentAppActivities,
} from '../sandbox';
import { createLinearActivities } from '../linear/activities';
import { createMcpActivities } from '../mcp/tools';
import { createMcpApprovalActivities } from './mcp-approval';
import { createRepoNotesActivities } from './repo-notes';
import { createSlackActivities } from '../slack/activities';

export type { ActivityDeps } from './deps';

/** The shared queue's activities. */
export function createSharedActivities(deps: ActivityDeps) {
  const { provisionSandbox, destroySandbox } = createProvisionActivities(deps);
  const { deploy } = createPublishActivities(deps);
  return heartbeating(
    {
      provisionSandbox,
      // A sandbox whose provisioning failed has no host yet: any worker removes it by name.
      destroySandbox,
      // A build without a host of its own (a session's cold start) is planned on whichever worker picks it up.
      startSnapshotBuild: createSnapshotActivities(deps).startSnapshotBuild,
      ...createRepoPolicyActivities(deps),
      // triggerTask, reportToGitHub, openPullRequest: on the forge each repository is on.
      ...createForgeActivities({
        ...deps,
        forges: deps.forges ?? forgesFrom(deps),
        // Every value this process holds (GitHub's, GitLab's and Gitea's tokens, model keys): none reaches a task.
        knownSecrets: () => [...(deps.github.token ? [deps.github.token] : []), ...deps.redactor.needles],
      }),
      ...createSlackActivities(deps),
      ...createLinearActivities(deps),
      deploy,
      ...createAuditActivities(deps),
      ...createPilotActivities(deps),
      // Repo memory's proposals, taken out of the sandbox by the commit: the database only.
      ...createRepoNotesActivities(deps),
    },
    deps.redactor,
  );
}

/** A host queue's activities: they work in a sandbox on this worker's host. */
export function createHostActivities(deps: ActivityDeps) {
  const { pushBranch } = createPublishActivities(deps);
  return heartbeating(
    {
      destroySandbox: createProvisionActivities(deps).destroySandbox,
      ...createStepActivities(deps),
      ...createCommitActivities(deps),
      ...createAgentLoopActivities(deps),
      ...createMcpActivities(deps),
      ...createMcpApprovalActivities(deps),
      ...createAgentCliActivities(deps),
      ...createVerifyActivities(deps),
      ...createAgentAppActivities(deps),
      pushBranch,
      ...createSnapshotActivities(deps),
      ...createPoolActivities(deps),
      ...createReaperActivities(deps),
      ...createFaultActivities(deps),
    },
    deps.redactor,
  );
}

export type SharedActivities = ReturnType<typeof createSharedActivities>;
export type HostActivities = ReturnType<typeof createHostActivities>;
/** Both sets: what a single test worker that serves both queues registers. */
export type Activities = SharedActivities & HostActivities;

/** Both sets in one object, for a worker (or a test) that serves the shared queue and its host's as one. */
export function createActivities(deps: ActivityDeps): Activities {
  return { ...createSharedActivities(deps), ...createHostActivities(deps) };
}
