export { agentSession } from './session';
export { reapSandboxes } from './reaper';
export { refreshSnapshot } from './snapshot';
