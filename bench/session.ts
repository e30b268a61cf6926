/**
 * The session the overhead and concurrency benchmarks run: a small repo, a
 * scripted agent of three steps, the repo's test, an approval that policy
 * waives, a push to the repo's bare remote and teardown. Also the profile of
 * a session from its workflow history: where the time between start and
 * result went (activities, their queue waits, workflow tasks).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { WORKFLOW_TYPE, type SessionStatus } from '../workflows/api';
import type { SessionInputDraft } from '../workflows/input';
import type { BenchStack } from './stack';
import { tempDir } from './stack';
import { markdownTable, fmt, median } from './table';

const run = promisify(execFile);

export const git = async (args: string[], cwd?: string): Promise<string> =>
  (await run('git', ['-c', 'user.name=bench', '-c', 'user.email=bench@localhost', ...args], { cwd })).stdout;

/** A bare repo ("the remote") with README.md and `check.sh`, the repo's test. Removed at exit. */
export async function makeRepo(): Promise<{ url: string; bare: string }> {
  const dir = await tempDir('repo');
  const bare = path.join(dir, 'remote.git');
  const work = path.join(dir, 'work');
  await git(['init', '--quiet', '--bare', '--initial-branch=main', bare]);
  await git(['init', '--quiet', '--initial-branch=main', work]);
  await writeFile(path.join(work, 'README.md'), '# bench\n');
  await writeFile(path.join(work, 'check.sh'), '#!/bin/sh\ngrep -q hello README.md && test -s greeting.txt\n');
  await git(['add', '.'], work);
  await git(['commit', '--quiet', '-m', 'initial'], work);
  await git(['push', '--quiet', bare, 'main'], work);
  return { url: `file://${bare}`, bare };
}

/**
 * The scripted agent's steps, shared with the plain script of bench/overhead.
 * The first prints the time it runs (ms since the epoch): the session is
 * ready then.
 */
export const AGENT_STEPS = [
  { run: 'date +%s%3N' },
  { write: { path: 'greeting.txt', content: 'hello from the bench\n' } },
  { run: 'echo hello >> README.md' },
] as const;
export const TEST_COMMAND = 'sh check.sh';

export function completeSessionInput(url: string): SessionInputDraft {
  return {
    repo: { url },
    task: 'bench: add a greeting',
    agent: { kind: 'script', steps: AGENT_STEPS.map((s) => ({ ...s })) },
    verify: { test: TEST_COMMAND },
    // No approval.required: with the server's DRYDOCK_APPROVAL_REQUIRED=none the push goes ahead.
  };
}

export interface SessionRun {
  id: string;
  /** Start request to workflow result, as the client sees it. */
  ms: number;
  /** Start request to the agent's first command running in the sandbox. */
  readyMs: number;
  status: SessionStatus;
}

/** Runs one complete session to its result; throws unless it completed and its branch reached the remote. */
export async function runSession(
  stack: Pick<BenchStack, 'client' | 'taskQueue'>,
  repo: { url: string; bare: string },
  id = `bench-${randomBytes(4).toString('hex')}`,
): Promise<SessionRun> {
  const started = Date.now();
  const handle = await stack.client.workflow.start(WORKFLOW_TYPE, {
    workflowId: id,
    taskQueue: stack.taskQueue,
    args: [completeSessionInput(repo.url)],
  });
  const status = (await handle.result()) as SessionStatus;
  const ms = Date.now() - started;
  if (status.phase !== 'completed') throw new Error(`session ${id} ended ${status.phase}: ${status.error}`);
  const first = Number(status.timeline.find((t) => t.name.startsWith('step 1'))?.outputTail?.trim());
  if (!first) throw new Error(`session ${id}: no time from its first step`);
  const pushed = (await git(['rev-parse', '--verify', '--quiet', `refs/heads/${status.branch}`], repo.bare)).trim();
  if (!status.pushed || pushed !== status.pushed.commit) {
    throw new Error(`session ${id}: ${status.branch} is not on the remote at ${status.pushed?.commit}`);
  }
  return { id, ms, readyMs: first - started, status };
}

// ---------------------------------------------------------------- profile

const { EventType } = temporal.api.enums.v1;

function ms(t: temporal.api.history.v1.IHistoryEvent['eventTime']): number {
  return Number(t?.seconds ?? 0) * 1000 + (t?.nanos ?? 0) / 1e6;
}

