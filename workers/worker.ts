/**
 * The drydock worker: polls the shared task queue (`drydock`: workflows and
 * provisioning) and this host's queue (`drydock@<host>`: every later activity
 * on the sandboxes this host owns). More Docker hosts = more workers.
 */
import path from 'node:path';
import { type Client, ScheduleAlreadyRunning, ScheduleOverlapPolicy } from '@temporalio/client';
import { WorkflowNotFoundError } from '@temporalio/common';
import {
  DefaultLogger,
  NativeConnection,
  Runtime,
  Worker,
  type LogLevel,
  type ActivityInterceptorsFactory,
  type WorkflowBundleOption,
} from '@temporalio/worker';
import { createActivities } from '../activities';
import { ArtifactStore } from '../lib/artifacts';
import { AuditTrail, loadAuditKey } from '../lib/audit';
import { CheckpointStore } from '../lib/checkpoints';
import { openDatabase } from '../lib/db';
import { redactorOf } from '../lib/scrub';
import type { Config } from '../lib/config';
import { githubSettings } from '../lib/github';
import type { ModelSettings } from '../lib/llm';
import { createLogger, type Logger } from '../lib/log';
import { sessionLink } from '../lib/temporal';
import { connectClient } from '../lib/temporal-connection';
import { DockerSandboxes } from '../lib/sandbox';
import { seededRepoLookup } from '../lib/repos';
import { SnapshotRegistry, triggerSnapshotBuild } from '../lib/snapshots';
import { baseImageTag } from '../sandbox-images/base-image';

export function modelSettings(config: Config): ModelSettings {
  return {
    defaultBaseUrl: config.DRYDOCK_MODEL_BASE_URL,
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

export interface DrydockWorker {
  /** Resolves when both pollers stopped (after shutdown, or a fatal error). */
  run(): Promise<void>;
  /** Stops polling and lets in-flight activities finish (up to the grace time). */
  shutdown(): void;
}

/** Sends the Temporal SDK's own log lines to pino; call once, before any worker. */
export function forwardTemporalLogs(log: Logger): void {
  const levels: Record<LogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = {
    TRACE: 'trace',
    DEBUG: 'debug',
    INFO: 'info',
    WARN: 'warn',
    ERROR: 'error',
  };
  Runtime.install({
    logger: new DefaultLogger('INFO', (entry) => log[levels[entry.level]]({ ...entry.meta }, entry.message)),
    // drainOnSignals handles them: the SDK's own handler has no "twice forces".
    shutdownSignals: [],
  });
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

export async function createWorker(opts: {
  config: Config;
  connection: NativeConnection;
  log?: Logger;
  /** Pre-bundled workflow code (tests bundle once); default: bundle workflows/ now. */
  workflowBundle?: WorkflowBundleOption;
  /** Wrapped around every activity (the fault drills of test/fault-worker.ts). */
  activityInterceptors?: ActivityInterceptorsFactory[];
}): Promise<DrydockWorker> {
  const { config, connection } = opts;
  const log = opts.log ?? createLogger(config.LOG_LEVEL, config.LOG_FORMAT);
  const hostQueue = hostQueueOf(config);
  const auditKey = loadAuditKey(config);
  const client = await connectClient(config);
  await ensureReaperSchedule(client, config);
  const db = await openDatabase(config, log);
  const activities = createActivities({
    db,
    audit: new AuditTrail(db.pool, config.DRYDOCK_HOST_ID, redactorOf(config), auditKey),
    checkpoints: new CheckpointStore(db.pool),
    hostTimeoutMs: config.DRYDOCK_HOST_TIMEOUT,
    snapshots: new SnapshotRegistry(db.pool),
    repos: await seededRepoLookup(db.pool, config),
    devMode: config.DRYDOCK_DEV_MODE,
    requestSnapshotBuild: (repo) => triggerSnapshotBuild(client, repo),
    sandboxes: new DockerSandboxes(),
    artifacts: new ArtifactStore(path.join(config.DRYDOCK_DATA_DIR, 'artifacts')),
    mirrorsDir: path.join(config.DRYDOCK_DATA_DIR, 'mirrors'),
    hostId: config.DRYDOCK_HOST_ID,
    hostQueue,
    baseImage: config.DRYDOCK_BASE_IMAGE ?? (await baseImageTag()),
    runtime: config.DRYDOCK_DOCKER_RUNTIME,
    readonlyRoot: config.DRYDOCK_READONLY_ROOTFS,
    egressRoot: config.DRYDOCK_EGRESS_DIR ?? path.join(config.DRYDOCK_DATA_DIR, 'egress'),
    extraCaCerts: config.DRYDOCK_EXTRA_CA_CERTS,
    secrets: config.secrets,
    policy: {
      required: config.DRYDOCK_APPROVAL_REQUIRED,
      approvers: config.DRYDOCK_APPROVERS,
      forbidSelfApproval: config.DRYDOCK_FORBID_SELF_APPROVAL,
      separateGates: config.DRYDOCK_SEPARATE_APPROVALS,
    },
    github: githubSettings(config),
    models: modelSettings(config),
    deployCommand: config.DRYDOCK_DEPLOY_COMMAND,
    deployEnvNames: config.DRYDOCK_DEPLOY_ENV,
    sessionLink: (sessionId) => sessionLink(config, sessionId),
    reviewLink: config.DRYDOCK_CONSOLE_URL
      ? (sessionId) => `${config.DRYDOCK_CONSOLE_URL!.replace(/\/$/, '')}/sessions/${encodeURIComponent(sessionId)}`
      : undefined,
    sessionIsRunning: async (sessionId) => {
      try {
        return (await client.workflow.getHandle(sessionId).describe()).status.name === 'RUNNING';
      } catch (err) {
        if (err instanceof WorkflowNotFoundError) return false;
        throw err;
      }
    },
    log,
  });
  const common = {
    connection,
    namespace: config.TEMPORAL_NAMESPACE,
    activities,
    shutdownGraceTime: config.DRYDOCK_SHUTDOWN_GRACE,
    ...(opts.activityInterceptors ? { interceptors: { activity: opts.activityInterceptors } } : {}),
  };
  const shared = await Worker.create({
    ...common,
    taskQueue: config.DRYDOCK_TASK_QUEUE,
    ...(opts.workflowBundle
      ? { workflowBundle: opts.workflowBundle }
      : { workflowsPath: require.resolve('../workflows') }),
  });
  const host = await Worker.create({ ...common, taskQueue: hostQueue });
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
        await client.connection.close();
        await db.close();
      }
    },
    shutdown,
  };
}
