/**
 * How a session ends: the outcome an error stands for, in words and as a
 * metrics key, and the teardown that runs on every exit path.
 */
import { ActivityFailure, ApplicationFailure, CancellationScope, isCancellation, log } from '@temporalio/workflow';
import type { SandboxPlace, StepResult } from '../../sandbox/contract';
import type { Outcome } from '../api';
import type { SessionInput } from '../input';
import { sessionMetricsOf } from '../rules/metrics';
import { endAttach } from './attach';
import { setAsideMessage } from './parent';
import { anyHost, teardownOn } from './proxies';
import type { SessionRun } from './state';
import { finishThreadReports } from './threads';
import { tellGitHub } from './trigger';

/** A session that ends with this outcome (and reason) rather than going on. */
export class SessionEnd extends Error {
  constructor(
    readonly outcome: Exclude<Outcome, 'completed'>,
    message: string,
    /** A short key for the metrics' failures by cause. */
    readonly cause: string,
  ) {
    super(message);
  }
}

/** Records why the session ended early and returns its outcome. */
export function endEarly(run: SessionRun, err: unknown): Exclude<Outcome, 'completed'> {
  const { status } = run;
  let outcome = classify(err);
  status.error = describeError(err);
  status.failureCause = causeOf(err);
  if (status.setAside) {
    // Its work was cancelled, or it waited at the gate: another attempt was picked.
    status.error = setAsideMessage(status.setAside);
    status.failureCause = 'not_picked';
    return 'cancelled';
  }
  if (outcome === 'cancelled' && !CancellationScope.current().consideredCancelled) {
    // Only our own wall-time scope was cancelled, not the session.
    outcome = 'timed_out';
    status.error = `wall-time limit of ${run.input.limits.wallTime} reached`;
    status.failureCause = 'wall_time';
  }
  log.warn('session ending early', { outcome, error: status.error });
  return outcome;
}

/**
 * Removes the session's sandbox (by name when provisioning failed after
 * creating it) and every replaced one not removed yet, then records the
 * outcome and the session's metrics, keeping the audit chain's seal in the
 * status (the workflow's result). Runs in a non-cancellable scope, so a
 * cancelled session still tears down.
 */
export async function tearDown(run: SessionRun, outcome: Outcome): Promise<void> {
  await CancellationScope.nonCancellable(async () => {
    const { sandbox, sessionId, status } = run;
    status.pendingApproval = undefined;
    run.setPhase('tearing_down');
    await endAttach(run);
    try {
      await run.track('teardown', () =>
        teardownOn(sandbox).destroySandbox(
          sandbox?.generation ? { sessionId, generation: sandbox.generation } : { sessionId },
        ),
      );
      // A parked session removed its sandbox already; this drops its checkpoint.
      if (sandbox && !status.removedSandboxes?.includes(sandbox.name)) run.markRemoved(sandbox);
      status.parked = undefined; // the session is over: nothing comes back
    } catch (err) {
      // The reaper removes what is left; the session still ends with its outcome.
      log.error('teardown failed', { error: describeError(err) });
    }
    await removeReplaced(run);
    run.setPhase(outcome);
    await tellGitHub(run, outcome);
    await finishThreadReports(run);
    try {
      status.audit = await anyHost.recordSessionMetrics(sessionMetricsOf(status, new Date().toISOString()));
    } catch (err) {
      log.error('metrics not recorded', { error: describeError(err) });
    }
  });
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

/** How a step ended, in words; a sandbox limit that stopped it is named with its value. */
export function exitText(result: StepResult, limits: SessionInput['limits'], timeoutMs: number): string {
  switch (result.failure) {
    case 'oom':
      return `ran out of memory (limit ${limits.memory})`;
    case 'pids':
      return `hit the process limit (pids limit ${limits.pids})`;
    case 'disk_full':
      // The output says which write failed, not where: both limits, as either may be the one.
      return `filled the disk (No space left on device; /workspace and home are limited to ${limits.disk}, /tmp to ${limits.tmp})`;
    case 'timeout':
      return `timed out (limit ${Math.round(timeoutMs / 1000)}s)`;
  }
  return result.timedOut ? 'timed out' : `exited with ${result.exitCode}`;
}

function classify(err: unknown): Exclude<Outcome, 'completed'> {
  if (err instanceof SessionEnd) return err.outcome;
  if (isCancellation(err)) return 'cancelled';
  return 'failed';
}

function causeOf(err: unknown): string {
  if (err instanceof SessionEnd) return err.cause;
  if (isCancellation(err)) return 'cancelled';
  if (err instanceof ActivityFailure) {
    const type = (err.cause as ApplicationFailure | undefined)?.type;
    return type ?? err.activityType;
  }
  return 'error';
}

export function describeError(err: unknown): string {
  if (err instanceof SessionEnd) return err.message;
  if (isCancellation(err)) return 'cancelled';
  if (err instanceof ActivityFailure && err.cause) return `${err.activityType}: ${err.cause.message}`;
  return err instanceof Error ? err.message : String(err);
}
