import type { ApprovalPolicy } from '../workflows/api';
import type { ArtifactStore } from '../store/artifacts';
import type { AuditTrail } from '../store/audit';
import type { CheckpointStore } from '../sandbox/checkpoints';
import type { Database } from '../store/db';
import type { GitIdentity } from '../repos/git';
import type { GitHubSettings } from '../github/client';
import type { ModelSettings } from '../models/llm';
import type { Logger } from '../platform/log';
import type { AgentCliSettings } from '../sandbox/model-gateway';
import type { DockerSandboxes } from '../sandbox/docker';
import type { RepoLookupService } from '../repos/registry';
import type { Redactor } from '../platform/scrub';
import type { SnapshotRegistry } from '../sandbox/snapshots';

/** What activities need from the process; tests hand in real or local ones. */
export interface ActivityDeps {
  sandboxes: DockerSandboxes;
  artifacts: ArtifactStore;
  /** Host-side bare mirrors of repos (sandboxes have no network). */
  mirrorsDir: string;
  hostId: string;
  /** This worker's host queue, `<task queue>@<host id>`. */
  hostQueue: string;
  baseImage: string;
  /** Docker runtime of sandboxes (e.g. "runsc"); default: the engine's. */
  runtime?: string;
  /** Read-only root filesystem with /workspace and home as volumes (sandbox/docker.ts). @default true */
  readonlyRoot?: boolean;
  /** Host folder of the per-sandbox egress socket folders (sandbox/egress.ts). */
  egressRoot: string;
  /**
   * Host folder of Node.js builds and drydock's helpers, mounted read-only into
   * sandboxes (sandbox/toolchains.ts). @default <egressRoot>/../tools
   */
  toolsRoot?: string;
  /** The repo registry: only its repos are cloned, under their operator's limits. */
  repos: RepoLookupService;
  /** Development mode (DRYDOCK_DEV_MODE, on in `drydock up`): unregistered repos may be cloned too. */
  devMode: boolean;
  /** PEM file of extra CA certificates every sandbox trusts (DRYDOCK_EXTRA_CA_CERTS, sandbox/ca.ts). */
  extraCaCerts?: string;
  /**
   * The worker's one redactor (platform/scrub.ts): every secret the worker holds,
   * granted ones included. Whatever leaves a sandbox passes through it.
   */
  redactor: Redactor;
  /** Author and committer of drydock's commits (DRYDOCK_COMMIT_NAME/EMAIL). @default drydock <drydock@localhost> */
  commitIdentity?: GitIdentity;
  /** Secrets a session may grant to a step by name; never passed otherwise. */
  secrets: Record<string, string>;
  /** The server's approval policy (sessions can only tighten it). */
  policy: ApprovalPolicy;
  github: GitHubSettings;
  /** Model endpoints, keys and prices of the built-in agent loop (keys never leave the worker). */
  models: ModelSettings;
  /** Agent CLIs: their per-host cache and the model gateway's endpoints and keys (absent: no CLI template runs). */
  agentClis?: AgentCliSettings;
  /** Worker-side command for the `deploy` action. */
  deployCommand?: string;
  /** Worker variables the deploy command gets besides the basic ones (DRYDOCK_DEPLOY_ENV). @default [] */
  deployEnvNames?: string[];
  /** Whether a session's workflow is still running (the reaper spares its sandbox). */
  sessionIsRunning: (sessionId: string) => Promise<boolean>;
  /** Link to a session in the Temporal Web UI, for pull request bodies. */
  sessionLink: (sessionId: string) => string;
  /** Link to a session in the review console, for GitHub (default: sessionLink). */
  reviewLink?: (sessionId: string) => string;
  /** Postgres: the audit trail, snapshot registry and metrics live there. */
  db: Database;
  audit: AuditTrail;
  /** Each session's newest diff checkpoint (in `db`, so any host can resume from it). */
  checkpoints: CheckpointStore;
  /** How long a session waits for this host's queue before it re-provisions elsewhere (DRYDOCK_HOST_TIMEOUT). */
  hostTimeoutMs: number;
  /** The snapshot registry and build history (in `db`). */
  snapshots: SnapshotRegistry;
  /** Starts a snapshot build of a repo now (its schedule's trigger); false when it has none. */
  requestSnapshotBuild: (repo: string) => Promise<boolean>;
  log: Logger;
}
