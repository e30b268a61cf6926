import { Context } from '@temporalio/activity';

/** How often long activities heartbeat; the presets' heartbeatTimeout is a few of these. */
export const HEARTBEAT_INTERVAL_MS = 2_000;

/**
 * Runs `fn` while heartbeating, so a dead worker is noticed within the
 * heartbeat timeout and a cancelled session reaches the activity (`signal`).
 */
export async function withHeartbeat<T>(fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const ctx = Context.current();
  const timer = setInterval(() => ctx.heartbeat(), HEARTBEAT_INTERVAL_MS);
  try {
    return await fn(ctx.cancellationSignal);
  } finally {
    clearInterval(timer);
  }
}
