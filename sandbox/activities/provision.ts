/**
 * A session's sandbox: created from the newest snapshot of the repo (caught
 * up to the session's commit) or, on the cold path, from the worker's mirror;
 * a replacement re-applies the session's last checkpoint. And its removal.
 */
import { rm } from 'node:fs/promises';
import { egressDirOf } from '../egress';
import { commitsBetween } from '../../repos/git';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { heartbeatProgress } from '../../platform/heartbeat';
import { holdersOf, hostFull, refusalOf, reservationOf, reservedLabel, type Reservation } from './admission';
import { ErrorType } from '../../workflows/api';
import { SandboxNotFound, type SandboxProvider } from '../provider';
import { changedInputs, SANDBOX_SNAPSHOT_LABEL, setupHash, setupInputs, setupOf, withFeatureSetup } from '../snapshots';
import { recordEvent } from '../../store/audit';
import { browserContainerName, createOwnedContainer, ownedLabels, sandboxName } from './container';
import { sandboxEnvironment, type SandboxEnvironment } from './environment';
import type { SandboxDeps } from './deps';
import { mirrorAt } from '../../repos/mirror';
import { repoFileSetup } from '../../repos/config-file';
import type { DestroyInput, ProvisionInput, Sandbox, SandboxPlace, SetupPlan, SnapshotUse } from '../contract';
import { PoolRegistry } from '../pool-registry';
import type { AppSpec } from '../../workflows/services';
import { fillPool, type PoolDeps } from './pool';
import { fillWorkspace, isProvisioned, newestSnapshot, prepareWorkspace, type ReadySnapshot } from './workspace';
import { sandboxServiceContainers, sandboxServices, sharesOf, snapshotEnv, startSandboxServices } from './services';
import { prepareServices } from '../services';
import { sandboxOf } from '../handle';
import { takeCheckpoint } from './steps';
import { restoreServiceData } from './service-data';

/** What provisioning and teardown need: the pool's and the registry's besides their own. */
export type ProvisionDeps = PoolDeps &
  Pick<
    SandboxDeps,
    'audit' | 'checkpoints' | 'hostQueue' | 'hostTimeoutMs' | 'requestSnapshotBuild' | 'hostLimits' | 'queuedSessions'
  >;

export function createProvisionActivities(deps: ProvisionDeps) {
  const { sandboxes, egressRoot, hostId, audit, log } = deps;
  // Sessions this worker is provisioning now, with what each holds: not all of them have a container to count yet.
  const admitting = new Map<string, Reservation>();
  return {
    /**
     * Creates the session's sandbox (or finds it after a retry) with the repo
     * at the requested ref, when this host has a free slot (else HostFull:
     * the session queues). A sandbox killed meanwhile is removed, and the
     * retry provisions it again under the same name.
     */
    async provisionSandbox(input: ProvisionInput): Promise<Sandbox> {
      const leftBehind = attemptsElsewhere(deps, input);
      await admit(deps, admitting, input.sessionId, reservationOf(input.limits));
      try {
        const sandbox = await provisionOnce(deps, input);
        return leftBehind.length ? { ...sandbox, leftBehind } : sandbox;
      } catch (err) {
        // A failed attempt leaves nothing: a retry provisions anew, and a session that gives up
        // tears down only the sandbox it has (the one this would have replaced).
        await removeAttempt(deps, input).catch((cleanup: unknown) =>
          log.warn({ sessionId: input.sessionId, err: String(cleanup) }, 'a failed provisioning left its sandbox'),
        );
        if (!(err instanceof SandboxNotFound)) throw err;
        throw ApplicationFailure.retryable(
          `${err.message} while being provisioned; provisioning it again`,
          ErrorType.SandboxLostInProvisioning,
        );
      } finally {
        admitting.delete(input.sessionId);
      }
    },

    /**
     * Removes one of the session's sandboxes; already gone counts as done.
     * The session's own teardown also drops its checkpoint; a lost sandbox
     * being replaced (`replaced`) keeps it for the replacement.
     */
    async destroySandbox(input: DestroyInput): Promise<{ removed: boolean }> {
      const name = sandboxName(input.sessionId, input.generation);
      if (input.checkpointBase) await checkpointBeforeParking(deps, input, name);
      await sandboxes.destroy(browserContainerName(name));
      const removed = (await sandboxes.destroy(name)) || (await dropClaimed(deps, input));
      await rm(egressDirOf(egressRoot, name), { recursive: true, force: true });
      if (!input.replaced) await deps.checkpoints.remove(input.sessionId);
      log.info({ sessionId: input.sessionId, sandboxId: name, host: hostId, removed }, 'sandbox destroyed');
      await recordEvent(audit, {
        sessionId: input.sessionId,
        key: input.replaced ? `teardown/${name}` : 'teardown',
        kind: 'teardown',
        actor: 'drydock',
        data: { sandbox: name, removed, ...(input.replaced ? { replaced: true } : {}) },
      });
      return { removed };
    },
  };
}

