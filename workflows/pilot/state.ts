/**
 * The run state of a pilot: each session's view (what the `pilot` query
 * answers), its last progress report, and the stop. One object owns the
 * transitions and what it carries across continue-as-new.
 */
import type { PilotSessionState, PilotSessionView, PilotStatus, Phase, SessionProgress } from '../api';
import { OUTCOMES } from '../api';
import type { PilotInput } from './input';
import { plannedSessions, sessionInputOf, stateOf, type PlannedSession } from '../rules/pilot';

/** What one run of a pilot hands to the next (continue-as-new). */
export interface PilotCarry {
  sessions: PilotSessionView[];
  /** Each session's last progress report's number. */
  seq: Record<string, number>;
  startedAt: string;
  resumed?: PilotStatus['resumed'];
}

const isOutcome = (phase: Phase | undefined) => (OUTCOMES as readonly string[]).includes(phase ?? '');

export class PilotRun {
  readonly status: PilotStatus;
  readonly planned: Map<string, PlannedSession>;
  /** Sessions' last progress reports (this run's). */
  readonly progress = new Map<string, SessionProgress>();
  private readonly seq: Record<string, number>;

  constructor(
    readonly input: PilotInput,
    carry: PilotCarry | undefined,
    startedAt: string,
  ) {
    const planned = plannedSessions(input);
    this.planned = new Map(planned.map((p) => [p.sessionId, p]));
    const views =
      carry?.sessions ??
      planned.map((p) => ({
        sessionId: p.sessionId,
        task: p.task.id,
        configuration: p.configuration,
        attempt: p.attempt,
        faults: p.faults,
        state: 'planned' as const,
        applied: [],
      }));
    this.seq = { ...(carry?.seq ?? {}) };
    this.status = {
      pilot: input.name,
      phase: 'running',
      startedAt: carry?.startedAt ?? startedAt,
      concurrency: input.concurrency,
      sessions: views,
      counts: { planned: 0, working: 0, at_gate: 0, ended: 0 },
      ...(carry?.resumed ? { resumed: carry.resumed } : {}),
    };
    this.count();
  }

  view(sessionId: string): PilotSessionView | undefined {
    return this.status.sessions.find((s) => s.sessionId === sessionId);
  }

  inputOf(sessionId: string) {
    return sessionInputOf(this.input, this.planned.get(sessionId)!);
  }

  /** A session's report: a newer one moves its state (an ended session stays ended). */
  report(progress: SessionProgress): void {
    const view = this.view(progress?.sessionId);
    // Someone else's workflow at a session's id may report too: it is not the pilot's session.
    if (!view || view.disowned || (this.seq[view.sessionId] ?? 0) >= progress.seq) return;
    this.seq[view.sessionId] = progress.seq;
    this.progress.set(view.sessionId, progress);
    this.moveTo(view, progress.phase);
  }

  /** What Temporal or the session's result says: `phase` undefined while it has not told it yet. */
  moveTo(view: PilotSessionView, phase: Phase | undefined): void {
    if (view.state === 'ended') return;
    if (phase !== undefined) view.phase = phase;
    view.state = stateOf(phase ?? view.phase);
    this.count();
  }

  /** A session's workflow closed; its last report may not have come (it failed before it could tell). */
  closed(view: PilotSessionView, phase: Phase): void {
    this.moveTo(view, isOutcome(view.phase) ? view.phase : phase);
  }

  count(): void {
    const counts: Record<PilotSessionState, number> = { planned: 0, working: 0, at_gate: 0, ended: 0 };
    for (const s of this.status.sessions) counts[s.state]++;
    this.status.counts = counts;
  }

  carry(): PilotCarry {
    const { sessions, startedAt, resumed } = this.status;
    return { sessions, seq: this.seq, startedAt, ...(resumed ? { resumed } : {}) };
  }
}
