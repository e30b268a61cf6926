/** The workflows a worker registers (bundled from here). */
export { agentSession } from './session/workflow';
export { agentAttempts } from './attempts';
export { pilot } from './pilot/workflow';
export { findEscapedDefects } from './defects';
export { reapSandboxes } from './reaper';
export { pullRequestClosed } from './pull-request';
export { refreshSnapshot } from './snapshot';
