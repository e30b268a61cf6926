import { createAgentActivities } from './agent';
import { createAgentCliActivities } from './agent-cli';
import { createAuditActivities } from './audit';
import { createCommitActivities } from './commit';
import type { ActivityDeps } from './deps';
import { createGitHubActivities } from './github';
import { heartbeating } from './heartbeat';
import { createProvisionActivities } from './provision';
import { createPublishActivities } from './publish';
import { createReaperActivities } from './reaper';
import { createPoolActivities } from './pool';
import { createRepoPolicyActivities } from './repo-policy';
import { createSnapshotActivities } from './snapshot';
import { createStepActivities } from './steps';
import { createVerifyActivities } from './verify';
import { createLinearActivities } from '../linear/activities';
import { createSlackActivities } from '../slack/activities';

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
      ...createSlackActivities(deps),
      ...createLinearActivities(deps),
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
