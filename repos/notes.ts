/**
 * Repo memory's store (store/migrations/015_repo_notes.sql): the notes
 * sessions proposed for a repo, a maintainer's decision on each (approve,
 * edit, drop), every version kept, and the approved notes a later session is
 * given. drydock never writes a note into the repo itself.
 */
import type { Pool } from 'pg';
import type { AuditTrail } from '../store/audit';
import { withTransaction } from '../store/db';
import { cleanNote, notesWithin, type GivenNote } from '../workflows/rules/repo-notes';

export type NoteStatus = 'proposed' | 'approved' | 'dropped';

export interface RepoNote {
  id: number;
  repo: string;
  sessionId: string;
  status: NoteStatus;
  version: number;
  text: string;
  proposedAt: string;
  decidedBy?: string;
  decidedAt?: string;
}

export interface NoteVersion {
  version: number;
  status: NoteStatus;
  text: string;
  by: string;
  at: string;
}

/** A maintainer's decision on a note: approve it (as it is, or with `text`), edit an approved one, or drop it. */
export type NoteDecision = { action: 'approve' | 'edit'; text?: string } | { action: 'drop' };

export class NoteRefused extends Error {}

export class RepoNotes {
  constructor(private readonly pool: Pool) {}

  /**
   * Records a round's proposals, once per key (`<session>/<round>/<n>`): a
   * retried collection returns the notes it recorded the first time.
   */
  async propose(repo: string, sessionId: string, round: number, texts: string[]): Promise<RepoNote[]> {
    const out: RepoNote[] = [];
    for (const [i, raw] of texts.entries()) {
      const text = cleanNote(raw);
      if (!text) continue;
      const key = `${sessionId}/${round}/${i + 1}`;
      const note = await withTransaction(this.pool, async (client) => {
        const made = await client.query(
          `insert into repo_notes (repo, session_id, proposal_key, status, text)
           values ($1, $2, $3, 'proposed', $4) on conflict (proposal_key) do nothing returning *`,
          [repo, sessionId, key, text],
        );
        if (!made.rows[0])
          return (await client.query('select * from repo_notes where proposal_key = $1', [key])).rows[0];
        await client.query(
          `insert into repo_note_versions (note_id, version, status, text, by) values ($1, 1, 'proposed', $2, $3)`,
          [made.rows[0].id, text, `agent (${sessionId})`],
        );
        return made.rows[0];
      });
      out.push(fromRow(note));
    }
    return out;
  }

  /** A repo's notes (all repos without `repo`), newest first; `status` narrows them. */
  async list(opts: { repo?: string; status?: NoteStatus; limit?: number } = {}): Promise<RepoNote[]> {
    const { rows } = await this.pool.query(
      `select * from repo_notes where ($1::text is null or repo = $1) and ($2::text is null or status = $2)
       order by id desc limit $3`,
      [opts.repo ?? null, opts.status ?? null, Math.min(opts.limit ?? 200, 1000)],
    );
    return rows.map(fromRow);
  }

  async get(id: number): Promise<RepoNote | undefined> {
    const { rows } = await this.pool.query('select * from repo_notes where id = $1', [id]);
    return rows[0] && fromRow(rows[0]);
  }

  async versions(id: number): Promise<NoteVersion[]> {
    const { rows } = await this.pool.query(
      'select version, status, text, by, at from repo_note_versions where note_id = $1 order by version',
      [id],
    );
    return rows.map((r) => ({ version: r.version, status: r.status, text: r.text, by: r.by, at: iso(r.at) }));
  }

  /**
   * A maintainer's decision: a new version of the note (its text and
   * status). Editing needs an approved or proposed note; a dropped note stays
   * dropped (propose it again in a session). The caller checks the role.
   */
  async decide(id: number, decision: NoteDecision, by: string): Promise<RepoNote> {
    return withTransaction(this.pool, async (client) => {
      const { rows } = await client.query('select * from repo_notes where id = $1 for update', [id]);
      const note = rows[0] && fromRow(rows[0]);
      if (!note) throw new NoteRefused(`no note ${id}`);
      if (note.status === 'dropped') throw new NoteRefused(`note ${id} was dropped (by ${note.decidedBy})`);
      if (decision.action === 'edit' && decision.text === undefined) throw new NoteRefused('edit: give the new text');
      const status: NoteStatus = decision.action === 'drop' ? 'dropped' : 'approved';
      const text = decision.action !== 'drop' && decision.text !== undefined ? cleanNote(decision.text) : note.text;
      if (!text) throw new NoteRefused('text: a note cannot be empty');
      const version = note.version + 1;
      await client.query(
        'insert into repo_note_versions (note_id, version, status, text, by) values ($1, $2, $3, $4, $5)',
        [id, version, status, text, by],
      );
      const updated = await client.query(
        `update repo_notes set status = $2, text = $3, version = $4, decided_by = $5, decided_at = now()
         where id = $1 returning *`,
        [id, status, text, version, by],
      );
      return fromRow(updated.rows[0]);
    });
  }

  /** The approved notes a session of `repo` is given: oldest approved first, within `maxChars` together. */
  async given(repo: string, maxChars?: number): Promise<GivenNote[]> {
    const { rows } = await this.pool.query(
      `select id, version, text from repo_notes where repo = $1 and status = 'approved' order by decided_at, id limit 200`,
      [repo],
    );
    return notesWithin(
      rows.map((r) => ({ id: Number(r.id), version: r.version, text: r.text })),
      maxChars,
    );
  }
}

/**
 * A maintainer's decision in the audit trail: the repo's notes chain
 * (`notes:<repo>`), one event per version, with the note's size, not its text
 * (the versions keep the text).
 */
export function auditDecision(audit: AuditTrail, decided: RepoNote, action: NoteDecision['action'], by: string) {
  return audit.append({
    sessionId: `notes:${decided.repo}`,
    key: `note/${decided.id}/v${decided.version}`,
    kind: 'note',
    actor: by,
    data: { note: decided.id, action, status: decided.status, version: decided.version, chars: decided.text.length },
  });
}

function fromRow(r: Record<string, any>): RepoNote {
  return {
    id: Number(r.id),
    repo: r.repo,
    sessionId: r.session_id,
    status: r.status,
    version: r.version,
    text: r.text,
    proposedAt: iso(r.proposed_at),
    ...(r.decided_by ? { decidedBy: r.decided_by, decidedAt: iso(r.decided_at) } : {}),
  };
}

const iso = (d: Date | string) => (d instanceof Date ? d.toISOString() : String(d));
