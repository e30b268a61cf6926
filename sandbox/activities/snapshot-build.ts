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
import { createOwnedContainer, ownedLabels, sandboxName, type ContainerDeps } from './container';
import type { SandboxDeps } from './deps';
import { resolveRef, syncMirror, type MirrorDeps } from '../../repos/mirror';
import { copyWorkingTree, isProvisioned, markProvisioned, newestSnapshot, prepareWorkspace } from './workspace';
import { sandboxOf } from '../handle';
import { tail } from './output';
import { certificateProblem } from '../ca';
import { nodeVersionProblem } from '../toolchains';
import { collectEnvironmentImages, sandboxEnvironment, type EnvironmentDeps } from './environment';
import { EnvironmentError } from '../repo-image';
import { redactUrl } from '../../workflows/rules/repo-url';
import { missingProgramProblem } from '../../workflows/rules/setup-inference';
import {
  setupHash,
  imageOnlySetup,
  setupInputs,
  chooseSetup,
  manifestChanged,
  SETUP_REUSE_MAX_AGE_MS,
  SETUP_SCRIPT,
  SNAPSHOT_ENV_LABEL,
  SNAPSHOT_LABELS,
  snapshotAuditId,
  snapshotImageTag,
  type SnapshotBuildRow,
} from '../snapshots';
import type { RepoRegistration } from '../../repos/registry';
import {
  SERVICE_DATA_LABEL,
  ServiceFailure,
  SERVICES_LABEL,
  serviceContainers,
  serviceRuntime,
  startServices,
  type RunnableService,
} from '../services';
import { imageStoreOf, dataPath } from '../provider';
import { resolveServiceImages, serviceFileReader, sharesOf } from './services';
import type { SandboxEnvironment } from './environment';
import type { SnapshotBuildPlan, SnapshotBuildResult } from '../contract';
import { progressReporter } from '../../platform/heartbeat';

/** Limits of a build container: setup (npm ci, a bundler) needs more than an agent step. */
const BUILD_LIMITS = {
  cpus: 2,
  memoryBytes: 4 * 1024 ** 3,
  pids: 4096,
  tmpBytes: 512 * 1024 ** 2,
  diskBytes: 64 * 1024 ** 3,
};

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
    const outcome = await imageStoreOf(sandboxes).removeImage(row.image!);
    if (outcome === 'in_use') {
      log.info({ repo, image: row.image }, 'old snapshot still in use by a sandbox: kept for now');
      continue;
    }
    await snapshots.markRemoved(row.id);
    removed.push(row.image!);
    // Its services' data goes with it (a data image still in use stays for a later collection).
    for (const data of (row.services ?? []).flatMap((s) => (s.dataImage ? [s.dataImage] : []))) {
      // Its lower layers are under sessions' services: no container has it as its image, so ask the label.
      const users = (await sandboxes.list()).filter((c) => c.labels[SERVICE_DATA_LABEL] === data);
      if (!users.length && (await imageStoreOf(sandboxes).removeImage(data)) === 'removed') removed.push(data);
    }
  }
  if (removed.length) log.info({ repo, removed, host: hostId }, 'old snapshots removed');
  return [...removed, ...(await collectEnvironmentImages(deps, repo))];
}

/** Tells the build's phase in the activity's heartbeats (`drydock snapshot build` shows it); a new phase ends the last one's build progress. */
function phaseReporter(): (phase: string) => void {
  const report = progressReporter();
  return (phase) => report({ phase, building: undefined });
}

/** What a snapshot build needs: a build container of the repo's environment, the registry, the audit trail. */
export type SnapshotDeps = ContainerDeps &
  EnvironmentDeps &
  MirrorDeps &
  Pick<SandboxDeps, 'snapshots' | 'audit' | 'hostQueue' | 'log' | 'allowedRegistries' | 'runtime'>;