/** Where a workflow's time went, from its history (server timestamps). */
export interface HistoryProfile {
  /** WorkflowExecutionStarted to WorkflowExecutionCompleted. */
  totalMs: number;
  /** Activity attempt start to completion, summed per activity type. */
  activities: Record<string, { runMs: number; count: number }>;
  /** Scheduled to started, summed over activities: waiting in the task queue. */
  activityQueueMs: number;
  /** Workflow tasks: scheduled to completed, summed (queue wait and the worker's workflow code). */
  workflowTaskMs: number;
  /** Of workflowTaskMs, scheduled to started: waiting for the worker's poll. */
  workflowTaskQueueMs: number;
  workflowTasks: number;
  /** Local activities (the audit rows, the metrics row): run by the worker within its workflow tasks. */
  localActivities: number;
  /** Activity attempts beyond the first (a failure or timeout Temporal retried). */
  retries: number;
}

export async function historyProfile(client: Client, workflowId: string): Promise<HistoryProfile> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  const events = history.events ?? [];
  const byId = new Map(events.map((e) => [Number(e.eventId), e]));
  const profile: HistoryProfile = {
    totalMs: 0,
    activities: {},
    activityQueueMs: 0,
    workflowTaskMs: 0,
    workflowTaskQueueMs: 0,
    workflowTasks: 0,
    localActivities: 0,
    retries: 0,
  };
  let startedAt = 0;
  for (const e of events) {
    const at = ms(e.eventTime);
    switch (e.eventType) {
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        startedAt = at;
        break;
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
        profile.totalMs = at - startedAt;
        break;
      case EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED: {
        const scheduled = byId.get(Number(e.workflowTaskCompletedEventAttributes?.scheduledEventId));
        const started = byId.get(Number(e.workflowTaskCompletedEventAttributes?.startedEventId));
        profile.workflowTaskMs += at - ms(scheduled?.eventTime);
        profile.workflowTaskQueueMs += ms(started?.eventTime) - ms(scheduled?.eventTime);
        profile.workflowTasks++;
        break;
      }
      case EventType.EVENT_TYPE_MARKER_RECORDED:
        if (e.markerRecordedEventAttributes?.markerName === 'core_local_activity') profile.localActivities++;
        break;
      case EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
      case EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: {
        const attrs = e.activityTaskCompletedEventAttributes ?? e.activityTaskFailedEventAttributes;
        const scheduled = byId.get(Number(attrs?.scheduledEventId));
        const started = byId.get(Number(attrs?.startedEventId));
        const type = scheduled?.activityTaskScheduledEventAttributes?.activityType?.name ?? '?';
        profile.retries += Math.max(0, (started?.activityTaskStartedEventAttributes?.attempt ?? 1) - 1);
        const entry = (profile.activities[type] ??= { runMs: 0, count: 0 });
        entry.runMs += at - ms(started?.eventTime);
        entry.count++;
        profile.activityQueueMs += ms(started?.eventTime) - ms(scheduled?.eventTime);
        break;
      }
    }
  }
  return profile;
}

/**
 * The median profile of several runs as a table: each activity type's time,
 * the queue waits, the workflow tasks, and what is left (the gaps between
 * them: history writes, timers, polling).
 */
export function profileTable(profiles: HistoryProfile[]): string {
  const types = [...new Set(profiles.flatMap((p) => Object.keys(p.activities)))];
  const total = median(profiles.map((p) => p.totalMs));
  const rows: (string | number)[][] = [];
  let accounted = 0;
  const add = (name: string, values: number[], count = '') => {
    const m = median(values);
    accounted += m;
    rows.push([name, count, fmt(m), `${((100 * m) / total).toFixed(0)} %`]);
  };
  for (const type of types.sort(
    (a, b) =>
      median(profiles.map((p) => p.activities[b]?.runMs ?? 0)) -
      median(profiles.map((p) => p.activities[a]?.runMs ?? 0)),
  )) {
    add(
      `activity ${type}`,
      profiles.map((p) => p.activities[type]?.runMs ?? 0),
      String(median(profiles.map((p) => p.activities[type]?.count ?? 0))),
    );
  }
  add(
    'activity tasks waiting in their queue',
    profiles.map((p) => p.activityQueueMs),
  );
  add(
    'workflow tasks waiting for the worker',
    profiles.map((p) => p.workflowTaskQueueMs),
    String(median(profiles.map((p) => p.workflowTasks))),
  );
  add(
    'workflow tasks: the worker on them (started → completed), local activities included',
    profiles.map((p) => p.workflowTaskMs - p.workflowTaskQueueMs),
    `${median(profiles.map((p) => p.localActivities))} local`,
  );
  rows.push(['rest (between tasks: history writes, polls)', '', fmt(total - accounted), '']);
  rows.push(['**workflow started → completed**', '', `**${fmt(total)}**`, '100 %']);
  return markdownTable(['where (median of the runs)', 'count', 'time', 'share'], rows, [1, 2, 3]);
}
