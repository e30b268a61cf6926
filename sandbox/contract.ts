/**
 * The sandbox activities' contract with workflows and clients: what goes in
 * and comes out of provisioning, steps, commits and teardown. Types only, so
 * workflow code can `import type` them.
 */
import type { SecretFound } from '../workflows/rules/change-secrets';
import type { GitIdentity } from '../repos/git';
import type { ScriptStep } from '../workflows/input';
import type { EgressRule } from './egress';
import type { SandboxFault } from './faults';
import type { SetupEgressRule } from '../repos/registry';
import type { AgentCliName, ModelProtocol } from '../workflows/rules/agent-clis';
import type { TestReport } from '../workflows/api';
import type { McpServer } from '../workflows/mcp-servers';
import type { RunnableService } from './services';
import type { FeatureStart } from './features';

export type { FeatureStart };

export interface ProvisionInput {
  sessionId: string;
  repo: { url: string; ref?: string };
  /** tmpBytes: the size of /tmp (it counts against the memory limit); diskBytes: /workspace and home together. */
  limits: { cpus: number; memoryBytes: number; pids: number; tmpBytes: number; diskBytes: number };
  /** ISO time after which the reaper may remove the sandbox. */
  expiresAt: string;
  /**
   * 0 (or absent): the session's first sandbox. n > 0: the n-th replacement
   * of a lost one, which starts from the session's last checkpoint.
   */
  generation?: number;
  /** Which of the repo's snapshots on the host to start from: the newest (default), or the oldest kept (a drill's stale snapshot). */
  snapshot?: 'newest' | 'oldest';
}

/** Where one of a session's sandboxes is: enough to remove it on its own host. */
export interface SandboxPlace {
  name: string;
  host: string;
  /** The task queue of the host that owns the sandbox: later sandbox activities go there. */
  hostQueue: string;
  /** How long the session waits for `hostQueue` before it counts the host as lost. */
  hostTimeoutMs: number;
  /** Which replacement this is (see ProvisionInput.generation). */
  generation?: number;
}

export interface Sandbox extends SandboxPlace {
  image: string;
  baseCommit: string;
  /** The snapshot the sandbox started from; absent: the cold path (clone in the session). */
  snapshot?: SnapshotUse;
  /** Setup the session must run before the agent (cold path, or its inputs changed since the snapshot). */
  setup?: SetupPlan;
  /** The checkpoint a replacement started from. */
  restored?: { step: string; bytes: number; services?: { service: string; step: string; bytes: number }[] };
  /**
   * What earlier attempts of this provisioning may have made on other hosts (an
   * attempt cut off, retried elsewhere): the session removes them on their hosts.
   */
  leftBehind?: SandboxPlace[];
  /** The repo's app, when it asks for it to run for the agent (`app.forAgent`): started after setup, before the first step. */
  app?: AgentApp;
  /** The repo's app (any `app:`), for people to preview: started when one asks (workers/routes/preview.ts). */
  preview?: AgentApp;
  /**
   * The dev container's features' postStartCommands, in install order: run
   * at each start of a sandbox, after setup and before the first step and
   * the app (sandbox/activities/agent-app.ts, startFeatures).
   */
  featureStarts?: FeatureStart[];
}

/** An app started for the agent (sandbox/activities/agent-app.ts). */
export interface AgentApp {
  start: string;
  port: number;
  readyPath: string;
  readyTimeoutMs: number;
}

export interface SnapshotUse {
  image: string;
  commit: string;
  /** How old the snapshot was when the session started, in ms. */
  ageMs: number;
  /** Commits the session's ref had that the snapshot lacked (absent when unknown: history rewritten). */
  behind?: number;
}

export interface SetupPlan {
  command: string;
  timeoutMs: number;
  /** What setup may reach through the egress proxy (the repo's registries). */
  egress: SetupEgressRule[];
  /** Why it runs: no snapshot yet, or which setup inputs changed. */
  reason: string;
  /** Its own variables (an inferred setup's caches, its virtualenv), as a snapshot build gives them. */
  env?: Record<string, string>;
}

