/**
 * Waits on the Temporal server that say what they waited for. A call on a
 * workflow (an update, a signal, a query, its result) or a poll of its status
 * that gets no answer within its limit fails with the workflow as the server
 * sees it: its run and status, the server's clock, the pending workflow task
 * and activities, and its last events. The next hang is diagnosed from the
 * log, not from jest's bare "Exceeded timeout".
 */
import type { WorkflowHandle } from '@temporalio/client';
import { temporal } from '@temporalio/proto';

/** How long one call on the server may take before the wait gives up (well under jest's 180 s per test). */
export const WAIT_MS = 60_000;

/**
 * For waits that follow one another in a test: the time left of jest's 180 s
 * (jest.config.js) less a margin for the explanation, so that the wait that
 * runs out explains itself before jest ends the test with its bare time-out.
 */
export function testTimeLeft(): () => number {
  const end = Date.now() + 180_000 - 15_000;
  return () => Math.max(1_000, end - Date.now());
}

/** The server's clock, when it is not the wall clock (the time-skipping test server's). */
export type ServerTime = () => Promise<number>;

class NoAnswer extends Error {}

/**
 * `work`, or after `ms` an error that names `what` (a text, or a function
 * called then: the last status seen) and explains the workflow's state.
 */
export async function within<T>(
  handle: WorkflowHandle,
  what: string | (() => string),
  work: Promise<T>,
  opts: { ms?: number; serverTime?: ServerTime } = {},
): Promise<T> {
  const ms = opts.ms ?? WAIT_MS;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new NoAnswer()), ms)));
  try {
    return await Promise.race([work, late]);
  } catch (err) {
    if (!(err instanceof NoAnswer)) throw err;
    const waited = typeof what === 'function' ? what() : what;
    throw new Error(
      `no answer from the server within ${ms / 1000}s: ${waited}\n${await explain(handle, opts.serverTime)}`,
    );
  } finally {
    clearTimeout(timer);
  }
}

/** The handle's calls that wait on the server, each bounded by `within`. */
const WAITING = new Set(['signal', 'query', 'executeUpdate', 'startUpdate', 'result', 'cancel', 'describe']);

/** `handle` whose calls on the server fail with an explanation instead of waiting for ever. */
export function watched<H extends WorkflowHandle>(handle: H, serverTime?: ServerTime): H {
  return new Proxy(handle, {
    get(target, prop, receiver) {
      const value: unknown = Reflect.get(target, prop, receiver);
      if (typeof prop !== 'string' || !WAITING.has(prop) || typeof value !== 'function') return value;
      const call = value as (...a: unknown[]) => Promise<unknown>;
      return (...args: unknown[]) =>
        within(target, `${prop} ${callLabel(args)}`, call.apply(target, args), { serverTime });
    },
  });
}

/** A call's arguments in short: a definition by its name, then the JSON of the rest. */
function callLabel(args: unknown[]): string {
  const [first, ...rest] = args;
  const name = typeof first === 'object' && first && 'name' in first ? String(first.name) : JSON.stringify(first);
  const more = rest.length ? ` ${JSON.stringify(rest)}` : '';
  return `${name ?? ''}${more}`.slice(0, 300);
}

/** Resolves with `undefined` when the server does not answer within 5 s either. */
const briefly = <T>(p: Promise<T>): Promise<T | undefined> =>
  Promise.race([p.catch(() => undefined), new Promise<undefined>((r) => setTimeout(() => r(undefined), 5_000))]);

const enumName = (names: Record<number, string>, value: unknown, prefix: string) =>
  (names[Number(value)] ?? String(value)).replace(prefix, '');

/** The workflow as the server sees it, in a few lines. */
export async function explain(handle: WorkflowHandle, serverTime?: ServerTime): Promise<string> {
  const [description, history, now] = await Promise.all([
    briefly(handle.describe()),
    briefly(handle.fetchHistory()),
    briefly(serverTime ? serverTime() : Promise.resolve(Date.now())),
  ]);
  const lines = [`  workflow ${handle.workflowId}`];
  if (!description) lines.push('  (describe: no answer)');
  else {
    const { runId, status, startTime, raw } = description;
    lines.push(`  run ${runId}: ${status.name}, started ${startTime.toISOString()}`);
    const task = raw.pendingWorkflowTask;
    if (task)
      lines.push(
        `  pending workflow task: ${enumName(PENDING_TASK, task.state, 'PENDING_WORKFLOW_TASK_STATE_')}, attempt ${task.attempt}`,
      );
    for (const a of raw.pendingActivities ?? []) {
      const failure = a.lastFailure?.message ? `, last failure: ${a.lastFailure.message}` : '';
      lines.push(
        `  pending activity ${a.activityType?.name}: ${enumName(PENDING_ACTIVITY, a.state, 'PENDING_ACTIVITY_STATE_')}, attempt ${a.attempt}${failure}`,
      );
    }
  }
  lines.push(`  server time: ${now === undefined ? '(no answer)' : new Date(now).toISOString()}`);
  const events = history?.events ?? [];
  lines.push(`  last events: ${events.slice(-12).map(eventLabel).join(', ') || '(none read)'}`);
  return lines.join('\n');
}

const PENDING_TASK = temporal.api.enums.v1.PendingWorkflowTaskState;
const PENDING_ACTIVITY = temporal.api.enums.v1.PendingActivityState;
const EVENT_TYPE = temporal.api.enums.v1.EventType;

/** `<id> <EventType> (<what it is about>)`: an activity, a signal, an update, a failure, a timer, a marker, an SDK's flags. */
export function eventLabel(e: temporal.api.history.v1.IHistoryEvent): string {
  const type = enumName(EVENT_TYPE, e.eventType, 'EVENT_TYPE_');
  const about =
    e.activityTaskScheduledEventAttributes?.activityType?.name ??
    e.workflowExecutionSignaledEventAttributes?.signalName ??
    e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name ??
    e.activityTaskFailedEventAttributes?.failure?.message ??
    e.workflowTaskFailedEventAttributes?.failure?.message ??
    (e.timerStartedEventAttributes?.startToFireTimeout?.seconds !== undefined
      ? `${String(e.timerStartedEventAttributes.startToFireTimeout.seconds)}s`
      : undefined) ??
    (e.timerCanceledEventAttributes ?? e.timerFiredEventAttributes)?.timerId ??
    e.markerRecordedEventAttributes?.markerName ??
    e.workflowTaskCompletedEventAttributes?.sdkMetadata?.langUsedFlags?.join(',');
  return `${String(e.eventId)} ${type}${about ? ` (${about})` : ''}`;
}
