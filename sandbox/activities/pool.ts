/**
 * The warm pool (docs/operations.md, "Sizing the warm pool"): each host keeps
 * `pool` idle sandboxes per registered repo, started from its newest ready
 * snapshot with a default session's limits. Filled after each snapshot build
 * on the host, at every reaper run, and (in the background) after a claim;
 * idle sandboxes of an older snapshot, or beyond the size, are retired first.
 * And a session's claim of one (provision.ts), with its removal.
 */
import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { egressDirOf } from '../egress';
import { POOL_LABEL, POOL_LIMITS, PoolRegistry } from '../pool-registry';
import { repoSlug, SANDBOX_SNAPSHOT_LABEL } from '../snapshots';
import { createOwnedContainer, ownedLabels, type ContainerDeps } from './container';
import { sandboxEnvironment, type EnvironmentDeps } from './environment';
import { mirrorAt } from '../../repos/mirror';
import type { SandboxDeps } from './deps';
import type { MirrorDeps } from '../../repos/mirror';
import { newestSnapshot, prepareWorkspace } from './workspace';
import { sandboxServiceContainers, sandboxServices, sharesOf, snapshotEnv, startSandboxServices } from './services';
import { sandboxOf } from '../handle';
import type { ProvisionInput } from '../contract';

/** How long an idle pool sandbox may live before the reaper takes it (a refill replaces it). */
export const POOL_IDLE_TTL_MS = 7 * 24 * 3600_000;

/** What filling a pool needs: its rows, the newest snapshot, and making containers of it. */
export type PoolDeps = ContainerDeps & EnvironmentDeps & MirrorDeps & Pick<SandboxDeps, 'db' | 'snapshots' | 'log'>;

export interface PoolFill {
  repo: string;
  added: string[];
  retired: string[];
}

export function createPoolActivities(deps: PoolDeps) {
  return {
    /** Brings every repo's pool on this host to its size (one repo's when given). Idempotent. */
    async fillPools(input: { repo?: string } = {}): Promise<PoolFill[]> {
      const pools = new PoolRegistry(deps.db.pool);
      const sizes = input.repo
        ? [{ repo: input.repo, size: await pools.size(input.repo) }]
        : await allRepoSizes(deps, pools);
      const out: PoolFill[] = [];
      for (const { repo, size } of sizes) out.push(await fillPool(deps, repo, size));
      return out;
    },
  };
}

/** Repos with a pool, and repos whose pool was set to 0 but still has idle sandboxes here. */
async function allRepoSizes(
  deps: Pick<PoolDeps, 'hostId'>,
  pools: PoolRegistry,
): Promise<{ repo: string; size: number }[]> {
  const sizes = await pools.sizes();
  for (const row of await pools.idle(deps.hostId)) {
    if (!sizes.some((s) => s.repo === row.repo)) sizes.push({ repo: row.repo, size: 0 });
  }
  return sizes;
}

const filling = new Map<string, Promise<PoolFill>>();

/**
 * One repo's pool on this host: retires idle sandboxes of an older snapshot
 * and those beyond `size`, then provisions the missing ones. Calls for the
 * same repo in this worker share one run (so a claim's refill and the
 * reaper's do not both add).
 */
export function fillPool(deps: PoolDeps, repo: string, size: number): Promise<PoolFill> {
  const running = filling.get(repo);
  if (running) return running;
  const run = fillPoolOnce(deps, repo, size).finally(() => filling.delete(repo));
  filling.set(repo, run);
  return run;
}