export interface StepInput {
  sandbox: string;
  sessionId: string;
  /** Unique per session and step ("step-1", "verify"): names the step in logs, artifacts and the audit trail. */
  key: string;
  /**
   * 32 hex digits the workflow chose for this step alone (uuid4): names the
   * run's state in the sandbox, where a retry finds the earlier run. An
   * earlier step cannot know it, so it cannot have prepared a fake result.
   */
  nonce: string;
  step: ScriptStep;
  timeoutMs: number;
  /**
   * Hosts (and methods) this step may reach through the egress proxy, which
   * is open for this step only. Absent or empty: the step has no way out.
   */
  egress?: EgressRule[];
  /** Plain (non-secret) environment of this step only. */
  env?: Record<string, string>;
  /**
   * Names of worker secrets granted to this step only: `DRYDOCK_SECRET_<NAME>`
   * on the worker becomes `<NAME>` in the step's environment. Values never
   * travel through Temporal, and are scrubbed from the output, the artifact
   * and the logs.
   */
  secrets?: string[];
  /** An agent step: when it ends, the working tree against this base commit is the session's new checkpoint. */
  checkpointBase?: string;
  /**
   * A setup step (a snapshot build's or a session's): when it succeeds, the files it wrote
   * become the workspace's setup baseline (handle.ts SETUP_REF), never part of the agent's change.
   */
  recordsSetup?: boolean;
  /**
   * An agent CLI's step: its model calls go through the model gateway
   * (sandbox/model-gateway.ts), open for this step only, with what the session
   * may still spend; `cli` names the CLI whose JSON events become progress.
   * A script step's gateway has neither `cli` nor `protocol`: no model, only
   * start_child for its drydock-child command (`children`).
   */
  gateway?: {
    cli?: AgentCliName;
    protocol?: ModelProtocol;
    maxCalls?: number;
    maxTokens?: number;
    maxCostUsd?: number;
    /** The repo's MCP servers, served to the CLI at the gateway (mcp/gateway.ts), and the session's calls of each so far. */
    mcp?: { servers: McpServer[]; calls: Record<string, number> };
    /** start_child is served at /mcp/drydock (mcp/child-tool.ts): the session may start one more child now. */
    children?: boolean;
  };
  /**
   * A test command's step: once its result is known, the JUnit XML it wrote comes back with it
   * (StepResult.report): these files, or else XML reports in the usual places written during the step.
   */
  testReport?: { files?: string[] };
}

/** What an agent CLI's model calls used through the gateway in one step. */
export interface GatewayResult {
  calls: number;
  inputTokens: number;
  outputTokens: number;
  cachedTokens: number;
  costUsd: number;
  /** Requests refused: another path or host, a tunnel, or a spent budget. */
  refused: number;
  /** The budget that made the gateway stop forwarding. */
  stopped?: 'max_turns' | 'max_tokens' | 'max_cost';
  /** Every call and refusal (artifact). */
  log: string;
  /** The CLI's progress: its last tool call and its final answer. */
  lastTool?: string;
  final?: string;
  /** MCP through the gateway: calls made by server (for maxCalls), calls asked for (refused included), requests refused (token, path). */
  mcp?: { calls: Record<string, number>; asked: number; refused: number };
}

export interface StepResult {
  exitCode: number;
  timedOut: boolean;
  outputTail: string;
  artifact?: string;
  /** The sandbox limit that stopped the step, when one did. */
  failure?: SandboxFault;
  /** What the step asked of the egress proxy (the whole log is in `artifact` of the same name + .egress.jsonl). */
  egress?: { allowed: number; refused: number; log: string };
  gateway?: GatewayResult;
  /** With StepInput.testReport: the JUnit report the step wrote, if it wrote one. */
  report?: TestReport;
}

/** The change of a session as drydock commits it (sandbox/activities/commit.ts). */
export interface ChangeSpec {
  sessionId: string;
  repoUrl: string;
  branch: string;
  /** The commit's subject; drydock adds the trailers. */
  message: string;
  /** Names the agent in the commit's Drydock-Agent trailer. */
  agent: string;
  /** The commit the sandbox was provisioned at (its snapshot's base). */
  baseCommit: string;
  /** The only parent of drydock's commit: the base, or in a later round the commit pushed before. */
  parent: string;
  /** The commit's date: the same tree committed again (in a replacement sandbox) is the same commit. */
  date: string;
}

