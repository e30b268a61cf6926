/**
 * The session's sandbox: provisioning (with the setup a snapshot lacks),
 * replacing a lost one from the last checkpoint, on whichever host answers,
 * and parking: a session that waits (at a gate, for a follow-up) gives its
 * sandbox up, and the next thing that runs in it brings one back from the checkpoint.
 */
import { CancellationScope, log } from '@temporalio/workflow';
import type { AgentApp, FeatureStart, Sandbox, SandboxPlace, SetupPlan } from '../../sandbox/contract';
import { durationMs, sandboxLimitsOf } from '../units';
import { describeError, exitText, SessionEnd } from './errors';
import { onHost, provisioning, sandboxLoss, teardownOn, type SandboxLoss } from './proxies';
import { stepNonce } from './nonce';
import { whenAdmitted } from './queue';
import { recordStep, type SessionRun } from './state';

/** Replacements of a lost sandbox before the session gives up. */
const MAX_SANDBOX_REPLACEMENTS = 3;
/** How long the dev container's features' postStartCommands may take together at a start of the sandbox, ms. */
const FEATURE_START_TIMEOUT_MS = 5 * 60_000;

/** Creates the session's sandbox from the newest snapshot of the repo, and runs any setup it still needs. */
export async function provision(run: SessionRun): Promise<void> {
  const { input, sessionId } = run;
  const sandbox = await run.track('provision', async (record) => {
    const created = await whenAdmitted(run, () =>
      provisioning.provisionSandbox({
        sessionId,
        // Where repoPolicy resolved the ref: the host need not fetch again, and the repo file read is this commit's.
        repo: { url: input.repo.url, ref: run.startCommit ?? input.repo.ref },
        limits: sandboxLimitsOf(run.input.limits),
        expiresAt: new Date(Date.now() + sandboxLifetimeMs(run)).toISOString(),
        ...(input.drill?.staleSnapshot ? { snapshot: 'oldest' as const } : {}),
      }),
    );
    record.detail = `${created.name} on ${created.host} at ${created.baseCommit.slice(0, 12)}`;
    return created;
  });
  run.useSandbox(sandbox);
  if (sandbox.snapshot) run.status.snapshot = sandbox.snapshot;
  if (sandbox.setup) await runSetup(run, sandbox.setup);
  if (sandbox.featureStarts) await startFeatures(run, sandbox.featureStarts);
}

/**
 * Runs the dev container's features' postStartCommands at a start of the
 * sandbox (its first, a replacement's, a parked session's return): after
 * setup, before the first step and the app, as the Dev Container CLI runs a
 * feature's hooks before the dev container's own. One that fails ends the
 * session as a failed setup does, naming the feature (the CLI stops there too).
 */
async function startFeatures(run: SessionRun, starts: FeatureStart[]): Promise<void> {
  await run.track('features: postStartCommand', async (record) => {
    const result = await inSandbox(run, (sb) =>
      onHost(sb, FEATURE_START_TIMEOUT_MS + 5 * 60_000).startFeatures({
        sandbox: sb.name,
        image: sb.image,
        starts,
        timeoutMs: FEATURE_START_TIMEOUT_MS,
        limits: sandboxLimitsOf(run.input.limits),
      }),
    );
    record.detail = result.ok
      ? starts.map((s) => s.feature).join(', ')
      : `${result.feature}: ${result.why}${result.output ? `; its output ends: ${result.output}` : ''}`;
    record.ok = result.ok;
    if (!result.ok)
      throw new SessionEnd(
        'failed',
        `the postStartCommand of the dev container's feature ${result.feature} ${result.why}` +
          (result.output ? `; its output ends: ${result.output}` : ''),
        'feature_start_failed',
      );
  });
}

/**
 * Starts the repo's app for the agent (`app.forAgent`) before the agent's
 * steps of an attempt (verification stopped the one before; a running one
 * is kept); one that does not answer is noted and the session goes on (the
 * agent reads why with service_logs "app").
 */
export async function startAgentApp(run: SessionRun): Promise<void> {
  if (run.previewStarted && !run.sandbox?.app) await stopAgentApp(run); // the preview's app is not the agent's
  if (!run.sandbox?.app) return;
  await inSandbox(run, (sb) => (sb.app ? startAppIn(run, sb, sb.app) : Promise.resolve()));
}

/** Stops the app kept for the agent, if the repo asks for one: nothing the agent may have changed in it runs during verification. */
export async function stopAgentApp(run: SessionRun): Promise<void> {
  if (!run.sandbox?.app && !run.previewStarted) return;
  await inSandbox(run, (sb) => onHost(sb).stopAgentApp({ sandbox: sb.name }));
  run.previewStarted = false;
}

