/**
 * Child process of test/e2e/dead-sandbox.test.ts: provisions a sandbox, kills its
 * container, then runs activities against it and prints how each failed (one
 * JSON line). No unhandledRejection listener here: Node's default applies, so
 * a promise left rejected without a handler ends this process with an error,
 * as it ended the worker.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import pino from 'pino';
import { spawn } from 'node:child_process';
import { createActivities } from '../../activities';
import { sandboxName } from '../../sandbox/activities/container';
import type { Sandbox } from '../../sandbox/contract';
import { ArtifactStore } from '../../store/artifacts';
import { AuditTrail } from '../../store/audit';
import { CheckpointStore } from '../../sandbox/checkpoints';
import { loadConfig } from '../../platform/config';
import { openDatabase } from '../../store/db';
import { createRepoLookup, RepoRegistry } from '../../repos/registry';
import { DockerProvider } from '../../sandbox/docker/provider';
import { Redactor } from '../../platform/scrub';
import { SnapshotRegistry } from '../../sandbox/snapshots';
import { modelSettings } from '../../workers/worker';

/**
 * An artifact store on a slow disk: each write waits a second. An exec on a
 * dead container fails within milliseconds, so it always fails while the step
 * runner still awaits its first write (the window that crashed the worker).
 */
class SlowArtifacts extends ArtifactStore {
  override async put(sessionId: string, name: string, content: Buffer | string): Promise<string> {
    await new Promise((r) => setTimeout(r, 1_000));
    return super.put(sessionId, name, content);
  }
}

/** How `run` failed: ApplicationFailure's type and retryability, or the error's name. */
async function failureOf(run: Promise<unknown>): Promise<string> {
  try {
    await run;
    return 'succeeded';
  } catch (err) {
    if (err instanceof ApplicationFailure) return `${err.type}${err.nonRetryable ? ' (non-retryable)' : ''}`;
    return `${(err as Error).name}: ${(err as Error).message}`;
  }
}

/**
 * Provisions a sandbox that is killed as provisioning runs its first command
 * in it (seen in `docker events`), then provisions again, as Temporal's retry would.
 */
async function killedWhileProvisioned(
  env: MockActivityEnvironment,
  activities: ReturnType<typeof createActivities>,
  sandboxes: DockerProvider,
  sessionId: string,
  repoUrl: string,
): Promise<{ provisioning: string; leftAfterFailure: number; retry: string }> {
  const name = sandboxName(sessionId);
  const watch = spawn('docker', ['events', '--filter', 'event=exec_start', '--filter', `container=${name}`]);
  watch.stdout.once(
    'data',
    () =>
      void sandboxes.docker
        .getContainer(name)
        .kill()
        .catch(() => undefined),
  );
  await new Promise((r) => setTimeout(r, 500)); // docker events is listening
  const input = {
    sessionId,
    repo: { url: repoUrl },
    limits: { cpus: 1, memoryBytes: 256 * 1024 ** 2, pids: 128, tmpBytes: 64 * 1024 ** 2, diskBytes: 1024 ** 3 },
    expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
  };
  const provisioning = await failureOf(env.run(activities.provisionSandbox, input));
  watch.kill();
  const leftAfterFailure = (await sandboxes.list()).filter((c) => c.name === name).length;
  const retry = await failureOf(env.run(activities.provisionSandbox, input));
  await env.run(activities.destroySandbox, { sessionId });
  return { provisioning, leftAfterFailure, retry };
}

async function main(repoUrl: string, sessionId: string): Promise<void> {
  const config = loadConfig();
  const dataDir = await mkdtemp(path.join(tmpdir(), 'drydock-dead-'));
  const db = await openDatabase(config);
  const sandboxes = new DockerProvider();
  const activities = createActivities({
    sandboxes,
    artifacts: new SlowArtifacts(path.join(dataDir, 'artifacts')),
    mirrorsDir: path.join(dataDir, 'mirrors'),
    hostId: 'dead-sandbox-test',
    hostQueue: 'unused',
    baseImage: config.DRYDOCK_BASE_IMAGE!,
    egressRoot: path.join(dataDir, 'egress'),
    secrets: {},
    redactor: new Redactor([]),
    policy: { required: [], approvers: [], forbidSelfApproval: false, separateGates: false },
    github: { apiUrl: 'http://127.0.0.1:1' },
    sessionIsRunning: async () => true,
    sessionLink: () => '',
    models: modelSettings(config),
    db,
    audit: new AuditTrail(db.pool, 'dead-sandbox-test', new Redactor([]), randomBytes(32)),
    snapshots: new SnapshotRegistry(db.pool),
    repos: createRepoLookup(new RepoRegistry(db.pool)),
    devMode: true,
    checkpoints: new CheckpointStore(db.pool),
    hostTimeoutMs: 60_000,
    requestSnapshotBuild: async () => false,
    log: pino({ level: 'silent' }),
  });
  const env = new MockActivityEnvironment();
  const { name: sandbox }: Sandbox = await env.run(activities.provisionSandbox, {
    sessionId,
    repo: { url: repoUrl },
    limits: { cpus: 1, memoryBytes: 256 * 1024 ** 2, pids: 128, tmpBytes: 64 * 1024 ** 2, diskBytes: 1024 ** 3 },
    expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
  });
  await sandboxes.docker.getContainer(sandbox).kill();
  const nonce = () => randomBytes(16).toString('hex');
  const step = { sandbox, sessionId, timeoutMs: 10_000 };
  const failures = {
    command: await failureOf(
      env.run(activities.runStep, {
        ...step,
        key: 'step-1',
        nonce: nonce(),
        step: { run: 'echo hello', timeout: 10_000 },
      }),
    ),
    write: await failureOf(
      env.run(activities.runStep, {
        ...step,
        key: 'step-2',
        nonce: nonce(),
        step: { write: { path: 'a.txt', content: 'a' } },
      }),
    ),
    verify: await failureOf(
      env.run(activities.runStep, {
        ...step,
        key: 'verify',
        nonce: nonce(),
        step: { run: 'npm test', timeout: 10_000 },
        testReport: {},
      }),
    ),
  };
  await env.run(activities.destroySandbox, { sessionId });
  const provisioning = await killedWhileProvisioned(env, activities, sandboxes, `${sessionId}-p`, repoUrl);
  await db.close();
  process.stdout.write(`${JSON.stringify({ ...failures, ...provisioning })}\n`);
}

main(process.argv[2], process.argv[3]).catch((err: unknown) => {
  process.stderr.write(`${String(err)}\n`);
  process.exit(1);
});
