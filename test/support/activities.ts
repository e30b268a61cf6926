/**
 * The worker's real activities outside a workflow (MockActivityEnvironment),
 * on the suite's Docker, git and database: for tests that drive one activity
 * at a time against a live sandbox and look at what it hands back.
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import pino from 'pino';
import { createActivities } from '../../activities';
import type { ActivityDeps } from '../../activities/deps';
import { loadConfig } from '../../platform/config';
import type { Logger } from '../../platform/log';
import { Redactor } from '../../platform/scrub';
import { createRepoLookup, RepoRegistry } from '../../repos/registry';
import { CheckpointStore } from '../../sandbox/checkpoints';
import type { Sandbox } from '../../sandbox/contract';
import { DockerProvider } from '../../sandbox/docker/provider';
import { SnapshotRegistry } from '../../sandbox/snapshots';
import { ArtifactStore } from '../../store/artifacts';
import { AuditTrail } from '../../store/audit';
import { openDatabase, type Database } from '../../store/db';
import { modelSettings } from '../../workers/worker';
import { testAuditKey, testConfig } from './helpers';

export interface TestActivities {
  activities: ReturnType<typeof createActivities>;
  env: MockActivityEnvironment;
  db: Database;
  dataDir: string;
  artifactsDir: string;
  mirrorsDir: string;
  /** Provisions a sandbox of `repoUrl` for `sessionId` (1 CPU, 512 MiB, 1 GiB of disk); its name and base commit. */
  provision(sessionId: string, repoUrl: string): Promise<Sandbox>;
  close(): Promise<void>;
}

/** The activities of a worker with `secrets` (by name), redacting them; `overrides` replace any dependency. */
export async function testActivities(
  opts: { secrets?: Record<string, string>; log?: Logger; overrides?: Partial<ActivityDeps> } = {},
): Promise<TestActivities> {
  const config = testConfig();
  const secrets = opts.secrets ?? {};
  const dataDir = await mkdtemp(path.join(tmpdir(), 'drydock-activities-'));
  const artifactsDir = path.join(dataDir, 'artifacts');
  const mirrorsDir = path.join(dataDir, 'mirrors');
  const db = await openDatabase(config);
  const redactor = new Redactor(
    Object.fromEntries(Object.entries(secrets).map(([k, v]) => [`DRYDOCK_SECRET_${k}`, v])),
  );
  const log = opts.log ?? pino({ level: 'silent' });
  const activities = createActivities({
    sandboxes: new DockerProvider(),
    artifacts: new ArtifactStore(artifactsDir),
    mirrorsDir,
    hostId: 'activities-test',
    hostQueue: 'unused',
    baseImage: config.DRYDOCK_BASE_IMAGE!,
    egressRoot: path.join(dataDir, 'egress'),
    secrets,
    policy: { required: [], approvers: [], forbidSelfApproval: false, separateGates: false },
    github: { apiUrl: 'http://127.0.0.1:1' },
    sessionIsRunning: async () => true,
    sessionLink: () => '',
    models: modelSettings(loadConfig({})),
    db,
    redactor,
    audit: new AuditTrail(db.pool, 'activities-test', redactor, testAuditKey()),
    snapshots: new SnapshotRegistry(db.pool),
    repos: createRepoLookup(new RepoRegistry(db.pool)),
    devMode: true,
    checkpoints: new CheckpointStore(db.pool),
    hostTimeoutMs: 60_000,
    requestSnapshotBuild: async () => false,
    log,
    ...opts.overrides,
  });
  const env = new MockActivityEnvironment();
  const provisioned: string[] = [];
  return {
    activities,
    env,
    db,
    dataDir,
    artifactsDir,
    mirrorsDir,
    async provision(sessionId, repoUrl) {
      provisioned.push(sessionId);
      return env.run(activities.provisionSandbox, {
        sessionId,
        repo: { url: repoUrl },
        limits: { cpus: 1, memoryBytes: 512 * 1024 ** 2, pids: 256, tmpBytes: 512 * 1024 ** 2, diskBytes: 1024 ** 3 },
        expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
      });
    },
    async close() {
      for (const sessionId of provisioned) await env.run(activities.destroySandbox, { sessionId });
      await db.close();
    },
  };
}
