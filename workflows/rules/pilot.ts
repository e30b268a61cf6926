/**
 * A pilot as pure decisions (docs/pilot.md): its sessions and their inputs,
 * which state a session's phase counts as, which sessions start next within
 * the concurrency, and which faults are due.
 */
import { OUTCOMES, type Phase, type PilotSessionState, type PilotSessionView, type SessionProgress } from '../api';
import type { SessionInputDraft } from '../input';
import type { FaultKind, PilotInput, PilotTask } from '../pilot/input';

export interface PlannedSession {
  sessionId: string;
  task: PilotTask;
  configuration: string;
  attempt: number;
  faults: FaultKind[];
}

/** Every session of the pilot, task by task, each configuration's attempts side by side. */
export function plannedSessions(pilot: PilotInput): PlannedSession[] {
  const planned: PlannedSession[] = [];
  for (const task of pilot.tasks) {
    for (const config of pilot.configurations) {
      for (let attempt = 1; attempt <= pilot.attempts; attempt++) {
        const faults = pilot.faults
          .filter(
            (f) =>
              f.task === task.id &&
              (!f.configuration || f.configuration === config.name) &&
              (!f.attempt || f.attempt === attempt),
          )
          .map((f) => f.kind);
        planned.push({
          sessionId: `${pilot.name}.${task.id}.${config.name}.${attempt}`,
          task,
          configuration: config.name,
          attempt,
          faults: [...new Set(faults)],
        });
      }
    }
  }
  return planned;
}

/**
 * A session's input: the task and its repo, the configuration's agent (a
 * script agent without steps of its own runs the task's), the pilot's
 * settings. Unless the pilot publishes, nothing is pushed: the session ends
 * at its push gate with the reviewer's decision.
 */
export function sessionInputOf(pilot: PilotInput, planned: PlannedSession): SessionInputDraft {
  const config = pilot.configurations.find((c) => c.name === planned.configuration)!;
  const { task } = planned;
  const steps =
    config.agent.kind === 'script' && config.agent.steps.length === 0 ? (task.steps ?? []) : config.agent.steps;
  const { verify, approval, limits, publish } = pilot.session;
  return {
    repo: (task.repo ?? pilot.repo)!,
    task: task.task,
    ...(pilot.requestedBy ? { requestedBy: pilot.requestedBy } : {}),
    agent: { ...config.agent, name: config.agent.name ?? config.name, steps },
    ...(config.memory === false ? { memory: { use: false, propose: false } } : {}),
    ...(verify ? { verify } : {}),
    ...(approval ? { approval } : {}),
    ...(limits ? { limits } : {}),
    publish: pilot.publish ? { ...publish } : { push: false },
    ...(task.acceptance ? { acceptance: { command: task.acceptance } } : {}),
    ...(planned.faults.includes('stale_snapshot') ? { drill: { staleSnapshot: true } } : {}),
  };
}

/** Phases in which a session waits for a person: its slot is free for the next. */
const WAITING: readonly Phase[] = ['awaiting_approval', 'awaiting_followup', 'attached'];

export function stateOf(phase: Phase | undefined): PilotSessionState {
  if (phase === undefined) return 'working';
  if ((OUTCOMES as readonly string[]).includes(phase)) return 'ended';
  return WAITING.includes(phase) ? 'at_gate' : 'working';
}

/** The planned sessions to start now: as many as the concurrency leaves, in plan order. */
export function nextToStart(sessions: PilotSessionView[], concurrency: number): PilotSessionView[] {
  const working = sessions.filter((s) => s.state === 'working').length;
  return sessions.filter((s) => s.state === 'planned').slice(0, Math.max(0, concurrency - working));
}

/** A session's faults not applied yet. */
const pendingFaults = (view: PilotSessionView) =>
  view.faults.filter((f) => !view.applied.some((a) => a.startsWith(`${f}:`))) as FaultKind[];

/**
 * The faults due on a session given its last report, each once: the
 * sandbox killed while it has one (best while the agent works), the
 * credentials rotated while its change waits for review, the stale snapshot
 * (asked in its input) recorded once it started.
 */
export function dueFaults(view: PilotSessionView, progress: SessionProgress | undefined): FaultKind[] {
  if (view.state === 'planned' || view.state === 'ended') return [];
  return pendingFaults(view).filter((f) => {
    if (f === 'stale_snapshot') return true;
    if (!progress) return false;
    if (f === 'sandbox_killed') return progress.hostQueue !== undefined && progress.phase !== 'tearing_down';
    return progress.phase === 'awaiting_approval';
  });
}

/** The faults a session ended without: it never got to their moment. */
export const missedFaults = (view: PilotSessionView): FaultKind[] =>
  view.state === 'ended' ? pendingFaults(view) : [];
