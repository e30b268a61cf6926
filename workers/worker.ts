/**
 * The drydock worker: polls the shared task queue (`drydock`: workflows and
 * provisioning) and this host's queue (`drydock@<host>`: every later activity
 * on the sandboxes this host owns). More Docker hosts = more workers.
 */
import path from 'node:path';
import {
  DefaultLogger,
  NativeConnection,
  Runtime,
  Worker,
  type LogLevel,
  type WorkflowBundleOption,
} from '@temporalio/worker';
import { createActivities } from '../activities';
import { ArtifactStore } from '../lib/artifacts';
import type { Config } from '../lib/config';
import { githubSettings } from '../lib/github';
import { createLogger, type Logger } from '../lib/log';
import { sessionLink } from '../lib/temporal';
import { DockerSandboxes } from '../lib/sandbox';
import { baseImageTag } from '../sandbox-images/base-image';

export function hostQueueOf(config: Pick<Config, 'DRYDOCK_TASK_QUEUE' | 'DRYDOCK_HOST_ID'>): string {
  return `${config.DRYDOCK_TASK_QUEUE}@${config.DRYDOCK_HOST_ID}`;
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
  });
}

export async function createWorker(opts: {
  config: Config;
  connection: NativeConnection;
  log?: Logger;
  /** Pre-bundled workflow code (tests bundle once); default: bundle workflows/ now. */
  workflowBundle?: WorkflowBundleOption;
}): Promise<DrydockWorker> {
  const { config, connection } = opts;
  const log = opts.log ?? createLogger(config.LOG_LEVEL);
  const hostQueue = hostQueueOf(config);
  const activities = createActivities({
    sandboxes: new DockerSandboxes(),
    artifacts: new ArtifactStore(path.join(config.DRYDOCK_DATA_DIR, 'artifacts')),
    mirrorsDir: path.join(config.DRYDOCK_DATA_DIR, 'mirrors'),
    hostId: config.DRYDOCK_HOST_ID,
    hostQueue,
    baseImage: config.DRYDOCK_BASE_IMAGE ?? (await baseImageTag()),
    policy: {
      required: config.DRYDOCK_APPROVAL_REQUIRED,
      approvers: config.DRYDOCK_APPROVERS,
      forbidSelfApproval: config.DRYDOCK_FORBID_SELF_APPROVAL,
    },
    github: githubSettings(config),
    deployCommand: config.DRYDOCK_DEPLOY_COMMAND,
    sessionLink: (sessionId) => sessionLink(config, sessionId),
    log,
  });
  const common = { connection, namespace: config.TEMPORAL_NAMESPACE, activities, shutdownGraceTime: '30s' as const };
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
      await Promise.all(
        [shared, host].map((w) =>
          w.run().catch((err: unknown) => {
            shutdown();
            throw err;
          }),
        ),
      );
    },
    shutdown,
  };
}
