export { agentSession } from './session';
export { reapSandboxes } from './reaper';
export { pullRequestClosed } from './pull-request';
