/**
 * Admission: a session whose sandbox no host has a slot for waits in the
 * `queued` phase and asks again, later each time. Hosts refuse with HostFull
 * (sandbox/activities/provision.ts); nothing running is ever evicted.
 */
import { ActivityFailure, ApplicationFailure, sleep } from '@temporalio/workflow';
import { ErrorType } from '../api';
import type { SessionRun } from './state';

/** Waits between asks while queued: quick at first (a teardown frees a slot often), then every 30 s. */
const RECHECK_MS = [2_000, 5_000, 10_000, 20_000, 30_000];

/** The host's refusal in words when `err` is HostFull, else undefined. */
function hostFull(err: unknown): string | undefined {
  if (!(err instanceof ActivityFailure)) return undefined;
  const cause = err.cause;
  return cause instanceof ApplicationFailure && cause.type === ErrorType.HostFull ? cause.message : undefined;
}

/**
 * What `create` makes once a host takes it. While hosts refuse for want of a
 * slot, status.queued says what the session waits for and since when, and
 * the phase is `queued` (search attribute DrydockPhase too); then the phase
 * it had comes back. Bounded only by the session's own time limits.
 */
export async function whenAdmitted<T>(run: SessionRun, create: () => Promise<T>): Promise<T> {
  const phase = run.status.phase;
  for (let tries = 1; ; tries++) {
    try {
      const created = await create();
      if (run.status.queued) {
        delete run.status.queued;
        run.setPhase(phase);
      }
      return created;
    } catch (err) {
      const reason = hostFull(err);
      if (reason === undefined) throw err;
      run.status.queued = { reason, since: run.status.queued?.since ?? new Date().toISOString(), tries };
      if (tries === 1) run.setPhase('queued');
      await sleep(RECHECK_MS[Math.min(tries, RECHECK_MS.length) - 1]);
    }
  }
}
