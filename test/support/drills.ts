/**
 * What the fault drills share (test/e2e/faults.test.ts on one engine and the dev
 * server, test/e2e/multi-host.test.ts on two engines and Temporal on PostgreSQL):
 * the drill session, approving it through, and reading its history. A drill
 * places its fault where it means to, never by timing: inside a step that
 * waits at a gate the test opens (gate), or after an activity the worker holds
 * (test/support/fault-worker.ts).
 */
import type { WorkflowHandle, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import type Docker from 'dockerode';
import { DockerProvider } from '../../sandbox/docker/provider';
import { sandboxOf } from '../../sandbox/handle';
import { decide, status, type SessionStatus } from '../../workflows/api';
import { containersOn } from './docker-hosts';
import { approveAs, docker, git } from './helpers';
import { recordHistory, replayHistory } from './histories';
import type { HeldCall } from './workers';

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

/**
 * A command that marks that it runs (/tmp/<name>.running in its sandbox), waits until the test
 * opens its gate (/tmp/<name>.go), then runs `then`: a fault the test places while it waits
 * lands inside it, however fast or slow the machine.
 */
export const heldCommand = (name: string, then: string) =>
  `touch /tmp/${name}.running; until [ -e /tmp/${name}.go ]; do sleep 0.2; done; ${then}`;

/** The drill session's step 2 waits at this gate (see gate). */
export const STEP_2 = 'step-2';

export const session = (repoUrl: string, extra: Record<string, unknown> = {}) => ({
  repo: { url: repoUrl },
  task: 'survive the drill',
  agent: {
    steps: [
      { run: 'echo one >> ONE.md; echo hello >> README.md' },
      { run: `echo ran >> RUNS.txt; ${heldCommand(STEP_2, 'echo two >> TWO.md')}` },
    ],
  },
  verify: { test: 'sh check.sh' },
  publish: { pullRequest: { repo: 'acme/app' }, openFor: '1s' }, // not open for follow-ups a week
  // The drills kill the worker at each gate: the push's and the pull request's.
  approval: { separateGates: true },
  ...extra,
});

export interface Gate {
  /** Resolves once the held command waits in a sandbox of the session, with that sandbox's name. */
  reached: Promise<string>;
  /** Lets the held command go on: in the sandbox where it waits, and in any later one (a replacement runs it again). */
  open(): void;
}

const gates = new Set<() => void>();

/**
 * Watches the session's sandboxes on `engines` for the held command `name`
 * (heldCommand) until stopGates(), which a drill file calls after each test.
 */
export function gate(sessionId: string, name: string, engines: Docker[] = [docker]): Gate {
  let opened = false;
  let stopped = false;
  const open = new Set<string>();
  let reach!: (sandbox: string) => void;
  const reached = new Promise<string>((resolve) => (reach = resolve));
  gates.add(() => (stopped = true));
  void (async () => {
    while (!stopped) {
      for (const engine of engines) {
        const provider = new DockerProvider(engine);
        const running = (await containersOn(engine, sessionId).catch(() => [])).filter((c) => c.State === 'running');
        for (const c of running.filter((c) => !open.has(c.Id))) {
          const sandbox = sandboxOf(provider, c.Id);
          if (!(await sandbox.files.exists(`/tmp/${name}.running`).catch(() => false))) continue;
          if (opened) {
            await sandbox.commands.run(['touch', `/tmp/${name}.go`]).then(
              () => open.add(c.Id),
              () => undefined,
            );
          }
          reach(c.Names[0].replace(/^\//, ''));
        }
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  return { reached, open: () => (opened = true) };
}

/** Stops watching for every gate of the test. */
export function stopGates(): void {
  for (const stop of gates) stop();
  gates.clear();
}

/** The attempt at which the held call's activity last started in its run: more than the held one when it ran again. */
export async function lastAttemptOf(handle: WorkflowHandle, call: HeldCall): Promise<number | undefined> {
  const events = (await handle.client.getHandle(handle.workflowId, call.runId).fetchHistory()).events!;
  const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityId === call.activityId);
  if (!scheduled) return undefined;
  const started = events.find(
    (e) => String(e.activityTaskStartedEventAttributes?.scheduledEventId) === String(scheduled.eventId),
  );
  return started?.activityTaskStartedEventAttributes?.attempt ?? undefined;
}
