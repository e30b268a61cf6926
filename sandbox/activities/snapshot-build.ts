/**
 * A snapshot build's activities (the refreshSnapshot workflow): a build
 * container of the repo's environment with the repo at the snapshot's
 * commit, its setup run as an ordinary step, then its /workspace kept as an
 * image that sessions start from; old snapshots removed past `keep`.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../../workflows/api';
import { REPO_CONFIG_FILE } from '../../workflows/repo-config';
import { createOwnedContainer, sandboxName, type ContainerDeps } from './container';
import type { SandboxDeps } from './deps';
import { resolveRef, syncMirror, type MirrorDeps } from '../../repos/mirror';
import { copyWorkingTree, isProvisioned, markProvisioned } from './workspace';
import { sandboxOf } from '../handle';
import { repoFileSetup } from '../../repos/config-file';
import { tail } from './output';
import { certificateProblem } from '../ca';
import { nodeVersionProblem } from '../toolchains';
import { collectEnvironmentImages, sandboxEnvironment, type EnvironmentDeps } from './environment';
import { redactUrl } from '../../workflows/rules/repo-url';
import {
  setupCommandOf,
  setupHash,
  setupInputs,
  SETUP_SCRIPT,
  SNAPSHOT_LABELS,
  snapshotAuditId,
  snapshotImageTag,
  type SnapshotBuildRow,
} from '../snapshots';
import { type SetupEgressRule } from '../../repos/registry';

/** Limits of a build container: setup (npm ci, a bundler) needs more than an agent step. */
const BUILD_LIMITS = {
  cpus: 2,
  memoryBytes: 4 * 1024 ** 3,
  pids: 4096,
  tmpBytes: 512 * 1024 ** 2,
  diskBytes: 64 * 1024 ** 3,
};

/** What `startSnapshotBuild` prepared: the build container with the repo in /workspace, and what to run. */
export interface SnapshotBuildPlan {
  /** The refreshSnapshot workflow id; also the build container's session label. */
  buildId: string;
  repo: string;
  /** The build container. */
  sandbox: string;
  /** The image the build container runs (the repo's environment or the base image): the snapshot's base. */
  image: string;
  host: string;
  hostQueue: string;
  commit: string;
  setup: string;
  setupHash: string;
  setupTimeoutMs: number;
  egress: SetupEgressRule[];
  keep: number;
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
  /** Images removed: older snapshots beyond the newest K, and the environment images newer ones replaced. */
  removed: string[];
}

/**
 * Keeps the newest `keep` ready snapshots of a repo on this host; older ones
 * go unless a sandbox uses them (the reaper tries those again later). Then
 * the environment images that newer ones replaced go the same way. Returns
 * the images removed.
 */
export async function collectSnapshots(
  deps: Pick<SandboxDeps, 'sandboxes' | 'snapshots' | 'hostId' | 'log'>,
  repo: string,
  keep: number,
): Promise<string[]> {
  const { sandboxes, snapshots, hostId, log } = deps;
  const removed: string[] = [];
  for (const row of (await snapshots.ready(repo, hostId)).slice(keep)) {
    const outcome = await sandboxes.removeImage(row.image!);
    if (outcome === 'in_use') {
      log.info({ repo, image: row.image }, 'old snapshot still in use by a sandbox: kept for now');
      continue;
    }
    await snapshots.markRemoved(row.id);
    removed.push(row.image!);
  }
  if (removed.length) log.info({ repo, removed, host: hostId }, 'old snapshots removed');
  return [...removed, ...(await collectEnvironmentImages(deps, repo))];
}

/** What a snapshot build needs: a build container of the repo's environment, the registry, the audit trail. */
export type SnapshotDeps = ContainerDeps &
  EnvironmentDeps &
  MirrorDeps &
  Pick<SandboxDeps, 'snapshots' | 'audit' | 'hostQueue' | 'log'>;

