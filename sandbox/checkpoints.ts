/**
 * Checkpoints: each session's newest working tree as a diff against its base
 * commit, in Postgres, so a lost sandbox is replaced on any host from where
 * its last step left the tree.
 */
import type { Pool } from 'pg';

/** A session's working tree as a binary diff against its base commit. */
export interface Checkpoint {
  sessionId: string;
  /** The step whose end it records. */
  step: string;
  baseCommit: string;
  diff: Buffer;
}

/**
 * The newest checkpoint of each session, in Postgres so that any host can
 * re-provision a session from it (a host's own disk may be what was lost).
 * Saving again replaces: a session resumes from its last step, not any earlier.
 */
export class CheckpointStore {
  constructor(private readonly pool: Pool) {}

  async save(checkpoint: Checkpoint): Promise<void> {
    await this.pool.query(
      `insert into sandbox_checkpoints (session_id, step, base_commit, diff) values ($1, $2, $3, $4)
       on conflict (session_id) do update
         set step = excluded.step, base_commit = excluded.base_commit, diff = excluded.diff, taken_at = now()`,
      [checkpoint.sessionId, checkpoint.step, checkpoint.baseCommit, checkpoint.diff],
    );
  }

  async latest(sessionId: string): Promise<Checkpoint | undefined> {
    const { rows } = await this.pool.query<{ step: string; base_commit: string; diff: Buffer }>(
      'select step, base_commit, diff from sandbox_checkpoints where session_id = $1',
      [sessionId],
    );
    const row = rows[0];
    return row && { sessionId, step: row.step, baseCommit: row.base_commit, diff: row.diff };
  }

  /**
   * Once the session is over its checkpoint has no use: the session's own teardown
   * (`destroySandbox`, not for a replaced sandbox) calls this. The reaper does not,
   * so a session whose teardown never ran keeps its row.
   */
  async remove(sessionId: string): Promise<void> {
    await this.pool.query('delete from sandbox_checkpoints where session_id = $1', [sessionId]);
  }
}