async function fillPoolOnce(deps: PoolDeps, repo: string, size: number): Promise<PoolFill> {
  const pools = new PoolRegistry(deps.db.pool);
  const snapshot = size > 0 ? await newestSnapshot(deps, repo) : undefined;
  const idle = await pools.idle(deps.hostId, repo);
  const current = idle.filter((r) => r.image === snapshot?.image);
  const stale = [...idle.filter((r) => r.image !== snapshot?.image), ...current.slice(size)];
  const retired: string[] = [];
  for (const row of stale) {
    // The row goes first: once it is gone, no session can claim the sandbox being removed.
    if (!(await pools.retire(row.name))) continue;
    await removePoolSandbox(deps, row.name);
    retired.push(row.name);
  }
  const added: string[] = [];
  // The helpers and a declared Node.js, mounted as in a session's own sandbox (at the snapshot's commit).
  const mirror = snapshot && (await mirrorAt(deps, repo, snapshot.commit)).mirror;
  const environment = snapshot && mirror && (await sandboxEnvironment(deps, { mirror, commit: snapshot.commit }, repo));
  // Its services too, started and ready: a claim gets a sandbox whose database is up with setup's data.
  const services = snapshot ? await sandboxServices(deps, snapshot.image, [], repo) : [];
  const shares = sharesOf(POOL_LIMITS, services);
  for (let i = Math.min(current.length, size); snapshot && environment && i < size; i++) {
    const name = `drydock-pool-${repoSlug(repo).slice(0, 60)}-${randomUUID().slice(0, 8)}`;
    try {
      const owned = { owner: `pool:${repo}`, repo, expiresAt: new Date(Date.now() + POOL_IDLE_TTL_MS).toISOString() };
      const containers = await sandboxServiceContainers(
        deps,
        name,
        services,
        shares.services,
        ownedLabels(deps.hostId, owned),
        mirror!,
      );
      await createOwnedContainer(deps, {
        ...owned,
        name,
        image: snapshot.image,
        mounts: environment.mounts,
        env: await snapshotEnv(deps, snapshot.image, environment.env),
        limits: { ...POOL_LIMITS, ...shares.sandbox },
        labels: { [POOL_LABEL]: repo, [SANDBOX_SNAPSHOT_LABEL]: snapshot.image },
        services: containers,
        ...(environment.stack.hostNames ? { hostNames: environment.stack.hostNames } : {}),
      });
      await Promise.all([
        prepareWorkspace(sandboxOf(deps.sandboxes, name), { mark: true }),
        startSandboxServices(deps, name, services, containers),
      ]);
      await pools.add({ name, repo, host: deps.hostId, image: snapshot.image, limits: POOL_LIMITS });
      added.push(name);
    } catch (err) {
      await removePoolSandbox(deps, name);
      throw err;
    }
  }
  if (added.length || retired.length) deps.log.info({ repo, host: deps.hostId, added, retired }, 'warm pool filled');
  return { repo, added, retired };
}

async function removePoolSandbox(deps: Pick<PoolDeps, 'sandboxes' | 'egressRoot'>, name: string): Promise<void> {
  await deps.sandboxes.destroy(name);
  await rm(egressDirOf(deps.egressRoot, name), { recursive: true, force: true });
}

/**
 * The warm-pool sandbox this session gets: the one it claimed before (a
 * retry), or a newly claimed idle one of the host's newest snapshot with the
 * session's exact limits; undefined (provision as usual) for a replacement,
 * a session already provisioned the usual way, or an empty pool.
 */
export async function claimPooled(
  deps: PoolDeps,
  input: ProvisionInput,
  ownName: string,
  newestImage: string,
): Promise<string | undefined> {
  if (input.generation) return undefined;
  const pools = new PoolRegistry(deps.db.pool);
  const before = await pools.claimedBy(input.sessionId);
  if (before) {
    // Claimed by an earlier attempt: still current, or dropped for the usual path.
    if ((await pools.get(before))?.image === newestImage) return before;
    await dropClaimed(deps, input);
    return undefined;
  }
  if (await deps.sandboxes.exists(ownName)) return undefined;
  const claimed = await pools.claim({
    sessionId: input.sessionId,
    repo: input.repo.url,
    host: deps.hostId,
    image: newestImage,
    limits: input.limits,
    expiresAt: input.expiresAt,
  });
  return claimed;
}

/** After a claim: the pool is refilled in the background (the reaper's run is the durable one). */
export function refillAfterClaim(deps: PoolDeps, repo: string): void {
  new PoolRegistry(deps.db.pool)
    .size(repo)
    .then((size) => fillPool(deps, repo, size))
    .catch((err: unknown) =>
      deps.log.warn({ repo, err: String(err) }, 'warm pool refill failed; the reaper will retry'),
    );
}

/** Removes the pool sandbox a session claimed, and its row; true if there was one. */
export async function dropClaimed(
  deps: Pick<SandboxDeps, 'db' | 'sandboxes' | 'egressRoot'>,
  input: Pick<ProvisionInput, 'sessionId' | 'generation'>,
) {
  if (input.generation) return false;
  const pools = new PoolRegistry(deps.db.pool);
  const claimed = await pools.claimedBy(input.sessionId);
  if (!claimed) return false;
  await deps.sandboxes.destroy(claimed);
  await rm(egressDirOf(deps.egressRoot, claimed), { recursive: true, force: true });
  await pools.forget(claimed);
  return true;
}
