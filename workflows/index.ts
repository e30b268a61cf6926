export { agentSession } from './session';
export { reapSandboxes } from './reaper';
export { pullRequestClosed } from './pull-request';
export { refreshSnapshot } from './snapshot';
