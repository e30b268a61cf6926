/**
 * The audit trail: append-only rows in Postgres, one HMAC chain per session.
 * Each row's hash is keyed (the key is not in the database) and covers its
 * content and the previous row's hash, so an edit made behind the database's
 * back (the append-only trigger disabled) is found by `verify`, which names
 * the first row that does not match; the session's own result in Temporal
 * records its last row, so removing rows from the end is found too. Secrets
 * are scrubbed before anything is written. See docs/audit.md.
 */
import { Context } from '@temporalio/activity';
import { createHmac, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Pool } from 'pg';
import type { AuditSeal } from '../workflows/api';
import { ConfigError, type Config } from '../platform/config';
import type { Redactor } from '../platform/scrub';

export const AUDIT_KINDS = [
  'sandbox.provisioned',
  'command',
  'tool_call',
  'model_call',
  'verification',
  'acceptance',
  'approval',
  'followup',
  'attach',
  'attach.input',
  'desktop',
  'editor',
  'preview',
  'push',
  'pull_request',
  'deploy',
  'webhook',
  'snapshot.build',
  'teardown',
  'fault',
  'mcp_call',
  'note',
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

/** How many times one append reads the chain's end again after losing the race for it before it gives up (the activity retries). */
const APPEND_RACES = 50;

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

/** HMAC-SHA256, under the audit key, of the previous row's hash and this row's content (its own hash excluded). */
export function rowHash(key: Buffer, row: Omit<AuditRow, 'hash'> & { hash?: string }): string {
  // eslint-disable-next-line @typescript-eslint/no-unused-vars
  const { prevHash, hash, ...content } = row;
  return createHmac('sha256', key).update(prevHash).update('\n').update(canonicalJson(content)).digest('hex');
}

const MIN_KEY_BYTES = 32;

/**
 * The audit key: DRYDOCK_AUDIT_KEY, else the file DRYDOCK_AUDIT_KEY_FILE, else `<data dir>/audit-key`.
 * In development mode a missing file is created once (mode 0600, 32 random
 * bytes, hex); otherwise a missing or short key stops the process: an
 * unkeyed chain could be recomputed by anyone who can write the database.
 */
export function loadAuditKey(
  config: Pick<Config, 'DRYDOCK_AUDIT_KEY' | 'DRYDOCK_AUDIT_KEY_FILE' | 'DRYDOCK_DATA_DIR' | 'DRYDOCK_DEV_MODE'>,
): Buffer {
  if (config.DRYDOCK_AUDIT_KEY) return Buffer.from(config.DRYDOCK_AUDIT_KEY);
  const file = config.DRYDOCK_AUDIT_KEY_FILE ?? path.join(config.DRYDOCK_DATA_DIR, 'audit-key');
  if (!existsSync(file)) {
    if (!config.DRYDOCK_DEV_MODE) {
      throw new ConfigError(
        `DRYDOCK_AUDIT_KEY: no audit key (and no file ${file}); set DRYDOCK_AUDIT_KEY or DRYDOCK_AUDIT_KEY_FILE ` +
          'to 32+ random characters (openssl rand -hex 32), the same for every worker, serve and the CLI',
      );
    }
    mkdirSync(path.dirname(file), { recursive: true });
    try {
      writeFileSync(file, `${randomBytes(MIN_KEY_BYTES).toString('hex')}\n`, { mode: 0o600, flag: 'wx' });
    } catch (err) {
      // Another drydock process of the same data dir made it first: use that one.
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
  const key = Buffer.from(readFileSync(file, 'utf8').trim());
  if (key.length < MIN_KEY_BYTES) {
    throw new ConfigError(`DRYDOCK_AUDIT_KEY_FILE: the key in ${file} is shorter than ${MIN_KEY_BYTES} characters`);
  }
  return key;
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
  /** Sessions whose last row was checked against the seal in their Temporal result. */
  sealed: number;
  /** The first row whose hash or link does not match, or the missing end, per broken session. */
  broken: { sessionId: string; seq: number; id: number | null; reason: string }[];
}

/** A closed session's seal (its result's `audit`), if it has one; undefined for others. */
export type SealLookup = (sessionId: string) => Promise<AuditSeal | undefined>;

export class AuditTrail {
  constructor(
    private readonly pool: Pool,
    private readonly host: string,
    private readonly redactor: Redactor,
    /** The HMAC key of the chain (loadAuditKey). */
    private readonly key: Buffer,
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

  /**
   * One try: two statements, no transaction and no lock. The chain stays linear because
   * (session, seq) is unique: a writer that lost the race for a position inserts nothing
   * and reads the new end again. A retried event (same key) returns the row already there.
   */
  private async appendOnce(input: AuditInput): Promise<AuditRow> {
    const eventKey = `${input.sessionId}/${input.key}`;
    for (let tries = 1; ; tries++) {
      // The event if it is there already, and the chain's end: one round trip.
      const found = await this.pool.query(
        `(select * from audit_events where event_key = $1)
         union all
         (select * from audit_events where session_id = $2 order by seq desc limit 1)`,
        [eventKey, input.sessionId],
      );
      const existing = found.rows.find((r) => r.event_key === eventKey);
      if (existing) return fromDb(existing);
      const last = found.rows[0] as { seq: number; hash: string } | undefined;
      const row = this.rowAfter(input, eventKey, last);
      const hash = rowHash(this.key, row);
      const inserted = await this.pool.query(
        `insert into audit_events (session_id, seq, event_key, kind, at, actor, host, activity_id, attempt, data, prev_hash, hash)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
         on conflict do nothing returning id`,
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
      if (inserted.rowCount) return { ...row, hash };
      // Another writer took this position (or wrote this very event): read again.
      if (tries >= APPEND_RACES) throw new Error(`audit: ${tries} writers raced for the end of ${input.sessionId}`);
    }
  }

  /** The row that follows `last` in the session's chain (scrubbed; its hash not yet taken). */
  private rowAfter(
    input: AuditInput,
    eventKey: string,
    last: { seq: number; hash: string } | undefined,
  ): Omit<AuditRow, 'hash'> {
    return {
      sessionId: input.sessionId,
      seq: (last?.seq ?? 0) + 1,
      key: eventKey,
      kind: input.kind,
      at: (input.at ?? new Date()).toISOString(),
      actor: this.redactor.text(input.actor),
      host: this.host,
      activityId: input.activityId ?? null,
      attempt: input.attempt ?? null,
      data: this.redactor.value(input.data),
      prevHash: last?.hash ?? GENESIS,
    };
  }

  async events(sessionId: string): Promise<AuditRow[]> {
    const result = await this.pool.query('select * from audit_events where session_id = $1 order by seq', [sessionId]);
    return result.rows.map(fromDb);
  }

  /** The session's last row now: what its workflow records in its result when it ends. */
  async seal(sessionId: string): Promise<AuditSeal> {
    const last = await this.pool.query<{ seq: number; hash: string }>(
      'select seq, hash from audit_events where session_id = $1 order by seq desc limit 1',
      [sessionId],
    );
    return { events: last.rows[0]?.seq ?? 0, head: last.rows[0]?.hash ?? GENESIS };
  }

  /**
   * Recomputes every chain (or one session's) and names the first bad row of
   * each; with `sealOf`, also checks that each closed session's trail still
   * holds the last row its Temporal result recorded.
   */
  async verify(sessionId?: string, sealOf?: SealLookup): Promise<VerifyResult> {
    const result = await this.pool.query(
      sessionId
        ? 'select * from audit_events where session_id = $1 order by session_id, seq'
        : 'select * from audit_events order by session_id, seq',
      sessionId ? [sessionId] : [],
    );
    const chains = new Map<string, { id: number; row: AuditRow }[]>();
    if (sessionId) chains.set(sessionId, []);
    for (const raw of result.rows) {
      const row = fromDb(raw);
      chains.set(row.sessionId, [...(chains.get(row.sessionId) ?? []), { id: Number(raw.id), row }]);
    }
    const out: VerifyResult = { sessions: 0, rows: result.rows.length, sealed: 0, broken: [] };
    for (const [id, rows] of chains) {
      if (rows.length) out.sessions++;
      const seal = await sealOf?.(id);
      if (seal) out.sealed++;
      const broken = this.firstBreak(rows) ?? (seal && sealBreak(rows, seal));
      if (broken) out.broken.push({ sessionId: id, ...broken });
    }
    return out;
  }

  /** The first row of a chain whose position, link or keyed hash does not match. */
  private firstBreak(rows: { id: number; row: AuditRow }[]): { seq: number; id: number; reason: string } | undefined {
    let prev = GENESIS;
    for (const [i, { id, row }] of rows.entries()) {
      let reason: string | undefined;
      if (row.seq !== i + 1) reason = `expected row ${i + 1} of the chain, found ${row.seq} (a row is missing)`;
      else if (row.prevHash !== prev) reason = 'its link to the previous row does not match';
      else if (rowHash(this.key, row) !== row.hash) reason = 'its content does not match its hash (edited)';
      if (reason) return { seq: row.seq, id, reason };
      prev = row.hash;
    }
    return undefined;
  }
}

/**
 * A whole chain against the seal its session's result recorded: the sealed
 * row must still be there with the same hash. Rows after it are allowed (a
 * pull request closed later appends a webhook event).
 */
function sealBreak(
  rows: { id: number; row: AuditRow }[],
  seal: AuditSeal,
): { seq: number; id: number | null; reason: string } | undefined {
  const sealed = rows[seal.events - 1];
  if (seal.events === 0) return undefined;
  if (!sealed) {
    return {
      seq: seal.events,
      id: null,
      reason: `the session's Temporal result records ${seal.events} events, the trail has ${rows.length} (rows removed from the end)`,
    };
  }
  if (sealed.row.hash !== seal.head) {
    return {
      seq: seal.events,
      id: sealed.id,
      reason: "its hash is not the head the session's Temporal result records (the chain was rewritten)",
    };
  }
  return undefined;
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

/**
 * Appends an audit event from inside an activity, tagged with the activity's
 * id and attempt. Waits while the database is away (see AuditTrail.append),
 * until the activity is cancelled.
 */
export function recordEvent(audit: AuditTrail, event: Omit<AuditInput, 'activityId' | 'attempt'>): Promise<AuditRow> {
  const ctx = Context.current();
  return audit.append({ ...event, activityId: ctx.info.activityId, attempt: ctx.info.attempt }, ctx.cancellationSignal);
}

/** The irreversible actions the worker does after approval, each audited before and after. */
export type IrreversibleAction = 'push' | 'pull_request' | 'deploy';

/**
 * An irreversible action is recorded before it happens (stage "intent": if
 * the audit database is down, the action waits) and after (stage "done").
 * A follow-up round's (round > 1) is recorded under its own key.
 */
export function recordAction(
  audit: AuditTrail,
  sessionId: string,
  kind: IrreversibleAction,
  stage: 'intent' | 'done',
  data: Record<string, unknown>,
  round = 1,
): Promise<AuditRow> {
  return recordEvent(audit, {
    sessionId,
    key: round > 1 ? `${kind}/r${round}/${stage}` : `${kind}/${stage}`,
    kind,
    actor: 'drydock',
    data: { stage, ...data, ...(round > 1 ? { round } : {}) },
  });
}