async function startAppIn(run: SessionRun, sandbox: Sandbox, app: AgentApp): Promise<void> {
  await run.track('app', async (record) => {
    const started = await onHost(sandbox, app.readyTimeoutMs + 5 * 60_000).startAgentApp({
      sandbox: sandbox.name,
      image: sandbox.image,
      app,
      limits: sandboxLimitsOf(run.input.limits),
    });
    record.detail = started.ready
      ? `answers on localhost:${app.port}`
      : `started, not ready: ${started.why.slice(0, 500)}`;
    record.ok = started.ready;
  });
}

/**
 * Runs `fn` against the session's sandbox. If the sandbox is lost (its
 * container died, or its host stopped answering), replaces it from the last
 * checkpoint, on whichever host picks up the provisioning, and runs `fn`
 * again there: the step that was cut off runs again, the ones before it
 * are in the checkpoint. While someone is attached, it waits for the detach first.
 */
export async function inSandbox<T>(
  run: SessionRun,
  fn: (sb: Sandbox) => Promise<T>,
  { mayStayParked = false } = {},
): Promise<T> {
  await run.whenDetached(); // nothing starts in the sandbox while a person works in it
  run.sandboxBusy++;
  try {
    // `mayStayParked`: fn may do without the sandbox (a push from the host's mirror); if it cannot, it is brought back.
    if (run.status.parked && !mayStayParked) await bringBack(run, 're-provision: parked');
    for (;;) {
      const used = run.sandbox!;
      try {
        return await fn(used);
      } catch (err) {
        const loss = sandboxLoss(err, used);
        if (!loss) throw err;
        if (run.status.parked) await bringBack(run, `re-provision: parked, and ${loss.why}`);
        else await replaceSandbox(run, used, loss);
      }
    }
  } finally {
    run.sandboxBusy--;
  }
}

async function replaceSandbox(run: SessionRun, lost: Sandbox, loss: SandboxLoss): Promise<void> {
  const { sessionId, status } = run;
  const restarts = (status.restarts ?? 0) + 1;
  if (restarts > MAX_SANDBOX_REPLACEMENTS) {
    throw new SessionEnd(
      'failed',
      `${loss.why}, and the sandbox was already replaced ${MAX_SANDBOX_REPLACEMENTS} times`,
      'sandbox_lost',
    );
  }
  status.restarts = restarts;
  log.warn('replacing a lost sandbox', { why: loss.why, restarts });
  await reprovision(run, lost, `re-provision: ${loss.why}`, async () => {
    // A live host removes the dead container now; a lost host's, once it answers again (or teardown's).
    if (loss.hostLost) {
      run.deferRemoval(lost);
    } else {
      try {
        await teardownOn(lost).destroySandbox({ sessionId, generation: lost.generation, replaced: true });
        run.markRemoved(lost);
      } catch (err) {
        log.warn('the lost sandbox was not removed', { error: describeError(err) });
        run.deferRemoval(lost);
      }
    }
  });
}

/**
 * Parks the session: checkpoints its working tree and tears its sandbox and
 * services down (in a non-cancellable scope), keeping the checkpoint; the
 * next inSandbox (or bringBack) makes the next generation from it. A
 * teardown that fails on a live host leaves the session unparked, its sandbox in use.
 */
export async function parkSandbox(run: SessionRun, name: string): Promise<void> {
  const { sessionId } = run;
  const sandbox = run.sandbox!;
  await CancellationScope.nonCancellable(async () => {
    try {
      await run.track(name, () =>
        teardownOn(sandbox).destroySandbox({
          sessionId,
          generation: sandbox.generation,
          replaced: true,
          checkpointBase: sandbox.baseCommit,
        }),
      );
      run.markRemoved(sandbox);
    } catch (err) {
      // A host that does not answer: its reaper removes the sandbox; bringing it back provisions anew anyway.
      // Anything else (the checkpoint failed, say): the sandbox stays, and with it what the checkpoint lacks.
      log.warn('the sandbox was not torn down', { error: describeError(err) });
      if (!sandboxLoss(err, sandbox)?.hostLost) return;
      run.deferRemoval(sandbox);
    }
    run.status.parked = { since: new Date().toISOString(), sandbox: sandbox.name };
  });
}

/** A parked session's next sandbox, from the checkpoint; callers at once share one. */
export function bringBack(run: SessionRun, name: string): Promise<void> {
  run.bringingBack ??= reprovision(run, run.sandbox!, name).finally(() => {
    run.bringingBack = undefined;
  });
  return run.bringingBack;
}