export interface CommitInput extends ChangeSpec {
  sandbox: string;
  /**
   * A later round's change: besides the whole diff, what changed since each
   * earlier round's commit (an interdiff each), kept as artifacts for the reviewer.
   */
  interdiffs?: { round: number; since: { round: number; commit: string }[] };
  /** Takes the notes the agent proposed (repo memory's notes file) in the same exec, and returns them. */
  takeNotes?: boolean;
}

export interface CommitResult {
  /** drydock's commit: the approved tree on the parent, by `author`, with the session's trailers. */
  commit: string;
  changed: boolean;
  diffstat: string;
  /** The files the change adds or modifies (at most the first 300): where its check run may annotate. */
  files?: string[];
  /** sha256 of the target branch, the parent and the tree: what an approval binds to. */
  changeHash: string;
  /** Author and committer of the commit (the worker's identity). */
  author: GitIdentity;
  /** Artifact reference of the whole diff, for the review console: the pushed tree's, byte for byte. */
  diff?: string;
  /**
   * The change holds the value of a secret the worker knows (named, with
   * where): it is never published, and its diff is not stored.
   */
  blocked?: SecretFound[];
  /**
   * Files setup wrote (a lockfile `npm install` made) that nobody changed since: left out of
   * the change, so never pushed; how many, and the first of them (git's quoting).
   */
  setupFiles?: { count: number; paths: string[] };
  /**
   * With takeNotes: the notes the agent proposed since the last commit (scrubbed, each
   * bounded, at most NOTE_LIMITS.perRound), for the workflow to keep at the round's end.
   */
  notes?: string[];
}

export interface DestroyInput {
  sessionId: string;
  generation?: number;
  /** A lost sandbox being replaced: its checkpoint stays for the replacement. */
  replaced?: boolean;
  /**
   * Parking (with `replaced`): the working tree is checkpointed against this
   * base commit first, edits made by hand included; a sandbox already gone keeps the checkpoint it had.
   */
  checkpointBase?: string;
}

/** What `startSnapshotBuild` prepared: the build container with the repo in /workspace, and what to run. */
export interface SnapshotBuildPlan {
  /** The refreshSnapshot workflow id; also the build container's session label. */
  buildId: string;
  repo: string;
  /** The build container. */
  sandbox: string;
  /** The snapshot's base, the repo's environment or the base image: the build container runs it (or `reused.image`). */
  image: string;
  host: string;
  hostQueue: string;
  commit: string;
  setup: string;
  setupHash: string;
  setupTimeoutMs: number;
  egress: SetupEgressRule[];
  keep: number;
  /** Where the setup command came from (recorded with the snapshot). */
  setupSource: string;
  /** Environment an inferred setup's tool needs, in sessions too (its caches). */
  setupEnv: Record<string, string>;
  /** The services setup ran beside, their images pinned. */
  services: RunnableService[];
  /**
   * Setup's result taken from the newest snapshot (sandbox/snapshots.ts SETUP_REUSE_MAX_AGE_MS):
   * the build container starts from its image, caught up to `commit`, and setup does not run.
   */
  reused?: { buildId: string; commit: string; image: string; setupAt: string };
}

export interface SnapshotBuildResult {
  buildId: string;
  repo: string;
  status: 'ready' | 'failed';
  commit: string;
  image?: string;
  sizeBytes?: number;
  durationMs?: number;
  /** Why the build failed (the previous snapshot stays in service). */
  error?: string;
  /** What it read of the repo's environment that may not be what its developers meant (sandbox/snapshots.ts boundedNotes). */
  notes?: string[];
  /** Images removed: older snapshots beyond the newest K, and the environment images newer ones replaced. */
  removed: string[];
}

/** A sandbox the reaper removed, and why. */
export interface Reaped {
  sandbox: string;
  sessionId: string;
  reason: string;
}