export function createSnapshotActivities(deps: SnapshotDeps) {
  const { sandboxes, snapshots, audit, hostId, hostQueue, log } = deps;

  const collect = (repo: string, keep: number) => collectSnapshots(deps, repo, keep);

  return {
    /**
     * Starts a build of a registered repo on this host: records it, creates
     * the build container (from the base image, no network) with the repo at
     * its newest commit. Idempotent by build id (the container name).
     */
    async startSnapshotBuild(input: { buildId: string; repo: string }): Promise<SnapshotBuildPlan> {
      const reg = await snapshots.repo(input.repo);
      if (!reg) {
        throw ApplicationFailure.nonRetryable(
          `repo ${redactUrl(input.repo)} is not registered: run 'drydock repo add ${redactUrl(input.repo)} --setup "<command>"'`,
          ErrorType.RepoNotRegistered,
        );
      }
      const mirror = await syncMirror(deps, input.repo);
      const commit = await resolveRef(mirror, reg.ref);
      const inputs = await setupInputs(mirror, commit);
      const row = await snapshots.startBuild({ id: input.buildId, repo: input.repo, host: hostId });
      const environment = await sandboxEnvironment(deps, mirror, commit, input.repo).catch(async (err: Error) => {
        // A transient failure (a download, a full disk) is retried: the row stays open for the retry to finish.
        if (isFinal(err)) {
          const failed = await snapshots.finishBuild(row.id, { status: 'failed', commit, error: err.message });
          await recordBuild(audit, failed, {});
        }
        throw err;
      });
      const setup = setupCommandOf(reg, inputs, await repoFileSetup(mirror, commit), environment.setup);
      if (!setup) {
        const error = `no setup: register one with --setup, or give setup in ${REPO_CONFIG_FILE} or add ${SETUP_SCRIPT} to the repo (commit ${commit.slice(0, 12)})`;
        await recordBuild(audit, await snapshots.finishBuild(row.id, { status: 'failed', commit, error }), {});
        throw ApplicationFailure.nonRetryable(error, ErrorType.SnapshotSetupFailed);
      }
      const sandbox = sandboxName(input.buildId);
      // From the repo's environment, no network, labelled so the reaper finds it after its expiry.
      await createOwnedContainer(deps, {
        name: sandbox,
        image: environment.image,
        mounts: environment.mounts,
        env: environment.env,
        owner: input.buildId,
        repo: input.repo,
        expiresAt: new Date(Date.now() + reg.setupTimeoutMs + 60 * 60_000).toISOString(),
        limits: BUILD_LIMITS,
      });
      const handle = sandboxOf(sandboxes, sandbox);
      if (!(await isProvisioned(handle))) {
        await copyWorkingTree(handle, mirror, commit);
        await markProvisioned(handle);
      }
      log.info(
        { buildId: input.buildId, repo: input.repo, commit, sandboxId: sandbox, host: hostId },
        'snapshot build',
      );
      return {
        buildId: input.buildId,
        repo: input.repo,
        sandbox,
        image: environment.image,
        host: hostId,
        hostQueue,
        commit,
        setup,
        setupHash: setupHash(setup, inputs, environment.key),
        setupTimeoutMs: reg.setupTimeoutMs,
        egress: reg.egress,
        keep: reg.keep,
      };
    },

    /**
     * Ends a build after its setup step: on success the build container's
     * /workspace becomes the snapshot image (labelled with repo, commit, setup
     * hash and creation time) and older snapshots beyond `keep` go; on failure
     * the previous snapshot stays in service and the row says why.
     */
    async finishSnapshotBuild(input: {
      plan: SnapshotBuildPlan;
      setup: { exitCode: number; timedOut: boolean; outputTail: string };
    }): Promise<SnapshotBuildResult> {
      const { plan, setup } = input;
      const done = await snapshots.build(plan.buildId);
      if (done && done.status !== 'building') return resultOf(done, []); // a retry after the row was written
      if (setup.exitCode !== 0) {
        const exited = setup.timedOut
          ? `setup timed out after ${Math.round(plan.setupTimeoutMs / 1000)}s`
          : `setup exited with ${setup.exitCode}`;
        const explained = certificateProblem(setup.outputTail) ?? nodeVersionProblem(setup.outputTail);
        const why = explained ? `${exited}: ${explained}` : exited;
        const row = await snapshots.finishBuild(plan.buildId, {
          status: 'failed',
          commit: plan.commit,
          setupHash: plan.setupHash,
          error: `${why}: ${tail(setup.outputTail.trim(), 1_000)}`,
        });
        await recordBuild(audit, row, {});
        log.warn({ buildId: plan.buildId, repo: plan.repo, error: row.error }, 'snapshot build failed');
        return resultOf(row, []);
      }
      const tag = snapshotImageTag(plan.repo, plan.commit, plan.buildId);
      const image = await imageOfBuild(deps, plan, tag);
      const row = await snapshots.finishBuild(plan.buildId, {
        status: 'ready',
        commit: plan.commit,
        setupHash: plan.setupHash,
        image: tag,
        sizeBytes: image.sizeBytes,
      });
      const removed = await collect(plan.repo, plan.keep);
      await recordBuild(audit, row, { removed });
      log.info(
        { buildId: plan.buildId, repo: plan.repo, image: tag, sizeBytes: image.sizeBytes, ms: row.durationMs },
        'snapshot ready',
      );
      return resultOf(row, removed);
    },

    /** Garbage collection alone: keeps the newest `keep` ready snapshots of a repo on this host. */
    async collectSnapshots(input: { repo: string; keep: number }): Promise<string[]> {
      return collect(input.repo, input.keep);
    },
  };
}

