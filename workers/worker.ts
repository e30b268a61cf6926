/**
 * The drydock worker: polls the shared task queue (`drydock`: workflows and
 * provisioning) and this host's queue (`drydock@<host>`: every later activity
 * on the sandboxes this host owns). More Docker hosts = more workers.
 */
import {
  type HostLimits,
  CheckpointStore,
  sandboxRuntimeOf,
  startHostProvider,
  type SandboxProvider,
  ensureSnapshotSchedules,
  SnapshotRegistry,
  triggerSnapshotBuild,
  agentCliSettings,
  editorDirOf,
} from '../sandbox';
import { queuedSessions } from '../platform/sessions';
import type { Server } from 'node:http';
import path from 'node:path';
import type { Pool } from 'pg';
import { type Client, ScheduleAlreadyRunning, ScheduleOverlapPolicy } from '@temporalio/client';
import { WorkflowNotFoundError } from '@temporalio/common';
import {
  NativeConnection,
  Worker,
  type ActivityInterceptorsFactory,
  type WorkflowBundleOption,
} from '@temporalio/worker';
import { createHostActivities, createSharedActivities, type ActivityDeps } from '../activities';
import { ArtifactStore } from '../store/artifacts';
import { AuditTrail, loadAuditKey } from '../store/audit';
import { openDatabase } from '../store/db';
import { hostGauges, serveMetrics, workerMetrics } from '../platform/metrics';
import { redactorOf } from '../platform/scrub';
import { HEARTBEAT_INTERVAL_MS } from '../platform/heartbeat';
import { selfApprovalForbidden, type Config } from '../platform/config';
import type { ApprovalPolicy } from '../workflows/api';
import { forgeSettings } from '../activities/forges';
import type { ModelSettings } from '../models/llm';
import { createLogger, type Logger } from '../platform/log';
import { askForChild, sessionState } from '../platform/sessions';
import { sessionLink } from '../platform/temporal';
import { connectClient } from '../platform/temporal-connection';
import { seededRepoLookup } from '../repos/registry';

import { baseImageTag } from '../sandbox-images/base-image';
import { ownDataDir } from '../platform/data-dir';
import { tracing } from './telemetry';
import { workflowBundle } from './workflow-bundle';

export function modelSettings(config: Config): ModelSettings {
  return {
    defaultBaseUrl: config.DRYDOCK_MODEL_BASE_URL,
    defaultApi: config.DRYDOCK_MODEL_API,
    defaultApiKey: config.DRYDOCK_MODEL_API_KEY,
    endpoints: config.DRYDOCK_MODEL_ENDPOINTS,
    prices: config.DRYDOCK_MODEL_PRICES,
  };
}

export function hostQueueOf(config: Pick<Config, 'DRYDOCK_TASK_QUEUE' | 'DRYDOCK_HOST_ID'>): string {
  return `${config.DRYDOCK_TASK_QUEUE}@${config.DRYDOCK_HOST_ID}`;
}

/** How often each host's reaper runs. */
export const REAP_EVERY = '5m';

/**
 * The Schedule that runs `reapSandboxes` for this worker's host
 * (`drydock-reaper-<host id>`, every REAP_EVERY, overlaps skipped); created
 * once, kept if it exists.
 */
export async function ensureReaperSchedule(client: Client, config: Config): Promise<void> {
  try {
    await client.schedule.create({
      scheduleId: `drydock-reaper-${config.DRYDOCK_HOST_ID}`,
      spec: { intervals: [{ every: REAP_EVERY }] },
      action: {
        type: 'startWorkflow',
        workflowType: 'reapSandboxes',
        workflowId: `drydock-reap-${config.DRYDOCK_HOST_ID}`,
        taskQueue: config.DRYDOCK_TASK_QUEUE,
        args: [{ hostQueue: hostQueueOf(config) }],
      },
      policies: { overlap: ScheduleOverlapPolicy.SKIP },
    });
  } catch (err) {
    if (!(err instanceof ScheduleAlreadyRunning)) throw err;
  }
}

/** How often merged changes are searched for escaped defects. */
export const DEFECTS_EVERY = '1h';

/**
 * The Schedule that runs `findEscapedDefects` (`drydock-escaped-defects-<task queue>`:
 * one per deployment, whichever worker starts first makes it); kept if it exists.
 */
