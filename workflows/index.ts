export { agentSession } from './session';
export { reapSandboxes } from './reaper';
