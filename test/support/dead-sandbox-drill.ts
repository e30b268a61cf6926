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
import type { SandboxSpec } from '../../sandbox/provider';
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
 * The Docker provider, with one sandbox killed as the first command in it
 * starts: its first process (the workspace's preparation, SandboxSpec.first),
 * held (a 30 s sleep before it, cut by the kill) so that the kill lands in it, or an exec,
 * killed before the engine is asked to run it, so the command cannot end
 * first. (A kill sent on the engine's exec_start event raced the command:
 * provisioning's workspace exec, one `sh` of builtins, often ended in the
 * 40-130 ms the kill took to land, and provisioning then rightly succeeded;
 * a sandbox killed after provisioning's last command is found lost by the
 * step after it, as the first part of the drill shows.)
 */
class KilledAtFirstCommand extends DockerProvider {
  /** Sandboxes to kill at their first command (a set: provisioning calls through a view of this provider). */
  readonly victims = new Set<string>();

  override async create(spec: SandboxSpec): ReturnType<DockerProvider['create']> {
    if (!spec.first || !this.victims.delete(spec.name)) return super.create(spec);
    const held = { ...spec.first, argv: ['sh', '-c', 'sleep 30; exec "$@"', 'sh', ...spec.first.argv] };
    const killed = this.killOnceRunning(spec.name);
    try {
      return await super.create({ ...spec, first: held });
    } finally {
      await killed;
    }
  }

  override async start(...args: Parameters<DockerProvider['start']>): ReturnType<DockerProvider['start']> {
    if (this.victims.delete(args[0])) await this.docker.getContainer(args[0]).kill();
    return super.start(...args);
  }

  private async killOnceRunning(name: string): Promise<void> {
    for (let i = 0; i < 300; i++) {
      const info = await this.docker
        .getContainer(name)
        .inspect()
        .catch(() => undefined);
      if (info?.State.Running) return void (await this.docker.getContainer(name).kill());
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`${name} never ran: nothing was killed`);
  }
}

/**
 * Provisions a sandbox that is killed as provisioning starts its first
 * command in it, then provisions again, as Temporal's retry would.
 */
async function killedWhileProvisioned(
  env: MockActivityEnvironment,
  activities: ReturnType<typeof createActivities>,
  sandboxes: KilledAtFirstCommand,
  sessionId: string,
  repoUrl: string,
): Promise<{ provisioning: string; leftAfterFailure: number; retry: string }> {
  const name = sandboxName(sessionId);
  sandboxes.victims.add(name);
  const input = {
    sessionId,
    repo: { url: repoUrl },
    limits: { cpus: 1, memoryBytes: 256 * 1024 ** 2, pids: 128, tmpBytes: 64 * 1024 ** 2, diskBytes: 1024 ** 3 },
    expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
  };
  const provisioning = await failureOf(env.run(activities.provisionSandbox, input));
  if (sandboxes.victims.has(name)) throw new Error(`provisioning ran no command in ${name}: nothing was killed`);
  const leftAfterFailure = (await sandboxes.list()).filter((c) => c.name === name).length;
  const retry = await failureOf(env.run(activities.provisionSandbox, input));
  await env.run(activities.destroySandbox, { sessionId });
  return { provisioning, leftAfterFailure, retry };
}

async function main(repoUrl: string, sessionId: string): Promise<void> {
  const config = loadConfig();
  const dataDir = await mkdtemp(path.join(tmpdir(), 'drydock-dead-'));
  const db = await openDatabase(config);
  const sandboxes = new KilledAtFirstCommand();
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
