/**
 * The sandbox's front door: what the rest of drydock uses of sandbox/, and
 * the only file of it that code outside imports (test/unit/floors.test.ts
 * holds this), beside contract.ts, the types workflows and clients share
 * with the sandbox's activities. Its other files are its own to change. The
 * Kubernetes provider is not here: it loads on demand (host-provider.ts).
 */

// The activities the registry (activities/index.ts) composes, and the dependencies they take.
export type { HostLimits } from './activities/admission';
export { createAgentAppActivities } from './activities/agent-app';
export { createCommitActivities } from './activities/commit';
export type { SandboxDeps } from './activities/deps';
export { createFaultActivities } from './activities/faults';
export { createPoolActivities } from './activities/pool';
export { createProvisionActivities } from './activities/provision';
export { createReaperActivities } from './activities/reaper';
export { createSnapshotActivities } from './activities/snapshot-build';
export { createStepActivities, takeCheckpoint } from './activities/steps';
export { createVerifyActivities } from './activities/verify';

// Running things in a sandbox: the provider, its handle, commands and their output.
export { hostProvider, sandboxRuntimeOf, startHostProvider } from './host-provider';
export { LABELS, type SandboxProvider, type SandboxSpec } from './provider';
export { DockerProvider } from './docker/provider';
export { sandboxOf, type ShellScript } from './handle';
export { browserContainerName, permanent } from './activities/container';
export { tail } from './activities/output';
export { parseRunOnce, runOnceCommand } from './activities/run-once';
export { toolExecutors } from './activities/tool-exec';
export { CheckpointStore } from './checkpoints';
export { APP_LOG_NAME, linesAsked, readLog } from './service-logs';
export { plainLogText } from '../platform/scrub';
export { serviceContainers, startServices, type RunnableService } from './services';

// A change leaving the sandbox: the commit the worker makes of its bundle.
export { commitMessage, commitSpec, exportArgv, secretsInCommit, withSandboxBundle } from './activities/commit';

// A repo's environment and its snapshots.
export { declaredEnvironment } from './activities/environment';
export { declaredStack } from './activities/services';
export { buildIsolated, PACKAGE_REGISTRIES } from './builder';
export { machineExtraCa } from './ca';
export { dockerfileBases } from './dockerfile-bases';
export { matchRule, restrictedAddress } from './egress';
export { agentCliSettings } from './model-gateway';
export { POOL_LABEL, POOL_MAX, PoolRegistry } from './pool-registry';
export { RepoFileError, type RepoObject } from './repo-files';
export { DEVCONTAINER_FILE, EnvironmentError, type RepoEnvironment } from './repo-image';
export {
  deleteSnapshotSchedules,
  ensureSnapshotSchedules,
  inferredSetupAt,
  OPERATOR_SETUP_SOURCE,
  removeSnapshotSchedules,
  repoSlug,
  SnapshotRegistry,
  triggerSnapshotBuild,
  type SnapshotBuildRow,
} from './snapshots';
export { HELPERS_MOUNT, Toolchains } from './toolchains';

// People's ways in: attach, the web terminal, the shared shell, the editor, the desktop, the app's preview.
export {
  ATTACH_PROTOCOL,
  AttachRefused,
  boundedSize,
  bridgeShell,
  reachableSandbox,
  requestAttach,
  requestDetach,
  shellOnThisHost,
  shellThroughServer,
  whileAttached,
} from './attach';
export {
  bridgeWebTerminal,
  CLOSE,
  SessionTerminals,
  TERMINAL_LIMITS,
  TerminalTickets,
  type InputBatch,
  type TerminalPresence,
} from './web-terminal';
export { SessionPeople, SessionShells, type Person, type ShellMember } from './shared-shell';
export {
  EDITOR_LIMITS,
  EDITOR_MOUNT,
  EDITOR_PORT,
  editorDirOf,
  editorLabel,
  editorLabelOf,
  editorOrigin,
  EditorRefused,
  SessionEditors,
} from './editor';
export {
  bridgeDesktop,
  desktopContainerName,
  DesktopRefused,
  SessionDesktops,
  startDesktop,
  VNC_BRIDGE,
  VNC_SOCKET,
} from './desktop';
export {
  appConnection,
  PREVIEW_COOKIE,
  PREVIEW_LIMITS,
  PREVIEW_OWN_PATH,
  previewLabelOf,
  previewOrigin,
  PreviewPasses,
  type PreviewPass,
} from './preview';

// The contract's types (contract.ts), for those who take them from here.
export type * from './contract';