/** Attempts of the refreshSnapshot workflow's activities (its `common.retry`, workflows/snapshot.ts). */
const BUILD_ACTIVITY_ATTEMPTS = 5;

/** Whether a failure ends the build: a permanent one, or a transient one on the last attempt. */
function isFinal(err: unknown): boolean {
  if (err instanceof ApplicationFailure && err.nonRetryable) return true;
  return Context.current().info.attempt >= BUILD_ACTIVITY_ATTEMPTS;
}

/**
 * The build container's /workspace as the snapshot image `tag`, labelled with
 * what it was built from, and its copy-on-write lower layers made on this host
 * now, so that no session start pays for them.
 */
async function imageOfBuild(
  { sandboxes, hostId }: Pick<SandboxDeps, 'sandboxes' | 'hostId'>,
  plan: SnapshotBuildPlan,
  tag: string,
) {
  const image = await sandboxes.imageFromWorkspace(plan.sandbox, {
    baseImage: plan.image,
    tag,
    labels: {
      [SNAPSHOT_LABELS.image]: 'snapshot',
      [SNAPSHOT_LABELS.repo]: plan.repo,
      [SNAPSHOT_LABELS.commit]: plan.commit,
      [SNAPSHOT_LABELS.setupHash]: plan.setupHash,
      [SNAPSHOT_LABELS.created]: new Date().toISOString(),
      [SNAPSHOT_LABELS.build]: plan.buildId,
      [SNAPSHOT_LABELS.environment]: plan.image,
      [SNAPSHOT_LABELS.host]: hostId,
    },
  });
  await sandboxes.prepareImage(tag);
  return image;
}

/** A build's outcome in the audit trail, under the repo's snapshot audit id. */
async function recordBuild(
  audit: SandboxDeps['audit'],
  row: SnapshotBuildRow,
  extra: Record<string, unknown>,
): Promise<void> {
  await audit.append({
    sessionId: snapshotAuditId(row.repo),
    key: `${row.id}/build`,
    kind: 'snapshot.build',
    actor: 'drydock',
    data: {
      buildId: row.id,
      repo: row.repo,
      host: row.host,
      outcome: row.status,
      commit: row.commit,
      setupHash: row.setupHash,
      image: row.image,
      sizeBytes: row.sizeBytes,
      durationMs: row.durationMs,
      error: row.error,
      ...extra,
    },
  });
}

function resultOf(row: SnapshotBuildRow, removed: string[]): SnapshotBuildResult {
  return {
    buildId: row.id,
    repo: row.repo,
    status: row.status === 'ready' ? 'ready' : 'failed',
    commit: row.commit ?? '',
    ...(row.image ? { image: row.image } : {}),
    ...(row.sizeBytes !== undefined ? { sizeBytes: row.sizeBytes } : {}),
    ...(row.durationMs !== undefined ? { durationMs: row.durationMs } : {}),
    ...(row.error ? { error: row.error } : {}),
    removed,
  };
}
