/**
 * pilot: a frozen task set run against agent configurations, N attempts
 * each, as one durable workflow (docs/pilot.md). Each session is an
 * agentSession child with a fixed id (`<pilot>.<task>.<configuration>.<n>`)
 * that outlives the pilot's run (parent close: abandon) and reports its
 * progress here. At most `concurrency` sessions work at once; one waiting for
 * review frees its slot. Stopped, the pilot starts nothing more; started
 * again with the same name it resumes: a session that exists is never
 * started twice. Faults on purpose are done at their moment.
 */
import {
  allHandlersFinished,
  ApplicationFailure,
  condition,
  continueAsNew,
  log,
  ParentClosePolicy,
  setHandler,
  startChild,
  workflowInfo,
  WorkflowIdReusePolicy,
} from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import type { KnownSession } from '../../activities/pilot';
import {
  ErrorType,
  pilotStatus,
  sessionProgress,
  stopPilot,
  WORKFLOW_TYPE,
  type PilotSessionView,
  type PilotStatus,
} from '../api';
import { dueFaults, missedFaults, nextToStart } from '../rules/pilot';
import { applyFault, recordMissed } from './faults';
import { pilotSchemas } from '../schemas';
import { pilotActivities } from './proxies';
import { PilotRun, type PilotCarry } from './state';

type SessionWorkflow = (input: unknown) => Promise<{ phase: PilotStatus['sessions'][number]['phase'] }>;

export async function pilot(rawInput: unknown, carry?: PilotCarry): Promise<PilotStatus> {
  const parsed = pilotSchemas().parsePilotInput(rawInput);
  if (!parsed.ok) {
    const message = `invalid pilot: ${parsed.problems.join('; ')}`;
    throw ApplicationFailure.nonRetryable(message, ErrorType.InvalidPilotInput, { problems: parsed.problems });
  }
  const run = new PilotRun(parsed.input, carry, new Date(workflowInfo().startTime).toISOString());
  let stopBy: string | undefined;
  installHandlers(run, (by) => (stopBy = by));
  const { pilotConcurrency } = await pilotActivities.operatorLimits();
  run.status.concurrency = Math.min(parsed.input.concurrency, pilotConcurrency);
  if (!carry) await findEarlier(run);
  for (;;) {
    await condition(() => stopBy !== undefined || hasWork(run));
    if (stopBy !== undefined) {
      run.status.phase = 'stopped';
      break;
    }
    await doFaults(run);
    await startNext(run);
    if (run.status.counts.ended === run.status.sessions.length) {
      run.status.phase = 'completed';
      break;
    }
    if (workflowInfo().continueAsNewSuggested) {
      await condition(allHandlersFinished);
      await continueAsNew<typeof pilot>(rawInput, run.carry());
    }
  }
  await condition(allHandlersFinished);
  return run.status;
}

function installHandlers(run: PilotRun, onStop: (by: string) => void): void {
  setHandler(pilotStatus, () => run.status);
  setHandler(sessionProgress, (progress) => run.report(progress));
  setHandler(
    stopPilot,
    ({ by }) => {
      run.status.stoppedBy = by;
      onStop(by);
      return run.status;
    },
    {
      validator: (input) => {
        if (typeof input?.by !== 'string' || !input.by.trim()) throw new Error("'by' must name who stops the pilot");
        if (run.status.stoppedBy) throw new Error(`the pilot was stopped by ${run.status.stoppedBy}`);
      },
    },
  );
}

function hasWork(run: PilotRun): boolean {
  const { sessions, counts, concurrency } = run.status;
  if (counts.ended === sessions.length) return true;
  if (nextToStart(sessions, concurrency).length > 0) return true;
  return sessions.some(
    (v) => !v.disowned && (dueFaults(v, run.progress.get(v.sessionId)).length > 0 || missedFaults(v).length > 0),
  );
}

/** A resumed pilot: what an earlier run started is found in Temporal, and only the rest is started. */
async function findEarlier(run: PilotRun): Promise<void> {
  const ids = run.status.sessions.map((s) => s.sessionId);
  let ended = 0;
  let underWay = 0;
  for (let i = 0; i < ids.length; i += 100) {
    for (const known of await pilotActivities.knownSessions({ sessionIds: ids.slice(i, i + 100) })) {
      if (known.state === 'missing') continue;
      const view = run.view(known.sessionId)!;
      if (disowned(run, view, known)) continue;
      if (known.state === 'closed') run.closed(view, known.phase ?? 'failed');
      else run.moveTo(view, known.phase);
      if (view.state === 'ended') ended++;
      else underWay++;
    }
  }
  if (ended + underWay > 0) run.status.resumed = { ended, underWay };
}

/**
 * Starts the sessions the concurrency leaves room for, each once: its record
 * first, then its workflow. A stop ends it between two starts, so the sessions
 * the stop answered with are all the pilot started.
 */
async function startNext(run: PilotRun): Promise<void> {
  for (const view of nextToStart(run.status.sessions, run.status.concurrency)) {
    if (run.status.stoppedBy) return;
    const planned = run.planned.get(view.sessionId)!;
    await pilotActivities.recordPilotSession({
      pilot: run.input.name,
      sessionId: view.sessionId,
      task: planned.task.id,
      tags: planned.task.tags,
      configuration: planned.configuration,
      attempt: planned.attempt,
      faults: planned.faults,
    });
    if (run.status.stoppedBy) return; // stopped while it was recorded: a resumed pilot starts it
    run.moveTo(view, undefined);
    try {
      const child = await startChild<SessionWorkflow>(WORKFLOW_TYPE, {
        workflowId: view.sessionId,
        args: [run.inputOf(view.sessionId)],
        parentClosePolicy: ParentClosePolicy.ABANDON,
        workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
      });
      void child.result().then(
        (final) => run.closed(view, final.phase ?? 'completed'),
        () => run.closed(view, 'failed'),
      );
    } catch (err) {
      // Started before (by an earlier run, just before its stop): its reports tell how it goes.
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      const [known] = await pilotActivities.knownSessions({ sessionIds: [view.sessionId] });
      disowned(run, view, known);
    }
  }
}

/**
 * Whether the workflow found at a session's id is someone else's: only a child
 * of this pilot (of an earlier run of it: the same workflow id) is its session.
 * Anyone else's (an API caller's or a CLI user's, made first) is never adopted:
 * the pilot's session counts as failed, saying why.
 */
function disowned(run: PilotRun, view: PilotSessionView, known: KnownSession): boolean {
  if (known.state === 'missing' || known.parent === workflowInfo().workflowId) return false;
  view.disowned = `${known.sessionId} was started by ${known.parent ?? 'a client'}, not by this pilot: not adopted`;
  log.warn('a session at the pilot’s id is not its own', { sessionId: known.sessionId, parent: known.parent });
  view.state = 'planned'; // closed() moves it on, whatever the other workflow's phase
  view.phase = undefined;
  run.closed(view, 'failed');
  return true;
}

async function doFaults(run: PilotRun): Promise<void> {
  for (const view of run.status.sessions) {
    if (view.disowned) continue; // no fault is done to, or recorded on, someone else's session
    for (const kind of dueFaults(view, run.progress.get(view.sessionId))) {
      await applyFault(run, view, kind);
    }
    for (const kind of missedFaults(view)) await recordMissed(view, kind);
  }
}
