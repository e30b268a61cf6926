/**
 * The session workflow's error vocabulary: SessionEnd (an end with an
 * outcome and a reason), and what any error stands for: its outcome, its
 * cause as a metrics key, its words; how a step ended, in words. Every phase
 * module throws and reads errors through this module, which imports none of them.
 */
import { ActivityFailure, ApplicationFailure, isCancellation } from '@temporalio/workflow';
import type { StepResult } from '../../sandbox/contract';
import type { Outcome } from '../api';
import type { SessionInput } from '../input';

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

/** The outcome an error ends the session with. */
export function outcomeOf(err: unknown): Exclude<Outcome, 'completed'> {
  if (err instanceof SessionEnd) return err.outcome;
  if (isCancellation(err)) return 'cancelled';
  return 'failed';
}

/** A short key of an error's cause, for the metrics' failures by cause. */
export function causeOf(err: unknown): string {
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
