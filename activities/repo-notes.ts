/**
 * Repo memory's collection (docs/agents.md, Repo memory), on the sandbox's
 * host: the notes the agent proposed in its notes file (NOTES_FILE; the
 * built-in loop's propose_note tool writes there too) are read out of the
 * sandbox, bounded, kept as proposals for a maintainer and audited. The file
 * is emptied after, so the next round proposes anew.
 */
import { recordEvent, type AuditTrail } from '../store/audit';
import type { Database } from '../store/db';
import { RepoNotes } from '../repos/notes';
import { permanent, sandboxOf, type ShellScript, type SandboxProvider } from '../sandbox';
import type { Redactor } from '../platform/scrub';
import { NOTE_LIMITS, NOTES_FILE, splitProposedNotes } from '../workflows/rules/repo-notes';

export interface RepoNotesDeps {
  sandboxes: SandboxProvider;
  db: Pick<Database, 'pool'>;
  audit: AuditTrail;
  /** Proposals are scrubbed of the worker's secrets before they are kept. */
  redactor: Redactor;
}

/** The notes file, at most $2 bytes of it, then emptied (a missing file is no notes). */
const TAKE_NOTES: ShellScript = {
  name: 'take-notes',
  text: 'test -f "$1" || exit 0; head -c "$2" "$1"; : > "$1"',
};

export interface CollectNotesInput {
  sandbox: string;
  sessionId: string;
  /** The registered repo name the notes are kept under. */
  repo: string;
  /** The session's round (1: the task; then each follow-up): a retry of the same round records nothing new. */
  round: number;
}

export function createRepoNotesActivities(deps: RepoNotesDeps) {
  return {
    /** Keeps the notes the agent proposed this round; returns their ids. */
    async collectNotes(input: CollectNotesInput): Promise<{ proposed: number[] }> {
      const found = await sandboxOf(deps.sandboxes, input.sandbox)
        .commands.script(TAKE_NOTES, [NOTES_FILE, String(NOTE_LIMITS.fileBytes)])
        .catch(permanent);
      const texts = splitProposedNotes(deps.redactor.text(found.stdout.toString()));
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
