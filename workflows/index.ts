export { agentSession } from './session/workflow';
export { reapSandboxes } from './reaper';
export { pullRequestClosed } from './pull-request';
export { refreshSnapshot } from './snapshot';