/**
 * Where the earlier attempts of this provisioning ran, on other hosts than
 * this one: an attempt cut off (its worker killed, Temporal restarting) may
 * have made the sandbox there before its retry came here. Each attempt
 * heartbeats the hosts so far with its own, and the next reads them
 * (heartbeatDetails); a retry on the same host finds its sandbox anyway.
 */
function attemptsElsewhere(deps: ProvisionDeps, input: ProvisionInput): SandboxPlace[] {
  const details = Context.current().info.heartbeatDetails as { provisioningOn?: unknown } | undefined;
  const earlier = Array.isArray(details?.provisioningOn) ? (details.provisioningOn as SandboxPlace[]) : [];
  const here: SandboxPlace = {
    name: sandboxName(input.sessionId, input.generation),
    host: deps.hostId,
    hostQueue: deps.hostQueue,
    hostTimeoutMs: deps.hostTimeoutMs,
    ...(input.generation ? { generation: input.generation } : {}),
  };
  const elsewhere = earlier.filter((p) => typeof p?.hostQueue === 'string' && p.hostQueue !== deps.hostQueue);
  heartbeatProgress({ provisioningOn: [...elsewhere, here] });
  return elsewhere;
}

/** Removes what a failed provisioning attempt made: its sandbox with its services, or the pool sandbox it claimed. */
async function removeAttempt(deps: ProvisionDeps, input: ProvisionInput): Promise<void> {
  const name = sandboxName(input.sessionId, input.generation);
  await deps.sandboxes.destroy(name);
  await rm(egressDirOf(deps.egressRoot, name), { recursive: true, force: true });
  await dropClaimed(deps, input);
}

/** The working tree as the session's checkpoint, before a parked sandbox goes; a retry after it went finds none. */
async function checkpointBeforeParking(deps: ProvisionDeps, input: DestroyInput, name: string): Promise<void> {
  const at = { sandbox: name, sessionId: input.sessionId, step: 'park', baseCommit: input.checkpointBase! };
  try {
    await takeCheckpoint(deps, sandboxOf(deps.sandboxes, name), at);
  } catch (err) {
    if (!(err instanceof SandboxNotFound)) throw err;
  }
}

/**
 * Refuses (HostFull, admission.ts) when this host cannot take the session's
 * sandbox beside those of the sessions holding one or being given one by this
 * worker. A session that holds one already (a retry, a replacement) always
 * passes. A free slot goes to the queued sessions in their order
 * (queuedSessions), so a later one does not overtake. Admitted, the session
 * is counted at once (in the same turn as the check), so two provisions
 * cannot take one slot.
 */
