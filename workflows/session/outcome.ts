/**
 * How a session ends: the outcome recorded for an early end (errors.ts says
 * what an error stands for), and the teardown that runs on every exit path.
 */
import { CancellationScope, log } from '@temporalio/workflow';
import type { Outcome } from '../api';
import { sessionMetricsOf } from '../rules/metrics';
import { endAttach } from './attach';
import { causeOf, describeError, outcomeOf } from './errors';
import { setAsideMessage } from './parent';
import { records, teardownOn } from './proxies';
import { removeReplaced } from './sandbox';
import type { SessionRun } from './state';
import { finishThreadReports } from './threads';
import { tellForge } from './trigger';

/** Records why the session ended early and returns its outcome. */
export function endEarly(run: SessionRun, err: unknown): Exclude<Outcome, 'completed'> {
  const { status } = run;
  let outcome = outcomeOf(err);
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
    await tellForge(run, outcome);
    await finishThreadReports(run);
    try {
      status.audit = await records.recordSessionMetrics(sessionMetricsOf(status, new Date().toISOString()));
    } catch (err) {
      log.error('metrics not recorded', { error: describeError(err) });
    }
  });
}
