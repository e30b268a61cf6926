/**
 * What the sandbox's activities need from the worker process: the sandbox
 * runtime, the host's folders and identity, the stores, and the repo mirrors
 * (MirrorDeps). Tests hand in real or local ones.
 */
import type { HostLimits } from './admission';
import type { ArtifactStore } from '../../store/artifacts';
import type { AuditTrail } from '../../store/audit';
import type { Database } from '../../store/db';
import type { GitIdentity } from '../../repos/git';
import type { MirrorDeps } from '../../repos/mirror';
import type { Logger } from '../../platform/log';
import type { Redactor } from '../../platform/scrub';
import type { CheckpointStore } from '../checkpoints';
import type { SandboxProvider } from '../provider';
import type { AgentCliSettings } from '../model-gateway';
import type { SnapshotRegistry } from '../snapshots';
import type { CliChildAnswer, CliChildRequest } from '../../workflows/api';

export interface SandboxDeps extends MirrorDeps {
  /** Makes, runs and removes this host's sandboxes (sandbox/provider.ts). */
  sandboxes: SandboxProvider;
  artifacts: ArtifactStore;
  hostId: string;
  /** This worker's host queue, `<task queue>@<host id>`. */
  hostQueue: string;
  baseImage: string;
  /** Docker runtime of sandboxes (e.g. "runsc"); default: the engine's. */
  runtime?: string;
  /** Read-only root filesystem with /workspace and home as volumes (sandbox/provider.ts). @default true */
  readonlyRoot?: boolean;
  /** Host folder of the per-sandbox egress socket folders (sandbox/egress.ts). */
  egressRoot: string;
  /**
   * Host folder of Node.js builds and drydock's helpers, mounted read-only into
   * sandboxes (sandbox/toolchains.ts). @default <egressRoot>/../tools
   */
  toolsRoot?: string;
  /**
   * Registries every repo's images may be pulled from at a snapshot build
   * (DRYDOCK_ALLOWED_REGISTRIES), beside each repo's own (`--allow-registry`). @default none
   */
  allowedRegistries?: string[];
  /** PEM file of extra CA certificates every sandbox trusts (DRYDOCK_EXTRA_CA_CERTS, sandbox/ca.ts). */
  extraCaCerts?: string;
  /** The isolated builder's time limit for one build, ms (DRYDOCK_BUILD_TIMEOUT). @default 480_000 (BUILD_LIMITS) */
  buildTimeoutMs?: number;
  /** The isolated builder's image (sandbox/builder.ts); default: built from sandbox-images/builder on first use. */
  builderImage?: () => Promise<string>;
  /**
   * The worker's one redactor (platform/scrub.ts): every secret the worker holds,
   * granted ones included. Whatever leaves a sandbox passes through it.
   */
  redactor: Redactor;
  /** Author and committer of drydock's commits (DRYDOCK_COMMIT_NAME/EMAIL). @default drydock <drydock@localhost> */
  commitIdentity?: GitIdentity;
  /** Secrets a session may grant to a step by name; never passed otherwise. */
  secrets: Record<string, string>;
  /** Agent CLIs: their per-host cache and the model gateway's endpoints and keys (absent: no CLI template runs). */
  agentClis?: AgentCliSettings;
  /** Host folder of code-server (infra/code-server.sh), mounted read-only at /opt/drydock-editor (sandbox/editor.ts); absent: no editor. */
  editorDir?: string;
  /**
   * Asks a session for a child session and waits for its end: an agent CLI's
   * start_child call at the gateway (mcp/child-tool.ts). Absent: CLIs are not offered it.
   */
  startChildSession?: (sessionId: string, request: CliChildRequest) => Promise<CliChildAnswer>;
  /** Whether a session's workflow is still running (the reaper spares its sandbox). */
  sessionIsRunning: (sessionId: string) => Promise<boolean>;
  /** Postgres: the audit trail, snapshot registry and metrics live there. */
  db: Database;
  audit: AuditTrail;
  /** Each session's newest diff checkpoint (in `db`, so any host can resume from it). */
  checkpoints: CheckpointStore;
  /** How long a session waits for this host's queue before it re-provisions elsewhere (DRYDOCK_HOST_TIMEOUT). */
  hostTimeoutMs: number;
  /** What this host admits: its sandbox slots, memory, CPUs and free disk (admission.ts); absent: no bound. */
  hostLimits?: HostLimits;
  /** The sessions waiting for a slot, first in line first (Temporal visibility): a free slot goes to them in order. */
  queuedSessions?: () => Promise<{ sessionId: string }[]>;
  /** The snapshot registry and build history (in `db`). */
  snapshots: SnapshotRegistry;
  /** Starts a snapshot build of a repo now (its schedule's trigger); false when it has none. */
  requestSnapshotBuild: (repo: string) => Promise<boolean>;
  log: Logger;
}
