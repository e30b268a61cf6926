/**
 * Repo memory's keeping (docs/agents.md, Repo memory), on any worker: the
 * notes the agent proposed in its notes file (NOTES_FILE; the built-in loop's
 * propose_note tool writes there too), which the commit's exec took out of the
 * sandbox, scrubbed and bounded (sandbox/activities/commit.ts), are kept as
 * proposals for a maintainer and audited.
 */
import { recordEvent, type AuditTrail } from '../store/audit';
import type { Database } from '../store/db';
import { RepoNotes } from '../repos/notes';
import type { Redactor } from '../platform/scrub';
import { NOTE_LIMITS } from '../workflows/rules/repo-notes';

export interface RepoNotesDeps {
  db: Pick<Database, 'pool'>;
  audit: AuditTrail;
  /** Proposals are scrubbed of this worker's secrets too before they are kept. */
  redactor: Redactor;
}

export interface KeepNotesInput {
  sessionId: string;
  /** The registered repo name the notes are kept under. */
  repo: string;
  /** The session's round (1: the task; then each follow-up): a retry of the same round records nothing new. */
  round: number;
  /** The notes' texts, as the commit returned them. */
  texts: string[];
}

export function createRepoNotesActivities(deps: RepoNotesDeps) {
  return {
    /** Keeps the notes the agent proposed this round; returns their ids. */
    async keepNotes(input: KeepNotesInput): Promise<{ proposed: number[] }> {
      const texts = input.texts.slice(0, NOTE_LIMITS.perRound).map((t) => deps.redactor.text(String(t)));
      if (!texts.length) return { proposed: [] };
      const notes = await new RepoNotes(deps.db.pool).propose(input.repo, input.sessionId, input.round, texts);
      await recordEvent(deps.audit, {
        sessionId: input.sessionId,
        key: `notes/r${input.round}/proposed`,
        kind: 'note',
        actor: 'agent',
        data: { repo: input.repo, proposed: notes.map((n) => ({ id: n.id, chars: n.text.length })) },
      });
      return { proposed: notes.map((n) => n.id) };
    },
  };
}
