/**
 * What the fault drills share (test/e2e/faults.test.ts on one engine and the dev
 * server, test/e2e/multi-host.test.ts on two engines and Temporal on PostgreSQL):
 * the drill session, approving it through, and reading its history.
 */
import type { WorkflowHandle, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { decide, status, type SessionStatus } from '../../workflows/api';
import { approveAs, git } from './helpers';
import { recordHistory, replayHistory } from './histories';

/** Each drill's time from the fault to its next completed step, printed when the file ends. */
export function recoveryTable(): Record<string, number> {
  const recoveries: Record<string, number> = {};
  afterAll(() => {
    const rows = Object.entries(recoveries).map(([k, ms]) => `  ${k}: ${(ms / 1000).toFixed(1)} s`);
    process.stderr.write(`fault → next completed step:\n${rows.join('\n')}\n`);
  });
  return recoveries;
}

/**
 * The session's first run, where its work happened: once published it waits
 * for follow-ups in a new run (continue-as-new), whose history starts there.
 */
export const firstRun = (handle: WorkflowHandle) =>
  handle.client.getHandle(handle.workflowId, (handle as WorkflowHandleWithFirstExecutionRunId).firstExecutionRunId);

/** Approves every pending action (push, pull request) until the session ends. */
export async function approveAll(handle: WorkflowHandle): Promise<SessionStatus> {
  const result = handle.result() as Promise<SessionStatus>;
  let done = false;
  void result.finally(() => (done = true)).catch(() => undefined);
  while (!done) {
    const s = await handle.query(status).catch(() => undefined);
    const pending = s?.pendingApproval;
    if (pending) {
      await handle.executeUpdate(decide, approveAs('ops', pending.action)).catch(() => undefined);
    }
    await new Promise((r) => setTimeout(r, 300));
  }
  return result;
}

/** From the fault to the end of the first timeline entry that ended after it. */
export function recoveryMs(final: SessionStatus, faultAt: number): number {
  const ends = final.timeline
    .map((t) => Date.parse(t.startedAt) + (t.durationMs ?? 0))
    .filter((end) => end > faultAt)
    .sort((a, b) => a - b);
  return ends[0] - faultAt;
}

/** Replays the session's history on the current code; keeps it as a fixture when asked. */
export async function replays(handle: WorkflowHandle, name: string): Promise<void> {
  await replayHistory(await firstRun(handle).fetchHistory());
  await recordHistory(handle, `fault-${name}`);
}

/** The attempts of an activity type that started, in order, and how many of them completed. */
export async function attempts(handle: WorkflowHandle, type: string): Promise<number[]> {
  return (await activityRuns(handle, type)).started;
}

export async function activityRuns(
  handle: WorkflowHandle,
  type: string,
): Promise<{ started: number[]; completed: number }> {
  const events = (await firstRun(handle).fetchHistory()).events!;
  const scheduled = new Map<string, string>();
  const runs = { started: [] as number[], completed: 0 };
  for (const e of events) {
    const s = e.activityTaskScheduledEventAttributes;
    if (s) scheduled.set(String(e.eventId), s.activityType!.name!);
    const started = e.activityTaskStartedEventAttributes;
    if (started && scheduled.get(String(started.scheduledEventId)) === type) runs.started.push(started.attempt!);
    const completed = e.activityTaskCompletedEventAttributes;
    if (completed && scheduled.get(String(completed.scheduledEventId)) === type) runs.completed++;
  }
  return runs;
}

export function pushesOf(bare: string, branch: string): number {
  return git(['reflog', 'show', '--format=%H', `refs/heads/${branch}`], bare)
    .trim()
    .split('\n').length;
}

export const session = (repoUrl: string, extra: Record<string, unknown> = {}) => ({
  repo: { url: repoUrl },
  task: 'survive the drill',
  agent: {
    steps: [
      { run: 'echo one >> ONE.md; echo hello >> README.md' },
      { run: 'echo ran >> RUNS.txt; sleep 6; echo two >> TWO.md' },
    ],
  },
  verify: { test: 'sh check.sh' },
  publish: { pullRequest: { repo: 'acme/app' }, openFor: '1s' }, // not open for follow-ups a week
  // The drills kill the worker at each gate: the push's and the pull request's.
  approval: { separateGates: true },
  ...extra,
});

export const stepRunning = (n: number) => (s: SessionStatus) =>
  s.timeline.some((t) => t.name.startsWith(`step ${n}`) && t.durationMs === undefined);
