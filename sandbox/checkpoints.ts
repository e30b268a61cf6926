/**
 * Checkpoints: each session's newest working tree as a diff against its base
 * commit, and its services' data (what the session wrote into them), in
 * Postgres, so a lost sandbox is replaced on any host from where its last
 * step left the tree and the databases.
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

/** One service's data at a session's checkpoint (ServiceRuntime.saveData's copy). */
export interface ServiceCheckpoint {
  sessionId: string;
  service: string;
  step: string;
  lowers: string;
  fingerprint: string;
  data: Buffer;
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

  /** Keeps a service's data at a step's end, replacing the older copy. */
  async saveService(copy: ServiceCheckpoint): Promise<void> {
    await this.pool.query(
      `insert into sandbox_service_checkpoints (session_id, service, step, lowers, fingerprint, data)
       values ($1, $2, $3, $4, $5, $6)
       on conflict (session_id, service) do update
         set step = excluded.step, lowers = excluded.lowers, fingerprint = excluded.fingerprint,
             data = excluded.data, taken_at = now()`,
      [copy.sessionId, copy.service, copy.step, copy.lowers, copy.fingerprint, copy.data],
    );
  }

  /** The fingerprint of each service's kept copy, by service: what a new checkpoint compares with. */
  async serviceFingerprints(sessionId: string): Promise<Map<string, string>> {
    const { rows } = await this.pool.query<{ service: string; fingerprint: string }>(
      'select service, fingerprint from sandbox_service_checkpoints where session_id = $1',
      [sessionId],
    );
    return new Map(rows.map((r) => [r.service, r.fingerprint]));
  }

  /** The session's services' kept copies. */
  async services(sessionId: string): Promise<ServiceCheckpoint[]> {
    const { rows } = await this.pool.query<{
      service: string;
      step: string;
      lowers: string;
      fingerprint: string;
      data: Buffer;
    }>('select service, step, lowers, fingerprint, data from sandbox_service_checkpoints where session_id = $1', [
      sessionId,
    ]);
    return rows.map((r) => ({ sessionId, ...r }));
  }

  /** Forgets a service's copy (one that could not be taken must not outlive the tree it went with). */
  async removeService(sessionId: string, service: string): Promise<void> {
    await this.pool.query('delete from sandbox_service_checkpoints where session_id = $1 and service = $2', [
      sessionId,
      service,
    ]);
  }

  /**
   * Once the session is over its checkpoint has no use: the session's own teardown
   * (`destroySandbox`, not for a replaced sandbox) calls this. The reaper does not,
   * so a session whose teardown never ran keeps its row.
   */
  async remove(sessionId: string): Promise<void> {
    await this.pool.query('delete from sandbox_checkpoints where session_id = $1', [sessionId]);
    await this.pool.query('delete from sandbox_service_checkpoints where session_id = $1', [sessionId]);
  }
}
