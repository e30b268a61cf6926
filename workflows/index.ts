/** The workflows a worker registers (bundled from here). */
export { agentSession } from './session/workflow';
export { reapSandboxes } from './reaper';
export { pullRequestClosed } from './pull-request';
export { refreshSnapshot } from './snapshot';
