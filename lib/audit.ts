/**
 * The audit trail: append-only rows in Postgres, one hash chain per session.
 * Each row's hash covers its content and the previous row's hash, so an edit
 * made behind the database's back (the append-only trigger disabled) is found
 * by `verify`, which names the first row that does not match. Secrets are
 * scrubbed before anything is written. See docs/audit.md.
 */
import { createHash } from 'node:crypto';
import type { Pool } from 'pg';
import { withTransaction } from './db';
import type { Redactor } from './scrub';

export const AUDIT_KINDS = [
  'sandbox.provisioned',
  'command',
  'tool_call',
  'model_call',
  'verification',
  'approval',
  'push',
  'pull_request',
  'deploy',
  'webhook',
  'snapshot.build',
  'teardown',
] as const;
export type AuditKind = (typeof AUDIT_KINDS)[number];

export interface AuditInput {
  sessionId: string;
  /** Unique per session and event ("step-1/command"): a retry writes nothing new. */
  key: string;
  kind: AuditKind;
  /** A person's identity, "agent", or "drydock" (the worker acting for the session). */
  actor: string;
  data: Record<string, unknown>;
  activityId?: string;
  attempt?: number;
  /** Default: now. */
  at?: Date;
}

export interface AuditRow {
  sessionId: string;
  seq: number;
  key: string;
  kind: string;
  at: string;
  actor: string;
  host: string;
  activityId: string | null;
  attempt: number | null;
  data: Record<string, unknown>;
  prevHash: string;
  hash: string;
}

export const GENESIS = '0'.repeat(64);

/** JSON with keys sorted at every level: jsonb does not keep key order, the hash must not depend on it. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value ?? null);
}

/** sha256 of the previous row's hash and this row's content (its own hash excluded). */
export function rowHash(row: Omit<AuditRow, 'hash'> & { hash?: string }): string {
  // eslint-disable-next-line @typescript-eslint/no-unused-vars
  const { prevHash, hash, ...content } = row;
  return createHash('sha256').update(prevHash).update('\n').update(canonicalJson(content)).digest('hex');
}

/** Errors that mean "the database is not there right now", worth waiting out. */
function isUnavailable(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  if (
    ['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', '57P01', '57P02', '57P03', '08006', '08001', '08003'].includes(
      e?.code ?? '',
    )
  )
    return true;
  return /Connection terminated|timeout exceeded when trying to connect|server closed the connection/i.test(
    e?.message ?? '',
  );
}

export interface VerifyResult {
  sessions: number;
  rows: number;
  /** The first row whose hash or link does not match, per broken session. */
  broken: { sessionId: string; seq: number; id: number; reason: string }[];
}

export class AuditTrail {
  constructor(
    private readonly pool: Pool,
    private readonly host: string,
    private readonly redactor: Redactor,
  ) {}

  /**
   * Appends an event (once per key). While the database is unreachable it
   * waits and tries again, so whatever follows (a push) waits with it rather
   * than happening unrecorded; `signal` stops the waiting.
   */
  async append(input: AuditInput, signal?: AbortSignal): Promise<AuditRow> {
    for (;;) {
      try {
        return await this.appendOnce(input);
      } catch (err) {
        if (!isUnavailable(err) || signal?.aborted) throw err;
        await new Promise((r) => setTimeout(r, 1_000));
      }
    }
  }

  private appendOnce(input: AuditInput): Promise<AuditRow> {
    const eventKey = `${input.sessionId}/${input.key}`;
    return withTransaction(this.pool, async (client) => {
      // One writer per session at a time, so the chain stays linear.
      await client.query('select pg_advisory_xact_lock(hashtext($1))', [input.sessionId]);
      const existing = await client.query('select * from audit_events where event_key = $1', [eventKey]);
      if (existing.rows[0]) return fromDb(existing.rows[0]);
      const last = await client.query<{ seq: number; hash: string }>(
        'select seq, hash from audit_events where session_id = $1 order by seq desc limit 1',
        [input.sessionId],
      );
      const row: Omit<AuditRow, 'hash'> = {
        sessionId: input.sessionId,
        seq: (last.rows[0]?.seq ?? 0) + 1,
        key: eventKey,
        kind: input.kind,
        at: (input.at ?? new Date()).toISOString(),
        actor: this.redactor.text(input.actor),
        host: this.host,
        activityId: input.activityId ?? null,
        attempt: input.attempt ?? null,
        data: this.redactor.value(input.data),
        prevHash: last.rows[0]?.hash ?? GENESIS,
      };
      const hash = rowHash(row);
      await client.query(
        `insert into audit_events (session_id, seq, event_key, kind, at, actor, host, activity_id, attempt, data, prev_hash, hash)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
        [
          row.sessionId,
          row.seq,
          row.key,
          row.kind,
          row.at,
          row.actor,
          row.host,
          row.activityId,
          row.attempt,
          JSON.stringify(row.data),
          row.prevHash,
          hash,
        ],
      );
      return { ...row, hash };
    });
  }

  async events(sessionId: string): Promise<AuditRow[]> {
    const result = await this.pool.query('select * from audit_events where session_id = $1 order by seq', [sessionId]);
    return result.rows.map(fromDb);
  }

  /** Recomputes every chain (or one session's) and names the first bad row of each. */
  async verify(sessionId?: string): Promise<VerifyResult> {
    const result = await this.pool.query(
      sessionId
        ? 'select * from audit_events where session_id = $1 order by session_id, seq'
        : 'select * from audit_events order by session_id, seq',
      sessionId ? [sessionId] : [],
    );
    const out: VerifyResult = { sessions: 0, rows: result.rows.length, broken: [] };
    let current: string | undefined;
    let prev = GENESIS;
    let expectedSeq = 1;
    let brokenSession: string | undefined;
    for (const raw of result.rows) {
      const row = fromDb(raw);
      if (row.sessionId !== current) {
        current = row.sessionId;
        prev = GENESIS;
        expectedSeq = 1;
        out.sessions++;
      }
      if (brokenSession === row.sessionId) continue;
      let reason: string | undefined;
      if (row.seq !== expectedSeq)
        reason = `expected row ${expectedSeq} of the chain, found ${row.seq} (a row is missing)`;
      else if (row.prevHash !== prev) reason = 'its link to the previous row does not match';
      else if (rowHash(row) !== row.hash) reason = 'its content does not match its hash (edited)';
      if (reason) {
        out.broken.push({ sessionId: row.sessionId, seq: row.seq, id: Number(raw.id), reason });
        brokenSession = row.sessionId;
      }
      prev = row.hash;
      expectedSeq = row.seq + 1;
    }
    return out;
  }
}

function fromDb(r: Record<string, unknown>): AuditRow {
  return {
    sessionId: r.session_id as string,
    seq: r.seq as number,
    key: r.event_key as string,
    kind: r.kind as string,
    at: (r.at as Date).toISOString(),
    actor: r.actor as string,
    host: r.host as string,
    activityId: (r.activity_id as string | null) ?? null,
    attempt: (r.attempt as number | null) ?? null,
    data: r.data as Record<string, unknown>,
    prevHash: r.prev_hash as string,
    hash: r.hash as string,
  };
}