async function admit(
  deps: ProvisionDeps,
  admitting: Map<string, Reservation>,
  sessionId: string,
  want: Reservation,
): Promise<void> {
  const limits = deps.hostLimits;
  if (!limits) return void admitting.set(sessionId, want);
  const [live, claimed, resources] = await Promise.all([
    deps.sandboxes.list(deps.hostId),
    new PoolRegistry(deps.db.pool).claimed(deps.hostId),
    deps.sandboxes.resources?.(),
  ]);
  // A claimed pool sandbox keeps its pool label: its session is counted from the claim.
  const holders = new Map([...holdersOf(live), ...claimed.map((c) => [c.sessionId, reservationOf(c.limits)] as const)]);
  if (holders.has(sessionId) || admitting.has(sessionId)) return void admitting.set(sessionId, want);
  const free = limits.sandboxes === undefined || holders.size + admitting.size < limits.sandboxes;
  // The free slots go to the queued sessions in their order: one asking now waits behind those ahead of it.
  const line = free && limits.sandboxes !== undefined ? ((await deps.queuedSessions?.()) ?? []) : [];
  const held = new Map([...holders, ...admitting]); // admitting may have grown meanwhile
  const place = line.findIndex((q) => q.sessionId === sessionId);
  const ahead = (place < 0 ? line : line.slice(0, place)).filter((q) => !held.has(q.sessionId));
  const refusal = refusalOf(limits, resources, held, want, ahead.length);
  if (refusal) throw hostFull(refusal);
  admitting.set(sessionId, want);
}

