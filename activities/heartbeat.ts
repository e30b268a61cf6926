import { Context } from '@temporalio/activity';

/** How often activities heartbeat; the workflow's heartbeatTimeout is a few of these. */
export const HEARTBEAT_INTERVAL_MS = 2_000;

/** The latest progress of each running activity, repeated by its regular heartbeats. */
const progress = new WeakMap<Context, unknown>();

/** Heartbeats now with these details (e.g. an output tail, visible in `temporal workflow describe`). */
export function reportProgress(details: unknown): void {
  const ctx = Context.current();
  progress.set(ctx, details);
  ctx.heartbeat(details);
}

/**
 * Makes every activity heartbeat while it runs, so a dead worker is noticed
 * within the heartbeat timeout in any phase (not only after startToClose), and
 * a cancelled session reaches the activity (`Context.current().cancellationSignal`).
 */
export function heartbeating<T extends Record<string, (...args: any[]) => Promise<unknown>>>(activities: T): T {
  return Object.fromEntries(
    Object.entries(activities).map(([name, fn]) => [
      name,
      async (...args: unknown[]) => {
        const ctx = Context.current();
        const timer = setInterval(() => ctx.heartbeat(progress.get(ctx)), HEARTBEAT_INTERVAL_MS);
        try {
          return await fn(...args);
        } finally {
          clearInterval(timer);
        }
      },
    ]),
  ) as T;
}