export async function ensureDefectSchedule(client: Client, config: Config): Promise<void> {
  try {
    await client.schedule.create({
      scheduleId: `drydock-escaped-defects-${config.DRYDOCK_TASK_QUEUE}`,
      spec: { intervals: [{ every: DEFECTS_EVERY }] },
      action: {
        type: 'startWorkflow',
        workflowType: 'findEscapedDefects',
        workflowId: `drydock-escaped-defects-${config.DRYDOCK_TASK_QUEUE}`,
        taskQueue: config.DRYDOCK_TASK_QUEUE,
        args: [],
      },
      policies: { overlap: ScheduleOverlapPolicy.SKIP },
    });
  } catch (err) {
    if (!(err instanceof ScheduleAlreadyRunning)) throw err;
  }
}

/**
 * Records this host and gives it a refresh schedule for every registered
 * repo (`drydock-snapshot-<repo>@<host>`), so it builds its own snapshots.
 */
async function scheduleHostSnapshots(client: Client, snapshots: SnapshotRegistry, config: Config): Promise<void> {
  const host = { id: config.DRYDOCK_HOST_ID, queue: hostQueueOf(config) };
  await snapshots.recordHost(host);
  await ensureSnapshotSchedules(client, {
    repos: await snapshots.repos(),
    hosts: [host],
    taskQueue: config.DRYDOCK_TASK_QUEUE,
  });
}

export interface DrydockWorker {
  /** Resolves when both pollers stopped (after shutdown, or a fatal error). */
  run(): Promise<void>;
  /** Stops polling and lets in-flight activities finish (up to the grace time). */
  shutdown(): void;
}

/**
 * SIGTERM or a first Ctrl-C drains the worker: it stops polling, lets the
 * activities it runs finish within DRYDOCK_SHUTDOWN_GRACE (then cancels them:
 * they retry on another worker), and `run()` returns. A second signal exits at
 * once; what was running is retried elsewhere after its heartbeat timeout.
 */
export function drainOnSignals(worker: DrydockWorker, config: Pick<Config, 'DRYDOCK_SHUTDOWN_GRACE'>, log: Logger) {
  let received = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    if (++received === 1) {
      log.warn(
        { signal, graceSeconds: config.DRYDOCK_SHUTDOWN_GRACE / 1000 },
        'draining: no new work; running activities may finish within the grace time (signal again to stop at once)',
      );
      worker.shutdown();
    } else {
      log.error({ signal }, 'stopping at once: running activities will retry on another worker');
      process.exit(130);
    }
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
}

/**
 * A promise rejected with nobody listening (a bug: every promise of the
 * sandbox code is awaited or handled) is logged as an error with its stack,
 * and the worker keeps serving. Nobody awaited it, so no activity's result
 * depended on it, while exiting would cut off every session's activities on
 * this host. Synchronous uncaught exceptions still end the process (Node's
 * default): they may leave a handler half done. See docs/operations.md.
 */
export function logUnhandledRejections(log: Logger): void {
  process.on('unhandledRejection', (reason) => {
    log.error({ err: reason }, 'unhandled rejection (a drydock bug; the worker keeps serving)');
  });
}

/** With DRYDOCK_METRICS_PORT set: GET /metrics with this host's gauges, drydock's counters and the SDK's metrics. */
async function startWorkerMetrics(
  config: Config,
  read: { sandboxes: SandboxProvider; pool: Pool },
  sdkMetricsUrl: string | undefined,
  log: Logger,
): Promise<Server | undefined> {
  if (config.DRYDOCK_METRICS_PORT === undefined) return undefined;
  hostGauges(config.DRYDOCK_HOST_ID, {
    sandboxes: async () => (await read.sandboxes.list(config.DRYDOCK_HOST_ID)).length,
    pool: read.pool,
  });
  const sdk = sdkMetricsUrl ? async () => (await fetch(sdkMetricsUrl)).text() : undefined;
  const { server, port } = await serveMetrics(
    workerMetrics,
    config.DRYDOCK_METRICS_PORT,
    config.DRYDOCK_METRICS_HOST,
    sdk,
  );
  log.info({ port, sdkMetrics: Boolean(sdk) }, 'metrics on /metrics');
  return server;
}

/** Whether a session's workflow runs now (a finished or unknown one does not). */
async function sessionIsRunning(client: Client, sessionId: string): Promise<boolean> {
  try {
    return (await client.workflow.getHandle(sessionId).describe()).status.name === 'RUNNING';
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return false;
    throw err;
  }
}

/** What this host admits (sandbox/activities/admission.ts). */
function hostLimitsOf(config: Config): HostLimits {
  return {
    hostId: config.DRYDOCK_HOST_ID,
    sandboxes: config.DRYDOCK_MAX_SANDBOXES,
    memoryBytes: config.DRYDOCK_HOST_MEMORY,
    cpus: config.DRYDOCK_HOST_CPUS,
    diskFreeBytes: config.DRYDOCK_HOST_DISK_FREE,
  };
}

