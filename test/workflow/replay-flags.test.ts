/**
 * A nondeterminism the SDK's scope timeout made (session 27, seen once in a loaded CI run):
 * the work scope ends with a local activity (an audit record); when that took past 80 % of the
 * workflow task's timeout, the worker completed a task that only heartbeat, its marker in it,
 * and the code after the activity (the scope's timer cancelled, the phase upserted) ran in the
 * next task, which recorded the SDK flag the timer's cancel asked for. A replay resolves the
 * activity from the marker a task earlier, before it learns that flag, and the SDK's
 * `CancellationScope({ timeout })` then kept its timer: `UpsertWorkflowSearchAttributesMachine
 * does not handle HistoryEvent(id: …, TimerCanceled)`. The history of such a run is the recorded
 * cancellation's with its marker's task split so: it must replay.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Worker } from '@temporalio/worker';
import { HISTORIES_DIR } from '../support/histories';
import { quietSdkLogs } from '../support/helpers';
import { workflowBundle } from '../../workers/workflow-bundle';

type HistoryEvent = { eventId: string; eventType: string; [attributes: string]: unknown };
type Completed = { workflowTaskCompletedEventAttributes: { sdkMetadata?: { langUsedFlags?: number[] } } };

/** The history with the task that wrote the marker before a TimerCanceled split after the marker. */
function heartbeatSplit(events: HistoryEvent[]): HistoryEvent[] {
  const marker = events.findIndex(
    (e, i) => e.eventType === 'EVENT_TYPE_MARKER_RECORDED' && events[i + 1]?.eventType === 'EVENT_TYPE_TIMER_CANCELED',
  );
  const [scheduled, started, completed] = events.slice(marker - 3, marker);
  const flags = (completed as unknown as Completed).workflowTaskCompletedEventAttributes.sdkMetadata?.langUsedFlags;
  // The recorded history is the shape this test needs: re-recorded, it must still be.
  expect([scheduled.eventType, started.eventType, completed.eventType]).toEqual([
    'EVENT_TYPE_WORKFLOW_TASK_SCHEDULED',
    'EVENT_TYPE_WORKFLOW_TASK_STARTED',
    'EVENT_TYPE_WORKFLOW_TASK_COMPLETED',
  ]);
  expect(flags).toContain(1); // NonCancellableScopesAreShieldedFromPropagation, first used here
  const heartbeat = structuredClone(completed) as unknown as Completed;
  heartbeat.workflowTaskCompletedEventAttributes.sdkMetadata = {};
  // The new task after the marker: its events refer to each other, and the commands after it to it.
  const task = { S: `${scheduled.eventId}+`, T: `${started.eventId}+`, C: `${completed.eventId}+` };
  const now = { [scheduled.eventId]: task.S, [started.eventId]: task.T, [completed.eventId]: task.C };
  const after = renamed(events.slice(marker + 1), now);
  const newTask = renamed([scheduled, started, completed], now).map((e, i) => ({
    ...e,
    eventId: Object.values(task)[i],
  }));
  return renumbered([
    ...events.slice(0, marker - 1),
    heartbeat as unknown as HistoryEvent,
    events[marker],
    ...newTask,
    ...after,
  ]);
}

/** Copies of `events` whose references to an event id (`…EventId`) in `ids` name its new id. */
function renamed(events: HistoryEvent[], ids: Record<string, string>): HistoryEvent[] {
  const rename = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(rename);
    if (!value || typeof value !== 'object') return value;
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [
        k,
        k.endsWith('EventId') && typeof v === 'string' ? (ids[v] ?? v) : rename(v),
      ]),
    );
  };
  return events.map((e) => ({ ...(rename(e) as HistoryEvent), eventId: e.eventId }));
}

/** Event ids 1, 2, … in order, and every reference to an event id moved with it. */
function renumbered(events: HistoryEvent[]): HistoryEvent[] {
  const ids = Object.fromEntries(events.map((e, i) => [e.eventId, String(i + 1)]));
  return renamed(events, ids).map((e) => ({ ...e, eventId: ids[e.eventId] }));
}

beforeAll(() => quietSdkLogs());

test('a local activity whose marker a heartbeating task carried, the SDK flag recorded a task later: the history replays', async () => {
  const history = JSON.parse(readFileSync(path.join(HISTORIES_DIR, 'agentSession-wf-cancel.json'), 'utf8'));
  const split = { ...history, events: heartbeatSplit(history.events) };
  await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, split);
});
