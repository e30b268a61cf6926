/**
 * Faults on purpose (docs/pilot.md), done to a pilot's session at their
 * moment and recorded in its view and its audit trail: its sandbox killed on
 * its host, the worker's credentials rotated while it waits for review, and
 * the stale snapshot it was asked to start from.
 */
import { log } from '@temporalio/workflow';
import type { PilotSessionView } from '../api';
import type { FaultKind } from './input';
import { onSandboxHost, pilotActivities } from './proxies';
import type { PilotRun } from './state';

export async function applyFault(run: PilotRun, view: PilotSessionView, kind: FaultKind): Promise<void> {
  const progress = run.progress.get(view.sessionId);
  let applied = true;
  let detail: string;
  try {
    if (kind === 'sandbox_killed') {
      const { killed } = await onSandboxHost(progress!.hostQueue!).killSessionSandbox({ sessionId: view.sessionId });
      applied = killed.length > 0;
      detail = applied ? `killed ${killed.join(', ')} during ${progress!.phase}` : 'no sandbox on its host';
    } else if (kind === 'credentials_rotated') {
      const rotated = await pilotActivities.rotateCredentials({ sessionId: view.sessionId });
      applied = rotated.rotated;
      detail = `while it waited for review: ${rotated.detail}`;
    } else {
      detail = 'started from the oldest snapshot of its repo on the host';
    }
  } catch (err) {
    applied = false;
    detail = `not done: ${err instanceof Error ? err.message : String(err)}`;
  }
  log.info('fault on purpose', { session: view.sessionId, kind, applied, detail });
  view.applied.push(`${kind}: ${detail}`);
  await pilotActivities.recordFault({ sessionId: view.sessionId, kind, applied, detail });
}

/** A fault whose moment never came: the session ended before it. */
export async function recordMissed(view: PilotSessionView, kind: FaultKind): Promise<void> {
  const detail = `not done: the session ended (${view.phase ?? 'unknown'}) before its moment`;
  view.applied.push(`${kind}: ${detail}`);
  await pilotActivities.recordFault({ sessionId: view.sessionId, kind, applied: false, detail });
}