/** What every sandbox gets mounted read-only: the agent CLIs and, when this host has it, the editor (docs/editor.md). */
function mountedTools(config: Config) {
  return { agentClis: agentCliSettings(config), editorDir: editorDirOf(config.DRYDOCK_EDITOR_DIR) };
}

/**
 * This host's sandbox provider, its settings and engine checked before the
 * worker takes any work: a namespace that does not exist or an engine that
 * does not answer stops the worker with one line naming the setting
 * (ProviderCheckFailed), not the first session minutes later.
 */
async function startSandboxes(config: Config, log: Logger): Promise<{ sandboxes: SandboxProvider; baseImage: string }> {
  const baseImage = config.DRYDOCK_BASE_IMAGE ?? (await baseImageTag());
  const baseImageSetting = config.DRYDOCK_BASE_IMAGE
    ? 'DRYDOCK_BASE_IMAGE'
    : `DRYDOCK_BASE_IMAGE (unset: ${baseImage})`;
  const sandboxes = await startHostProvider(config, { baseImage, baseImageSetting });
  log.info({ provider: sandboxes.name, baseImage }, 'sandbox provider checked');
  return { sandboxes, baseImage };
}

export async function createWorker(opts: {
  config: Config;
  connection: NativeConnection;
  log?: Logger;
  /** Pre-bundled workflow code (a test's); default: the kept bundle of workflows/ (workflow-bundle.ts). */
  workflowBundle?: WorkflowBundleOption;
  /** Wrapped around every activity (the fault drills of test/support/fault-worker.ts). */
  activityInterceptors?: ActivityInterceptorsFactory[];
  /** The SDK runtime's metrics exporter (installTemporalRuntime), added to this worker's /metrics. */
  sdkMetricsUrl?: string;
}): Promise<DrydockWorker> {
  const { config, connection } = opts;
  const log = opts.log ?? createLogger(config.LOG_LEVEL, config.LOG_FORMAT);
  const hostQueue = hostQueueOf(config);
  await ownDataDir(config.DRYDOCK_DATA_DIR);
  const { sandboxes, baseImage } = await startSandboxes(config, log);
  const auditKey = loadAuditKey(config);
  const traces = tracing(config);
  const plugins = traces ? [traces.plugin] : [];
  const client = await connectClient(config, plugins);
  await ensureReaperSchedule(client, config);
  await ensureDefectSchedule(client, config);
  const db = await openDatabase(config, log);
  const redactor = redactorOf(config);
  const snapshots = new SnapshotRegistry(db.pool);
  await scheduleHostSnapshots(client, snapshots, config);
  const metrics = await startWorkerMetrics(config, { sandboxes, pool: db.pool }, opts.sdkMetricsUrl, log);
  const deps: ActivityDeps = {
    db,
    redactor,
    audit: new AuditTrail(db.pool, config.DRYDOCK_HOST_ID, redactor, auditKey),
    commitIdentity: { name: config.DRYDOCK_COMMIT_NAME, email: config.DRYDOCK_COMMIT_EMAIL },
    checkpoints: new CheckpointStore(db.pool),
    hostTimeoutMs: config.DRYDOCK_HOST_TIMEOUT,
    hostLimits: hostLimitsOf(config),
    // Only this deployment's line (its task queue); without an answer from visibility, no line is kept.
    queuedSessions: () => queuedSessions(client, { taskQueue: config.DRYDOCK_TASK_QUEUE }).catch(() => []),
    snapshots,
    repos: await seededRepoLookup(db.pool, config),
    devMode: config.DRYDOCK_DEV_MODE,
    requestSnapshotBuild: (repo) => triggerSnapshotBuild(client, repo, config.DRYDOCK_HOST_ID),
    sandboxes,
    artifacts: new ArtifactStore(path.join(config.DRYDOCK_DATA_DIR, 'artifacts')),
    mirrorsDir: path.join(config.DRYDOCK_DATA_DIR, 'mirrors'),
    hostId: config.DRYDOCK_HOST_ID,
    hostQueue,
    baseImage,
    runtime: sandboxRuntimeOf(config),
    readonlyRoot: config.DRYDOCK_READONLY_ROOTFS,
    egressRoot: config.DRYDOCK_EGRESS_DIR ?? path.join(config.DRYDOCK_DATA_DIR, 'egress'),
    extraCaCerts: config.DRYDOCK_EXTRA_CA_CERTS,
    buildTimeoutMs: config.DRYDOCK_BUILD_TIMEOUT,
    allowedRegistries: config.DRYDOCK_ALLOWED_REGISTRIES,
    secrets: config.secrets,
    policy: serverPolicy(config),
    ...forgeSettings(config),
    gitHosts: config.DRYDOCK_GIT_CREDENTIALS,
    ...chatSettings(config),
    models: modelSettings(config),
    ...mountedTools(config),
    deployCommand: config.DRYDOCK_DEPLOY_COMMAND,
    allowDefaultBranchPush: config.DRYDOCK_ALLOW_DEFAULT_BRANCH_PUSH,
    deployEnvNames: config.DRYDOCK_DEPLOY_ENV,
    sessionLink: (sessionId) => sessionLink(config, sessionId),
    reviewLink: config.DRYDOCK_CONSOLE_URL
      ? (sessionId) => `${config.DRYDOCK_CONSOLE_URL!.replace(/\/$/, '')}/sessions/${encodeURIComponent(sessionId)}`
      : undefined,
    operator: {
      maxAttempts: config.DRYDOCK_MAX_ATTEMPTS,
      pilotConcurrency: config.DRYDOCK_PILOT_CONCURRENCY,
      rotateCommand: config.DRYDOCK_ROTATE_COMMAND,
    },
    sessionState: (sessionId) => sessionState(client, sessionId),
    startChildSession: (sessionId, request) => askForChild(client, sessionId, request),
    defectWindowMs: config.DRYDOCK_DEFECT_WINDOW,
    sessionIsRunning: (sessionId) => sessionIsRunning(client, sessionId),
    log,
  };
  const common = {
    connection,
    plugins,
    namespace: config.TEMPORAL_NAMESPACE,
    shutdownGraceTime: config.DRYDOCK_SHUTDOWN_GRACE,
    // Heartbeats reach the server as often as activities send them (platform/heartbeat.ts), not
    // every 0.8 × the 10 s heartbeat timeout: 2 s of slack let a busy machine time out a live
    // attempt and start a second one beside it (two check runs for one session, seen once).
    maxHeartbeatThrottleInterval: HEARTBEAT_INTERVAL_MS,
    ...(opts.activityInterceptors ? { interceptors: { activity: opts.activityInterceptors } } : {}),
  };
  const shared = await Worker.create({
    ...common,
    taskQueue: config.DRYDOCK_TASK_QUEUE,
    activities: createSharedActivities(deps),
    // A traced worker's kept bundle has the tracing plugin's workflow interceptors in it.
    workflowBundle: opts.workflowBundle ?? (await workflowBundle(plugins)),
  });
  const host = await Worker.create({ ...common, taskQueue: hostQueue, activities: createHostActivities(deps) });
  log.info({ taskQueue: config.DRYDOCK_TASK_QUEUE, hostQueue, host: config.DRYDOCK_HOST_ID }, 'worker polling');
  const shutdown = () => {
    for (const w of [shared, host]) if (w.getState() === 'RUNNING') w.shutdown();
  };
  return {
    run: async () => {
      // If one poller dies, stop the other so the process does not half-work.
      try {
        await Promise.all(
          [shared, host].map((w) =>
            w.run().catch((err: unknown) => {
              shutdown();
              throw err;
            }),
          ),
        );
      } finally {
        metrics?.close();
        await traces?.shutdown();
        await client.connection.close();
        await db.close();
      }
    },
    shutdown,
  };
}

/** Slack's and Linear's API settings, where their tokens are configured. */
function chatSettings(config: Config): Partial<Pick<ActivityDeps, 'slack' | 'linear'>> {
  return {
    ...(config.DRYDOCK_SLACK_BOT_TOKEN
      ? { slack: { token: config.DRYDOCK_SLACK_BOT_TOKEN, apiUrl: config.DRYDOCK_SLACK_API_URL } }
      : {}),
    ...(config.DRYDOCK_LINEAR_API_KEY
      ? { linear: { apiKey: config.DRYDOCK_LINEAR_API_KEY, apiUrl: config.DRYDOCK_LINEAR_API_URL } }
      : {}),
  };
}

/** The server's policy, which each session can only tighten (workflows/rules/policy.ts): fixed in its history at start. */
function serverPolicy(config: Config): ApprovalPolicy {
  return {
    required: config.DRYDOCK_APPROVAL_REQUIRED,
    approvers: config.DRYDOCK_APPROVERS,
    forbidSelfApproval: selfApprovalForbidden(config),
    separateGates: config.DRYDOCK_SEPARATE_APPROVALS,
    parkAfter: config.DRYDOCK_PARK_AFTER,
    maxChildren: config.DRYDOCK_MAX_CHILDREN,
  };
}