/** provisionSandbox's work, once. */
async function provisionOnce(given: ProvisionDeps, input: ProvisionInput): Promise<Sandbox> {
  // The snapshot's image is inspected once for the whole provisioning, not by each part that reads it.
  const deps = { ...given, sandboxes: imagesInspectedOnce(given.sandboxes) };
  const { hostId, hostQueue, audit, log } = deps;
  let name = sandboxName(input.sessionId, input.generation);
  const { mirror, baseCommit, snapshot, environment, behind } = await startingPoint(deps, input);
  // From a snapshot, whether setup must run is settled while the sandbox is made (it only reads);
  // without one it asks for a snapshot build, so only once the sandbox is there.
  const planning = snapshot && setupPlan(deps, input.repo.url, mirror, baseCommit, snapshot, environment);
  planning?.catch(() => undefined); // awaited below; a failure before then must not go unhandled
  const image = snapshot?.image ?? environment.image;
  const pooled = snapshot && (await claimPooled(deps, input, name, snapshot.image));
  // Drift since the snapshot, exactly as a snapshot start catches it up (setup: setupPlan below); an idle
  // pool sandbox is at the snapshot's commit, untouched and marked provisioned, so at 0 commits nothing is done.
  if (pooled) name = pooled;
  if (pooled && baseCommit !== snapshot.commit)
    await prepareWorkspace(sandboxOf(deps.sandboxes, name), {
      mirror,
      from: snapshot.commit,
      to: baseCommit,
      behind,
      mark: false,
    });
  // Its services, and the session's limits shared with them (a pool sandbox got both when it was made).
  const services = await sandboxServices(deps, snapshot?.image, environment.stack.services, input.repo.url);
  const shares = sharesOf(input.limits, services);
  const owned = { owner: input.sessionId, repo: input.repo.url, expiresAt: input.expiresAt };
  const containers = await sandboxServiceContainers(
    deps,
    name,
    services,
    shares.services,
    ownedLabels(hostId, owned),
    mirror,
  );
  // What starting the services reads is readied while the sandbox is made.
  const [created] = await Promise.all([
    !pooled &&
      createOwnedContainer(deps, {
        ...owned,
        name,
        image,
        mounts: environment.mounts,
        env: await snapshotEnv(deps, snapshot?.image, environment.env),
        limits: { ...input.limits, ...shares.sandbox },
        services: containers,
        ...(environment.stack.hostNames ? { hostNames: environment.stack.hostNames } : {}),
        labels: {
          ...reservedLabel(reservationOf(input.limits)),
          ...(snapshot ? { [SANDBOX_SNAPSHOT_LABEL]: snapshot.image } : {}),
        },
      }),
    prepareServices(deps.sandboxes, services).catch(() => undefined), // a problem is reported by the start below
  ]);
  // A replacement starts from where the lost sandbox's last step left the tree.
  const checkpoint = input.generation ? await deps.checkpoints.latest(input.sessionId) : undefined;
  // Only a sandbox found again by a retry may be provisioned already (the marker is the last thing written).
  const sandbox = sandboxOf(deps.sandboxes, name);
  // Its services start meanwhile: each is ready before the session's first step (and before setup).
  const [, restoredServices] = await Promise.all([
    !pooled && (created || !(await isProvisioned(sandbox)))
      ? fillWorkspace(sandbox, { mirror, baseCommit, snapshot, behind, checkpoint })
      : undefined,
    restoreServiceData(deps, input.sessionId, checkpoint ? containers : []).then(async (restored) => {
      await startSandboxServices(deps, name, services, containers);
      return restored;
    }),
  ]);
  const use: SnapshotUse | undefined = snapshot && {
    image: snapshot.image,
    commit: snapshot.commit,
    ageMs: Date.now() - Date.parse(snapshot.finishedAt),
    behind,
  };
  const setup = await (planning ?? setupPlan(deps, input.repo.url, mirror, baseCommit, snapshot, environment));
  const restored = checkpoint && {
    step: checkpoint.step,
    bytes: checkpoint.diff.length,
    ...(restoredServices.length ? { services: restoredServices } : {}),
  };
  const { generation } = input;
  log.info(
    {
      sessionId: input.sessionId,
      sandboxId: name,
      host: hostId,
      created,
      pooled: Boolean(pooled),
      snapshot: use,
      setup: setup?.reason,
      generation,
      restored,
    },
    'sandbox ready',
  );
  await recordEvent(audit, {
    sessionId: input.sessionId,
    key: generation ? `provision-r${generation}` : 'provision',
    kind: 'sandbox.provisioned',
    actor: 'drydock',
    data: {
      sandbox: name,
      image,
      repo: input.repo.url,
      commit: baseCommit,
      limits: input.limits,
      snapshot: use,
      ...(environment.node ? { node: environment.node } : {}),
      ...(services.length ? { services: services.map((sv) => ({ name: sv.name, image: sv.image })) } : {}),
      ...(pooled ? { pooled: true } : {}),
      ...(generation ? { generation, restored } : {}),
    },
  });
  // Only now, so that its docker create does not compete with this claim for the host's cores.
  if (pooled) refillAfterClaim(deps, input.repo.url);
  return {
    name,
    host: hostId,
    hostQueue,
    image,
    baseCommit,
    hostTimeoutMs: deps.hostTimeoutMs,
    ...(use ? { snapshot: use } : {}),
    ...(setup ? { setup } : {}),
    ...(generation ? { generation, ...(restored ? { restored } : {}) } : {}),
    ...agentAppOf(environment.stack.app),
    ...previewAppOf(environment.stack.app),
  };
}

/**
 * Where the sandbox starts from. What needs nothing else is looked up at
 * once: the repo's commit and its newest snapshot, then its environment and
 * the commits since the snapshot.
 */
async function startingPoint(deps: ProvisionDeps, input: ProvisionInput) {
  const [{ mirror, commit: baseCommit }, snapshot] = await Promise.all([
    mirrorAt(deps, input.repo.url, input.repo.ref),
    newestSnapshot(deps, input.repo.url, input.snapshot),
  ]);
  const [environment, behind] = await Promise.all([
    sandboxEnvironment(deps, { mirror, commit: baseCommit }, input.repo.url),
    snapshot && commitsBetween(mirror, snapshot.commit, baseCommit),
  ]);
  return { mirror, baseCommit, snapshot, environment, behind };
}

