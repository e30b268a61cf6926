/**
 * A session's sandbox: created from the newest snapshot of the repo (caught
 * up to the session's commit) or, on the cold path, from the worker's mirror;
 * a replacement re-applies the session's last checkpoint. And its removal.
 */
import { mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { egressDirOf } from '../egress';
import { commitsBetween } from '../../repos/git';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { heartbeatProgress } from '../../platform/heartbeat';
import { holdersOf, hostFull, refusalOf, reservationOf, reservedLabel, type Reservation } from './admission';
import { ErrorType } from '../../workflows/api';
import { SandboxNotFound, type ExecResult, type ImageStore, type SandboxProvider, type SandboxSpec } from '../provider';
import { changedInputs, chooseSetup, SANDBOX_SNAPSHOT_LABEL, setupHash, setupInputs, type setupOf } from '../snapshots';
import { recordEvent } from '../../store/audit';
import { createOwnedContainer, ownedLabels, sandboxName } from './container';
import { sandboxEnvironment, type SandboxEnvironment } from './environment';
import type { SandboxDeps } from './deps';
import { mirrorAt } from '../../repos/mirror';
import type { DestroyInput, ProvisionInput, Sandbox, SandboxPlace, SetupPlan, SnapshotUse } from '../contract';
import { PoolRegistry } from '../pool-registry';
import type { AppSpec } from '../../workflows/services';
import { claimPooled, dropClaimed, refillAfterClaim, type PoolDeps } from './pool';
import {
  checkPrepared,
  coldTree,
  fillWorkspace,
  isProvisioned,
  newestSnapshot,
  prepareFirst,
  FIRST_FILES,
  prepareWorkspace,
  type SnapshotStart,
} from './workspace';
import type { Checkpoint } from '../checkpoints';
import { planServices, snapshotEnv, startPlannedServices, withSetupEnv, type ServicePlan } from './services';
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
     * being replaced (`replaced`) keeps it for the replacement. Its
     * companions (a check's browser left by a crash, its services) go with it.
     */
    async destroySandbox(input: DestroyInput): Promise<{ removed: boolean }> {
      const name = sandboxName(input.sessionId, input.generation);
      if (input.checkpointBase) await checkpointBeforeParking(deps, input, name);
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

/**
 * provisionSandbox's work, once: a pipeline of named steps, each type saying
 * what is known after it. Where it starts (StartingPoint), which sandbox it
 * is (Placement: its own, or a warm-pool one claimed), its services
 * (ServicePlan), the sandbox made, filled and its services started, then
 * ready (Sandbox) and recorded.
 */
async function provisionOnce(given: ProvisionDeps, input: ProvisionInput): Promise<Sandbox> {
  // The snapshot's image is inspected once for the whole provisioning, not by each part that reads it.
  const deps = { ...given, sandboxes: imagesInspectedOnce(given.sandboxes) };
  const start = await startingPoint(deps, input);
  // The repo's setup is chosen while the sandbox is made (it only reads); the cold path's sandbox
  // gets its variables. From a snapshot, whether setup must run is settled meanwhile too; without
  // one it asks for a snapshot build, so only once the sandbox is there.
  const choosing = sessionSetup(deps, input.repo.url, start);
  const planning = start.from && setupPlan(deps, input.repo.url, start, choosing);
  for (const p of [choosing, planning]) p?.catch(() => undefined); // awaited below; not unhandled meanwhile
  const place = await placeSandbox(deps, input, start);
  // Its services, and the session's limits shared with them (a pool sandbox got both when it was made).
  const plan = await planServices(
    deps,
    place.name,
    { snapshotImage: start.from?.snapshot.image, declared: start.environment.stack.services, mirror: start.mirror },
    { repo: input.repo.url, limits: input.limits, labels: ownedLabels(deps.hostId, ownership(input)) },
  );
  const checkpoint = input.generation ? await deps.checkpoints.latest(input.sessionId) : undefined;
  const setupEnv = start.from ? undefined : (await choosing)?.chosen.env;
  const { created, first } = await makeSandbox(deps, input, start, place, plan, checkpoint, setupEnv);
  const restored = await fillSandbox(deps, { input, start, place, plan, checkpoint }, { created, first });
  const setup = await (planning ?? setupPlan(deps, input.repo.url, start, choosing));
  const ready = readySandbox(deps, input, start, place.name, setup, restored);
  await recordProvisioned(deps, input, ready, { created, pooled: place.pooled, start, plan });
  // Only now, so that its docker create does not compete with this claim for the host's cores.
  if (place.pooled) refillAfterClaim(deps, input.repo.url);
  return ready;
}

/** Where a sandbox starts from, known before anything is made. */
interface StartingPoint {
  /** The worker's mirror of the repo, holding `baseCommit`. */
  mirror: string;
  /** The commit the session starts at (its ref, resolved). */
  baseCommit: string;
  environment: SandboxEnvironment;
  /** The image the sandbox runs: the snapshot's, else the environment's (the cold path). */
  image: string;
  /** The snapshot it starts from, and the commits since; absent: the cold path. */
  from?: SnapshotStart;
}

/** Which sandbox the session gets: its own by name, or a warm-pool sandbox it claimed (made already). */
interface Placement {
  name: string;
  pooled: boolean;
}

/**
 * Where the sandbox starts from. What needs nothing else is looked up at
 * once: the repo's commit and its newest snapshot, then its environment and
 * the commits since the snapshot.
 */
async function startingPoint(deps: ProvisionDeps, input: ProvisionInput): Promise<StartingPoint> {
  const [{ mirror, commit: baseCommit }, snapshot] = await Promise.all([
    mirrorAt(deps, input.repo.url, input.repo.ref),
    newestSnapshot(deps, input.repo.url, input.snapshot),
  ]);
  const [environment, behind] = await Promise.all([
    sandboxEnvironment(deps, { mirror, commit: baseCommit }, input.repo.url),
    snapshot && commitsBetween(mirror, snapshot.commit, baseCommit),
  ]);
  const image = snapshot?.image ?? environment.image;
  return { mirror, baseCommit, environment, image, ...(snapshot ? { from: { snapshot, behind } } : {}) };
}

/** Who owns the session's containers, and until when (the reaper reads it from their labels). */
function ownership(input: ProvisionInput) {
  return { owner: input.sessionId, repo: input.repo.url, expiresAt: input.expiresAt };
}

/**
 * The session's sandbox: a warm-pool one it claims when it starts from a
 * snapshot (caught up here to the session's commit), else its own by name.
 */
async function placeSandbox(deps: ProvisionDeps, input: ProvisionInput, start: StartingPoint): Promise<Placement> {
  const own = sandboxName(input.sessionId, input.generation);
  const { from } = start;
  const pooled = from && (await claimPooled(deps, input, own, from.snapshot.image));
  if (!pooled) return { name: own, pooled: false };
  // Drift since the snapshot, exactly as a snapshot start catches it up (setup: setupPlan); an idle pool
  // sandbox is at the snapshot's commit, untouched and marked provisioned, so at 0 commits nothing is done.
  if (start.baseCommit !== from.snapshot.commit)
    await prepareWorkspace(sandboxOf(deps.sandboxes, pooled), {
      mirror: start.mirror,
      from: from.snapshot.commit,
      to: start.baseCommit,
      behind: from.behind,
      mark: false,
    });
  return { name: pooled, pooled: true };
}

/** What making the sandbox did: made now (false: a retry found it), and its first process's preparation. */
interface Made {
  created: boolean;
  first?: ExecResult;
}

/** Where a first process finds its files (FIRST_FILES): the sandbox's egress folder, read-only at /run/drydock. */
const FIRST_FILES_IN_SANDBOX = '/run/drydock';

/**
 * Makes the sandbox with its services' containers (a pool sandbox has both).
 * On a provider that can, the workspace is prepared by the sandbox's own
 * first process (no exec after the start): from a snapshot, or on the cold
 * path with the working tree put in before it. What starting the services
 * reads is readied meanwhile.
 */
async function makeSandbox(
  deps: ProvisionDeps,
  input: ProvisionInput,
  start: StartingPoint,
  place: Placement,
  plan: ServicePlan,
  checkpoint: Checkpoint | undefined,
  setupEnv: Record<string, string> | undefined,
): Promise<Made> {
  if (place.pooled) {
    await prepareServices(deps.sandboxes, plan.services).catch(() => undefined);
    return { created: false };
  }
  const { environment, from } = start;
  const egress = egressDirOf(deps.egressRoot, place.name);
  const { firstCommand } = deps.sandboxes.capabilities;
  // The cold path's working tree is made while the sandbox is, and put in before its first process runs.
  const cold = !from && firstCommand ? coldTree(start.mirror, start.baseCommit) : undefined;
  try {
    let first: SandboxSpec['first'];
    if (firstCommand) {
      await mkdir(egress, { recursive: true, mode: 0o755 });
      const at = { mirror: start.mirror, from, baseCommit: start.baseCommit, checkpoint };
      first = { ...(await prepareFirst(at, { host: egress, sandbox: FIRST_FILES_IN_SANDBOX })), files: cold?.files };
    }
    const [made] = await Promise.all([
      createOwnedContainer(deps, {
        ...ownership(input),
        name: place.name,
        image: start.image,
        mounts: environment.mounts,
        // A snapshot's setup variables are on its image; on the cold path, those of the setup it will run.
        env: from
          ? await snapshotEnv(deps, from.snapshot.image, environment.env)
          : withSetupEnv(environment.env, setupEnv),
        limits: { ...input.limits, ...plan.sandboxShare },
        services: plan.containers,
        ...(environment.stack.hostNames ? { hostNames: environment.stack.hostNames } : {}),
        labels: {
          ...reservedLabel(reservationOf(input.limits)),
          ...(from ? { [SANDBOX_SNAPSHOT_LABEL]: from.snapshot.image } : {}),
        },
        ...(first ? { first } : {}),
      }),
      prepareServices(deps.sandboxes, plan.services).catch(() => undefined), // a problem is reported by the start below
    ]);
    return made;
  } finally {
    // Also after a failure while they were written: nothing of this attempt stays on the worker.
    if (firstCommand) await Promise.all(FIRST_FILES.map((f) => rm(path.join(egress, f), { force: true })));
    await cold?.cleanup();
  }
}

/**
 * Fills the workspace (a replacement's from the lost sandbox's last
 * checkpoint) while its services start, each ready before the session's
 * first step (and before setup); what the checkpoint brought back.
 */
async function fillSandbox(
  deps: ProvisionDeps,
  of: { input: ProvisionInput; start: StartingPoint; place: Placement; plan: ServicePlan; checkpoint?: Checkpoint },
  made: Made,
): Promise<Sandbox['restored']> {
  const { input, start, place, plan, checkpoint } = of;
  // Its first process prepared it (a failure there fails this attempt, as an exec's would).
  if (made.first) checkPrepared(made.first);
  // Only a sandbox found again by a retry may be provisioned already (the marker is the last thing written).
  const sandbox = sandboxOf(deps.sandboxes, place.name);
  const at = { mirror: start.mirror, baseCommit: start.baseCommit, from: start.from, checkpoint };
  const [, services] = await Promise.all([
    !place.pooled && (made.created || !(await isProvisioned(sandbox)))
      ? fillWorkspace(sandbox, at, made.first !== undefined)
      : undefined,
    restoreServiceData(deps, input.sessionId, checkpoint ? plan.containers : []).then(async (restored) => {
      await startPlannedServices(deps, place.name, plan);
      return restored;
    }),
  ]);
  return (
    checkpoint && { step: checkpoint.step, bytes: checkpoint.diff.length, ...(services.length ? { services } : {}) }
  );
}

/** The sandbox as the session knows it from here on: where it is, what it runs, what it must do first. */
function readySandbox(
  deps: ProvisionDeps,
  input: ProvisionInput,
  start: StartingPoint,
  name: string,
  setup: SetupPlan | undefined,
  restored: Sandbox['restored'],
): Sandbox {
  const { from } = start;
  const use: SnapshotUse | undefined = from && {
    image: from.snapshot.image,
    commit: from.snapshot.commit,
    ageMs: Date.now() - Date.parse(from.snapshot.finishedAt),
    behind: from.behind,
  };
  const { generation } = input;
  return {
    name,
    host: deps.hostId,
    hostQueue: deps.hostQueue,
    image: start.image,
    baseCommit: start.baseCommit,
    hostTimeoutMs: deps.hostTimeoutMs,
    ...(use ? { snapshot: use } : {}),
    ...(setup ? { setup } : {}),
    ...(generation ? { generation, ...(restored ? { restored } : {}) } : {}),
    ...agentAppOf(start.environment.stack.app),
    ...previewAppOf(start.environment.stack.app),
    ...(start.environment.featureStarts ? { featureStarts: start.environment.featureStarts } : {}),
  };
}

/** The ready sandbox in the worker's log and the session's audit trail. */
async function recordProvisioned(
  deps: ProvisionDeps,
  input: ProvisionInput,
  ready: Sandbox,
  how: { created: boolean; pooled: boolean; start: StartingPoint; plan: ServicePlan },
): Promise<void> {
  const { created, pooled, start, plan } = how;
  const { generation, restored, snapshot: use, name } = ready;
  deps.log.info(
    {
      sessionId: input.sessionId,
      sandboxId: name,
      host: deps.hostId,
      created,
      pooled,
      snapshot: use,
      setup: ready.setup?.reason,
      generation,
      restored,
    },
    'sandbox ready',
  );
  const { services } = plan;
  await recordEvent(deps.audit, {
    sessionId: input.sessionId,
    key: generation ? `provision-r${generation}` : 'provision',
    kind: 'sandbox.provisioned',
    actor: 'drydock',
    data: {
      sandbox: name,
      image: ready.image,
      repo: input.repo.url,
      commit: ready.baseCommit,
      limits: input.limits,
      snapshot: use,
      ...(start.environment.node ? { node: start.environment.node } : {}),
      ...(services.length ? { services: services.map((sv) => ({ name: sv.name, image: sv.image })) } : {}),
      ...(pooled ? { pooled: true } : {}),
      ...(generation ? { generation, restored } : {}),
    },
  });
}

/**
 * The provider, with its image store's `image` answered once per reference
 * found: the same snapshot image is read by the snapshot lookup, its
 * services, its environment, the create and the CA bundle within one
 * provisioning (which may see it go only as it sees it go anyway: once). An
 * image not there is asked again: provisioning may build it meanwhile (a cold
 * start's environment), and must then find it.
 */
export function imagesInspectedOnce(sandboxes: SandboxProvider): SandboxProvider {
  const store = sandboxes.imageStore;
  if (!store) return sandboxes;
  const seen = new Map<string, ReturnType<ImageStore['image']>>();
  const image = (ref: string) => {
    const known = seen.get(ref) ?? store.image(ref);
    seen.set(ref, known);
    const forget = () => seen.get(ref) === known && seen.delete(ref);
    known.then((found) => found || forget(), forget); // none yet, or a failed inspect: asked again
    return known;
  };
  const imageStore = Object.assign(Object.create(store) as ImageStore, { image });
  return Object.assign(Object.create(sandboxes) as SandboxProvider, { imageStore });
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

/** A registered repo's setup at the session's commit, with what it was chosen from; none when unregistered or without one. */
type SessionSetup = {
  reg: NonNullable<Awaited<ReturnType<SandboxDeps['snapshots']['repo']>>>;
  inputs: Record<string, string>;
  chosen: NonNullable<ReturnType<typeof setupOf>>;
};

/** The repo's setup as a snapshot build chooses it (chooseSetup), the inferred one included. */
async function sessionSetup(
  deps: Pick<SandboxDeps, 'snapshots'>,
  repo: string,
  start: Pick<StartingPoint, 'mirror' | 'baseCommit' | 'environment'>,
): Promise<SessionSetup | undefined> {
  const { mirror, baseCommit: commit, environment } = start;
  const reg = await deps.snapshots.repo(repo);
  if (!reg) return undefined;
  const inputs = await setupInputs(mirror, commit);
  const chosen = await chooseSetup(reg, { mirror, commit, inputs }, environment);
  return chosen && { reg, inputs, chosen };
}

/**
 * Whether the session must run setup before the agent: the repo is
 * registered and there is no snapshot (cold path; a build is started for
 * next time), or its setup inputs changed since the snapshot.
 */
async function setupPlan(
  deps: Pick<SandboxDeps, 'snapshots' | 'requestSnapshotBuild' | 'log'>,
  repo: string,
  start: Pick<StartingPoint, 'mirror' | 'baseCommit' | 'environment' | 'from'>,
  choosing: Promise<SessionSetup | undefined>,
): Promise<SetupPlan | undefined> {
  const { mirror, environment } = start;
  const snapshot = start.from?.snapshot;
  const setup = await choosing;
  if (!setup) return undefined;
  const { reg, inputs, chosen } = setup;
  const { command } = chosen;
  const plan = {
    command,
    timeoutMs: reg.setupTimeoutMs,
    egress: reg.egress,
    ...(chosen.env ? { env: chosen.env } : {}),
  };
  if (!snapshot) {
    const started = await deps.requestSnapshotBuild(repo);
    deps.log.info({ repo, started }, 'no snapshot yet: cold start, snapshot build requested');
    return { ...plan, reason: 'no snapshot yet' };
  }
  if (setupHash(command, inputs, environment.key) === snapshot.setupHash) return undefined;
  const before = await setupInputs(mirror, snapshot.commit).catch(() => ({}));
  const changed = changedInputs(before, inputs);
  // What else changed: the command, or the environment (the image, the declared Node.js), which the build recorded.
  if (snapshot.setup !== undefined && snapshot.setup !== command) changed.push('the setup command');
  else if (snapshot.setup !== undefined && setupHash(snapshot.setup, before, environment.key) !== snapshot.setupHash)
    changed.push('the environment');
  return {
    ...plan,
    reason: `changed since the snapshot: ${changed.length ? changed.join(', ') : 'the setup command'}`,
  };
}
