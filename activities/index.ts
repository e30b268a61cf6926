import { createAgentActivities } from './agent';
import { createAuditActivities } from './audit';
import type { ActivityDeps } from './deps';
import { createGitHubActivities } from './github';
import { heartbeating } from './heartbeat';
import { createPublishActivities } from './publish';
import { createReaperActivities } from './reaper';
import { createSandboxActivities } from './sandbox';
import { createSnapshotActivities } from './snapshot';
import { createVerifyActivities } from './verify';

export type { ActivityDeps } from './deps';

export function createActivities(deps: ActivityDeps) {
  return heartbeating({
    ...createSandboxActivities(deps),
    ...createAgentActivities(deps),
    ...createVerifyActivities(deps),
    ...createPublishActivities(deps),
    ...createGitHubActivities(deps),
    ...createReaperActivities(deps),
    ...createAuditActivities(deps),
    ...createSnapshotActivities(deps),
  });
}

export type Activities = ReturnType<typeof createActivities>;