/**
 * The provider, with `image` answered once per reference: the same snapshot
 * image is read by the snapshot lookup, its services, its environment, the
 * create and the CA bundle within one provisioning (which may see it go
 * only as it sees it go anyway: once).
 */
function imagesInspectedOnce(sandboxes: SandboxProvider): SandboxProvider {
  const seen = new Map<string, ReturnType<SandboxProvider['image']>>();
  const image = (ref: string) => {
    const known = seen.get(ref) ?? sandboxes.image(ref);
    seen.set(ref, known);
    known.catch(() => seen.delete(ref)); // a failed inspect is asked again
    return known;
  };
  return Object.assign(Object.create(sandboxes) as SandboxProvider, { image });
}

/** The repo's app, when it asks to run for the agent: the session starts it after setup (./agent-app.ts). */
function agentAppOf(app: AppSpec | undefined): Pick<Sandbox, 'app'> {
  if (!app?.forAgent) return {};
  const { start, port, readyPath, readyTimeoutMs } = app;
  return { app: { start, port, readyPath, readyTimeoutMs } };
}

/** The repo's app for people's preview (workers/routes/preview.ts): any `app:`, for the agent or not. */
function previewAppOf(app: AppSpec | undefined): Pick<Sandbox, 'preview'> {
  if (!app) return {};
  const { start, port, readyPath, readyTimeoutMs } = app;
  return { preview: { start, port, readyPath, readyTimeoutMs } };
}

/**
 * The warm-pool sandbox this session gets: the one it claimed before (a
 * retry), or a newly claimed idle one of the host's newest snapshot with the
 * session's exact limits; undefined (provision as usual) for a replacement,
 * a session already provisioned the usual way, or an empty pool.
 */
async function claimPooled(
  deps: ProvisionDeps,
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
function refillAfterClaim(deps: PoolDeps, repo: string): void {
  new PoolRegistry(deps.db.pool)
    .size(repo)
    .then((size) => fillPool(deps, repo, size))
    .catch((err: unknown) =>
      deps.log.warn({ repo, err: String(err) }, 'warm pool refill failed; the reaper will retry'),
    );
}

/** Removes the pool sandbox a session claimed, and its row; true if there was one. */
async function dropClaimed(
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

/**
 * Whether the session must run setup before the agent: the repo is
 * registered and there is no snapshot (cold path; a build is started for
 * next time), or its setup inputs changed since the snapshot.
 */
async function setupPlan(
  deps: Pick<SandboxDeps, 'snapshots' | 'requestSnapshotBuild' | 'log'>,
  repo: string,
  mirror: string,
  commit: string,
  snapshot: ReadySnapshot | undefined,
  environment: Pick<SandboxEnvironment, 'setup' | 'featureSetup' | 'key'>,
): Promise<SetupPlan | undefined> {
  const reg = await deps.snapshots.repo(repo);
  if (!reg) return undefined;
  const inputs = await setupInputs(mirror, commit);
  // As a snapshot build chooses it (sandbox/activities/snapshot-build.ts), so the setup hashes agree.
  const command = withFeatureSetup(
    setupOf(reg, inputs, await repoFileSetup(mirror, commit), environment.setup),
    environment.featureSetup,
  )?.command;
  if (!command) return undefined;
  const plan = { command, timeoutMs: reg.setupTimeoutMs, egress: reg.egress };
  if (!snapshot) {
    const started = await deps.requestSnapshotBuild(repo);
    deps.log.info({ repo, started }, 'no snapshot yet: cold start, snapshot build requested');
    return { ...plan, reason: 'no snapshot yet' };
  }
  if (setupHash(command, inputs, environment.key) === snapshot.setupHash) return undefined;
  const before = await setupInputs(mirror, snapshot.commit).catch(() => ({}));
  const changed = changedInputs(before, inputs);
  return {
    ...plan,
    reason: `changed since the snapshot: ${changed.length ? changed.join(', ') : 'the setup command'}`,
  };
}