/**
 * A new sandbox in place of `replaced` (lost, or torn down while the session
 * waited for a follow-up): the next generation, from the newest snapshot at
 * the session's base commit plus the session's last checkpoint.
 */
export async function reprovision(
  run: SessionRun,
  replaced: Sandbox,
  name: string,
  before: () => Promise<void> = async () => undefined,
): Promise<void> {
  const { input, sessionId } = run;
  const sandbox = await run.track(name, async (record) => {
    await before();
    const created = await whenAdmitted(run, () =>
      provisioning.provisionSandbox({
        sessionId,
        repo: { url: input.repo.url, ref: replaced.baseCommit },
        limits: sandboxLimitsOf(run.input.limits),
        expiresAt: new Date(Date.now() + sandboxLifetimeMs(run)).toISOString(),
        generation: (replaced.generation ?? 0) + 1,
      }),
    );
    const services = created.restored?.services?.map((s) => s.service);
    record.detail =
      `${created.name} on ${created.host}, ` +
      (created.restored ? `from the checkpoint after ${created.restored.step}` : 'no checkpoint yet') +
      (services?.length ? ` with the data of ${services.join(', ')}` : '');
    return created;
  });
  run.useSandbox(sandbox);
  run.status.parked = undefined;
  // The replacement's host answers: a replaced sandbox of the session there goes now.
  await removeReplaced(run, sandbox.hostQueue);
  if (sandbox.setup) await runSetup(run, sandbox.setup);
  if (sandbox.featureStarts) await startFeatures(run, sandbox.featureStarts);
  // A replacement during the agent's steps gets its app again (during verification it stays stopped).
  if (sandbox.app && run.status.phase === 'agent') await startAppIn(run, sandbox, sandbox.app);
}

/**
 * Setup in the session (cold path, or its inputs changed since the
 * snapshot): the repo's registries through the egress proxy for this step
 * only, unless the session forbids it.
 */
async function runSetup(run: SessionRun, setup: SetupPlan): Promise<void> {
  const { input, sessionId } = run;
  const name = `setup (${setup.reason})`;
  if (setup.egress.length > 0 && !input.limits.setupEgress) {
    await run.note(name, 'refused: limits.setupEgress is false', false);
    throw new SessionEnd(
      'failed',
      `setup must run (${setup.reason}) and reach ${setup.egress.map((r) => r.host).join(', ')} through the egress proxy, ` +
        'but this session forbids it (limits.setupEgress: false)',
      'setup_egress_forbidden',
    );
  }
  await run.track(name, async (record) => {
    const result = await inSandbox(run, (sb) =>
      onHost(sb, setup.timeoutMs + 60_000).runStep({
        sandbox: sb.name,
        sessionId,
        key: 'setup',
        nonce: stepNonce(),
        step: { run: setup.command, timeout: setup.timeoutMs },
        timeoutMs: setup.timeoutMs,
        egress: setup.egress,
        ...(setup.env ? { env: setup.env } : {}),
        recordsSetup: true,
      }),
    );
    recordStep(record, result);
    if (result.exitCode !== 0 || result.failure) {
      throw new SessionEnd('failed', `${name} ${exitText(result, input.limits, setup.timeoutMs)}`, 'setup_failed');
    }
  });
}

/** A sandbox lives through the session's work and its approval wait, plus an hour; then the reaper may take it. */
function sandboxLifetimeMs(run: SessionRun): number {
  return durationMs(run.input.limits.wallTime) + durationMs(run.input.approval.timeout) + 60 * 60_000;
}

/**
 * Removes the sandboxes this session replaced whose removal has not succeeded
 * yet, each on its own host's queue (those on `onQueue` only, when given: a
 * host that has just answered). A host that still does not answer within its
 * host timeout leaves its sandbox to its reaper.
 */
export async function removeReplaced(run: SessionRun, onQueue?: string): Promise<void> {
  const due = run.sandboxesToRemove.filter((s) => onQueue === undefined || s.hostQueue === onQueue);
  if (due.length === 0) return;
  await Promise.all(due.map((sandbox) => removeReplacedSandbox(run, sandbox)));
}

async function removeReplacedSandbox(run: SessionRun, sandbox: SandboxPlace): Promise<void> {
  const { sessionId } = run;
  try {
    await run.track(`remove ${sandbox.name}`, () =>
      teardownOn(sandbox).destroySandbox({
        sessionId,
        ...(sandbox.generation ? { generation: sandbox.generation } : {}),
        replaced: true,
      }),
    );
    run.markRemoved(sandbox);
  } catch (err) {
    log.warn('a replaced sandbox was not removed; its host reaper will', {
      sandbox: sandbox.name,
      error: describeError(err),
    });
  }
}
