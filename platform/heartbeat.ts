/**
 * Every activity heartbeats on a timer while it runs, repeating its latest
 * progress (an output tail), and what it hands to Temporal passes through the
 * worker's redactor first.
 */
import { Context } from '@temporalio/activity';
import type { Redactor } from './scrub';

/** How often activities heartbeat; the workflow's heartbeatTimeout is a few of these. */
export const HEARTBEAT_INTERVAL_MS = 2_000;

/** The latest progress of each running activity, repeated by its regular heartbeats. */
const progress = new WeakMap<Context, unknown>();
/** The worker's redactor, for the activity running in each context. */
const redactors = new WeakMap<Context, Redactor>();

/**
 * Heartbeats now with these details (e.g. an output tail, visible in `temporal
 * workflow describe` and `drydock snapshot build`), scrubbed, merged into the
 * activity's earlier details: a phase told beside a retry's record
 * (provisioningOn) keeps that record.
 */
export function heartbeatProgress(details: Record<string, unknown>): void {
  tell(Context.current(), details);
}

/**
 * heartbeatProgress for the activity running where this is called, usable
 * later from callbacks (a build's output); outside an activity (a bench, a
 * test) it tells nobody.
 */
export function progressReporter(): (details: Record<string, unknown>) => void {
  let ctx: Context;
  try {
    ctx = Context.current();
  } catch {
    return () => undefined;
  }
  return (details) => tell(ctx, details);
}

function tell(ctx: Context, details: Record<string, unknown>): void {
  const merged = { ...(progress.get(ctx) as Record<string, unknown> | undefined), ...details };
  const scrubbed = redactors.get(ctx)?.value(merged) ?? merged;
  progress.set(ctx, scrubbed);
  ctx.heartbeat(scrubbed);
}

/**
 * `err` with its message and stack (and those of its causes) scrubbed: an
 * activity's failure goes into the workflow's history and status, and its
 * message may quote what a sandbox printed.
 */
function scrubbedError(err: unknown, redactor: Redactor): unknown {
  for (let e = err, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    e.message = redactor.text(e.message);
    if (e.stack) e.stack = redactor.text(e.stack);
  }
  return err;
}

/**
 * Makes every activity heartbeat while it runs, so a dead worker is noticed
 * within the heartbeat timeout in any phase (not only after startToClose), and
 * a cancelled session reaches the activity (`Context.current().cancellationSignal`).
 * What an activity hands to Temporal (its heartbeats, result and error) passes
 * through the worker's redactor.
 */
export function heartbeating<T extends Record<string, (...args: any[]) => Promise<unknown>>>(
  activities: T,
  redactor: Redactor,
): T {
  return Object.fromEntries(
    Object.entries(activities).map(([name, fn]) => [
      name,
      async (...args: unknown[]) => {
        const ctx = Context.current();
        redactors.set(ctx, redactor);
        // A local activity (workflows/session/proxies.ts, records) has no heartbeats: the worker that
        // runs it holds the workflow's task meanwhile, and a dead one is noticed by that task's timeout.
        const timer = ctx.info.isLocal
          ? undefined
          : setInterval(() => ctx.heartbeat(progress.get(ctx)), HEARTBEAT_INTERVAL_MS);
        try {
          return redactor.value(await fn(...args));
        } catch (err) {
          throw scrubbedError(err, redactor);
        } finally {
          clearInterval(timer);
        }
      },
    ]),
  ) as T;
}