export function createSnapshotActivities(deps: SnapshotDeps) {
  const { snapshots, audit, log } = deps;

  const collect = (repo: string, keep: number) => collectSnapshots(deps, repo, keep);

  return {
    /**
     * Starts a build of a registered repo on this host: records it, creates
     * the build container (from the base image, no network) with the repo at
     * its newest commit. Idempotent by build id (the container name).
     */
    async startSnapshotBuild(input: { buildId: string; repo: string }): Promise<SnapshotBuildPlan> {
      return startBuild(deps, input);
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
        const explained =
          certificateProblem(setup.outputTail) ??
          nodeVersionProblem(setup.outputTail) ??
          missingProgramProblem(setup.exitCode, setup.outputTail);
        const why = explained ? `${exited}: ${explained}` : exited;
        // "inferred from go.mod" reads as it is; the others say where setup came from.
        const from = plan.setupSource.startsWith('inferred ') ? plan.setupSource : `from ${plan.setupSource}`;
        const row = await snapshots.finishBuild(plan.buildId, {
          status: 'failed',
          commit: plan.commit,
          setupHash: plan.setupHash,
          error: `${why} (setup ${from}: ${plan.setup}): ${tail(setup.outputTail.trim(), 1_000)}`,
          setup: plan.setup,
          setupSource: plan.setupSource,
        });
        await recordBuild(audit, row, {});
        log.warn({ buildId: plan.buildId, repo: plan.repo, error: row.error }, 'snapshot build failed');
        return resultOf(row, []);
      }
      phaseReporter()('saving the snapshot image');
      const tag = snapshotImageTag(plan.repo, plan.commit, plan.buildId);
      const services = await captureServices(deps, plan, tag);
      const image = await imageOfBuild(deps, plan, tag, services);
      const row = await snapshots.finishBuild(plan.buildId, {
        status: 'ready',
        commit: plan.commit,
        setupHash: plan.setupHash,
        image: tag,
        sizeBytes: image.sizeBytes,
        setup: plan.setup,
        setupSource: plan.setupSource,
        services: services.map((s) => ({
          name: s.name,
          image: s.image,
          ...(s.dataImage ? { dataImage: s.dataImage } : {}),
        })),
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

/** startSnapshotBuild's work (see there). */
async function startBuild(deps: SnapshotDeps, input: { buildId: string; repo: string }): Promise<SnapshotBuildPlan> {
  const { sandboxes, snapshots, audit, hostId, hostQueue, log } = deps;
  const inPhase = phaseReporter();
  const reg = await snapshots.repo(input.repo);
  if (!reg) {
    throw ApplicationFailure.nonRetryable(
      `repo ${redactUrl(input.repo)} is not registered: run 'drydock repo add ${redactUrl(input.repo)} --setup "<command>"'`,
      ErrorType.RepoNotRegistered,
    );
  }
  inPhase('fetching the repo');
  const mirror = await syncMirror(deps, input.repo);
  const commit = await resolveRef(mirror, reg.ref);
  const inputs = await setupInputs(mirror, commit);
  const row = await snapshots.startBuild({ id: input.buildId, repo: input.repo, host: hostId });
  // A snapshot build is the one place images are pulled (from the registries the operator allows).
  inPhase("preparing the repo's environment");
  const environment = await sandboxEnvironment(deps, { mirror, commit }, input.repo, {
    allowed: allowedRegistries(deps, reg),
    egress: reg.egress,
  }).catch(async (err: Error) => {
    // A transient failure (a download, a full disk) is retried: the row stays open for the retry to finish.
    if (isFinal(err)) {
      const failed = await snapshots.finishBuild(row.id, { status: 'failed', commit, error: err.message });
      await recordBuild(audit, failed, {});
    }
    throw err;
  });
  // Said where the operator looks (snapshot build|list, repo list), not only in the worker's log.
  if (environment.notes) await snapshots.noteBuild(row.id, environment.notes);
  const chosen =
    (await chooseSetup(reg, { mirror, commit, inputs }, environment)) ??
    imageOnlySetup(environment.imageFrom, environment.featureSetup);
  if (!chosen) {
    const error =
      `no setup, and no lockfile drydock knows to infer one from: register one with --setup, or give setup in ` +
      `${REPO_CONFIG_FILE}, or add ${SETUP_SCRIPT} to the repo (commit ${commit.slice(0, 12)})`;
    await recordBuild(audit, await snapshots.finishBuild(row.id, { status: 'failed', commit, error }), {});
    throw ApplicationFailure.nonRetryable(error, ErrorType.SnapshotSetupFailed);
  }
  const sandbox = sandboxName(input.buildId);
  inPhase('starting the build container and its services');
  const services = await buildServices(deps, { row, commit, reg, repo: input.repo, environment });
  const hash = setupHash(chosen.command, inputs, environment.key);
  // Services' data is setup's too, in images of their own: a repo with services runs setup every time.
  const reused = services.length ? undefined : await reusableSetup(deps, { repo: input.repo, mirror, commit }, hash);
  if (reused) {
    const note = reuseNote(reused);
    environment.notes = [...(environment.notes ?? []), note];
    await snapshots.noteBuild(row.id, environment.notes);
  }
  const shares = sharesOf(BUILD_LIMITS, services);
  const env = [...environment.env, ...Object.entries(chosen.env ?? {}).map(([k, v]) => `${k}=${v}`)];
  const owned = {
    owner: input.buildId,
    repo: input.repo,
    expiresAt: new Date(Date.now() + reg.setupTimeoutMs + 60 * 60_000).toISOString(),
  };
  const containers = await failBuildOn(deps, { row, commit }, () =>
    asEnvironmentError(() =>
      serviceContainers(sandboxes, sandbox, services, {
        shares: shares.services,
        labels: ownedLabels(hostId, owned),
        runtime: deps.runtime,
        files: serviceFileReader(mirror),
      }),
    ),
  );
  // From the repo's environment (or the snapshot whose setup it reuses), no network, labelled so the
  // reaper finds it after its expiry.
  await createOwnedContainer(deps, {
    ...owned,
    name: sandbox,
    image: reused?.image ?? environment.image,
    mounts: environment.mounts,
    env,
    limits: { ...BUILD_LIMITS, ...shares.sandbox },
    services: containers,
    ...(environment.stack.hostNames ? { hostNames: environment.stack.hostNames } : {}),
  });
  // Healthy before setup runs: its migrations and seed data land in them, and the snapshot keeps them.
  await failBuildOn(deps, { row, commit }, () =>
    asEnvironmentError(() => startServices(sandboxes, sandbox, services, containers)),
  );
  const handle = sandboxOf(sandboxes, sandbox);
  if (reused && !(await isProvisioned(handle))) {
    // As a session from that snapshot catches up: the new commits as a bundle, checked out over setup's files.
    inPhase(`catching up from the snapshot at ${reused.commit.slice(0, 12)}`);
    const behind = reused.commit === commit ? 0 : undefined;
    await prepareWorkspace(handle, { mirror, from: reused.commit, to: commit, behind, mark: true });
  } else if (!(await isProvisioned(handle))) {
    inPhase('copying the repo in');
    await copyWorkingTree(handle, mirror, commit);
    await markProvisioned(handle);
  }
  log.info(
    { buildId: input.buildId, repo: input.repo, commit, sandboxId: sandbox, host: hostId, setup: chosen.source },
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
    setup: chosen.command,
    setupSource: chosen.source,
    setupEnv: chosen.env ?? {},
    setupHash: hash,
    setupTimeoutMs: reg.setupTimeoutMs,
    egress: reg.egress,
    keep: reg.keep,
    services,
    ...(reused ? { reused } : {}),
  };
}

/**
 * The newest snapshot of the repo on this host whose setup result a refresh
 * may take (SnapshotBuildPlan.reused): the same setup hash, setup run at most
 * SETUP_REUSE_MAX_AGE_MS ago, no services; on Docker.
 */
async function reusableSetup(
  deps: SnapshotDeps,
  at: { repo: string; mirror: string; commit: string },
  hash: string,
): Promise<SnapshotBuildPlan['reused'] | undefined> {
  // Kubernetes keeps a snapshot as its workspace's archive on a node: a build pod from one is not tried yet.
  if (deps.sandboxes.name !== 'docker') return undefined;
  const newest = await newestSnapshot(deps, at.repo);
  if (!newest || newest.setupHash !== hash || newest.services?.length) return undefined;
  if (await manifestChanged(at.mirror, newest.commit, at.commit)) return undefined;
  const labels = (await imageStoreOf(deps.sandboxes).image(newest.image))?.labels ?? {};
  const setupAt = labels[SNAPSHOT_LABELS.setupAt] ?? labels[SNAPSHOT_LABELS.created];
  if (!setupAt || !(Date.now() - Date.parse(setupAt) <= SETUP_REUSE_MAX_AGE_MS)) return undefined;
  return { buildId: newest.id, commit: newest.commit, image: newest.image, setupAt };
}

/** What `snapshot build`, `snapshot list` and `repo list` say of a reuse. */
function reuseNote(reused: NonNullable<SnapshotBuildPlan['reused']>): string {
  return (
    `setup did not run: its command, lockfiles, manifests and environment are those of the snapshot at ` +
    `${reused.commit.slice(0, 12)}, whose result this one takes, caught up to the new commit ` +
    `(setup ran at ${reused.setupAt}; it runs again when one of them changes, or a day after that)`
  );
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
  services: RunnableService[],
) {
  const image = await imageStoreOf(sandboxes).imageFromWorkspace(plan.sandbox, {
    baseImage: plan.image,
    tag,
    // Both always written: labels are inherited, so one left out would be the environment image's (a repo Dockerfile's LABEL).
    labels: {
      [SERVICES_LABEL]: JSON.stringify(services),
      [SNAPSHOT_ENV_LABEL]: JSON.stringify(plan.setupEnv),
      [SNAPSHOT_LABELS.image]: 'snapshot',
      [SNAPSHOT_LABELS.repo]: plan.repo,
      [SNAPSHOT_LABELS.commit]: plan.commit,
      [SNAPSHOT_LABELS.setupHash]: plan.setupHash,
      [SNAPSHOT_LABELS.created]: new Date().toISOString(),
      [SNAPSHOT_LABELS.setupAt]: plan.reused?.setupAt ?? new Date().toISOString(),
      [SNAPSHOT_LABELS.build]: plan.buildId,
      [SNAPSHOT_LABELS.environment]: plan.image,
      [SNAPSHOT_LABELS.host]: hostId,
    },
  });
  await imageStoreOf(sandboxes).prepareImage(tag);
  return image;
}

/**
 * Setup's data: each service with data folders is stopped (cleanly, as its
 * image says) and its folders become its data image, `<snapshot tag>-<service>`
 * under drydock-data-<repo>; made once its lower layers exist on this host,
 * so no session start pays for them. Returns the services as sessions run them.
 */
async function captureServices(
  deps: Pick<SandboxDeps, 'sandboxes'>,
  plan: SnapshotBuildPlan,
  tag: string,
): Promise<RunnableService[]> {
  const out: RunnableService[] = [];
  for (const s of plan.services) {
    if (!s.data.length) {
      out.push(s);
      continue;
    }
    const runtime = serviceRuntime(deps.sandboxes);
    // buildServices refused a repo with data folders before the build, where the provider cannot capture them.
    if (!runtime.captureData) throw new Error(`the ${deps.sandboxes.name} provider keeps no service's data`);
    await runtime.stop(plan.sandbox, s.name, 60);
    const dataImage = await runtime.captureData(plan.sandbox, s.name, {
      image: s.image,
      folders: s.data,
      tag: `drydock-data-${tag.replace(/[:/]/g, '-')}:${s.name}`,
      labels: {
        [SNAPSHOT_LABELS.image]: 'service-data',
        [SNAPSHOT_LABELS.repo]: plan.repo,
        [SNAPSHOT_LABELS.build]: plan.buildId,
      },
    });
    for (const [n, folder] of s.data.entries()) await runtime.prepareFolder(dataImage, dataPath(n, folder));
    out.push({ ...s, dataImage });
  }
  return out;
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
    ...(row.notes?.length ? { notes: row.notes } : {}),
    removed,
  };
}

/**
 * The repo's services for a build: images on the host, or pulled from an
 * allowed registry now and pinned; a refusal fails the build, naming the
 * image and the setting.
 */
async function buildServices(
  deps: SnapshotDeps,
  ctx: { row: SnapshotBuildRow; commit: string; reg: RepoRegistration; repo: string; environment: SandboxEnvironment },
): Promise<RunnableService[]> {
  const allowed = allowedRegistries(deps, ctx.reg);
  return failBuildOn(deps, ctx, async () => {
    const withData = ctx.environment.stack.services.find((s) => s.data.length);
    if (withData && !deps.sandboxes.services?.captureData) {
      throw new EnvironmentError(
        `${withData.source}.data: the ${deps.sandboxes.name} sandbox provider keeps no service's data in a ` +
          "snapshot yet, so this repo gets none: each session clones it, runs setup and starts the service's data " +
          'folders from its image (docs/kubernetes.md)',
      );
    }
    return resolveServiceImages(deps, ctx.environment.stack.services, { repo: ctx.repo, allowed, pull: true });
  });
}

/** The registries a repo's images may be pulled from: the server's, then the repo's own. */
function allowedRegistries(deps: SnapshotDeps, reg: RepoRegistration): string[] {
  return [...(deps.allowedRegistries ?? []), ...(reg.registries ?? [])];
}

/** A service that will not start is the environment's problem: the build fails, saying why. */
async function asEnvironmentError<T>(fn: () => Promise<T>): Promise<T> {
  return fn().catch((err) => {
    throw err instanceof ServiceFailure ? new EnvironmentError(err.message) : err;
  });
}

/** Runs `fn`; a permanent problem (the environment's) ends the build as failed, saying why, and fails the activity. */
async function failBuildOn<T>(
  deps: SnapshotDeps,
  ctx: { row: SnapshotBuildRow; commit: string },
  fn: () => Promise<T>,
): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (!(err instanceof EnvironmentError)) throw err;
    const failed = await deps.snapshots.finishBuild(ctx.row.id, {
      status: 'failed',
      commit: ctx.commit,
      error: err.message,
    });
    await recordBuild(deps.audit, failed, {});
    throw ApplicationFailure.nonRetryable(err.message, ErrorType.EnvironmentUnusable);
  }
}
