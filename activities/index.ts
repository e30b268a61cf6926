import { createAgentActivities } from './agent';
import { createAgentCliActivities } from './agent-cli';
import { createAuditActivities } from './audit';
import { createCommitActivities } from '../sandbox/activities/commit';
import type { ActivityDeps } from './deps';
import { createGitHubActivities } from './github';
import { heartbeating } from '../platform/heartbeat';
import { createProvisionActivities } from '../sandbox/activities/provision';
import { createPublishActivities } from './publish';
import { createReaperActivities } from '../sandbox/activities/reaper';
import { createPoolActivities } from '../sandbox/activities/pool';
import { createRepoPolicyActivities } from './repo-policy';
import { createSnapshotActivities } from '../sandbox/activities/snapshot-build';
import { createStepActivities } from '../sandbox/activities/steps';
import { createVerifyActivities } from '../sandbox/activities/verify';

export type { ActivityDeps } from './deps';

export function createActivities(deps: ActivityDeps) {
  return heartbeating(
    {
      ...createProvisionActivities(deps),
      ...createStepActivities(deps),
      ...createCommitActivities(deps),
      ...createAgentActivities(deps),
      ...createAgentCliActivities(deps),
      ...createVerifyActivities(deps),
      ...createPublishActivities(deps),
      ...createGitHubActivities(deps),
      ...createRepoPolicyActivities(deps),
      ...createReaperActivities(deps),
      ...createPoolActivities(deps),
      ...createAuditActivities(deps),
      ...createSnapshotActivities(deps),
    },
    deps.redactor,
  );
}

export type Activities = ReturnType<typeof createActivities>;
