/**
 * The warm pool's rows (store/migrations/006_warm_pool.sql): idle sandboxes a
 * host keeps per registered repo, and the sessions that claimed them. The
 * claim is one `update ... where claimed_by is null returning`: of two
 * sessions racing for the last one, one gets it and the other provisions.
 */
import type { Pool } from 'pg';
import type { ProvisionInput } from './contract';
import { sessionInputSchema } from '../workflows/input';
import { sandboxLimitsOf } from '../workflows/units';

/** The most idle sandboxes `drydock repo add --pool` may ask each host to keep per repo. */
export const POOL_MAX = 16;

/** Label of a pool sandbox: the repo it is kept for (with drydock.snapshot and drydock.host). */
export const POOL_LABEL = 'drydock.pool';

/** The limits of a pooled sandbox: a default session's. */
export const POOL_LIMITS: ProvisionInput['limits'] = sandboxLimitsOf(sessionInputSchema.shape.limits.parse(undefined));

export interface PoolSandboxRow {
  name: string;
  repo: string;
  host: string;
  image: string;
  limits: ProvisionInput['limits'];
  createdAt: string;
  claimedBy: string | null;
  expiresAt: string | null;
}

/** Limits as one canonical JSON value, so equal limits compare equal in Postgres. */
function limitsJson(l: ProvisionInput['limits']): string {
  return JSON.stringify({
    cpus: l.cpus,
    memoryBytes: l.memoryBytes,
    pids: l.pids,
    tmpBytes: l.tmpBytes,
    diskBytes: l.diskBytes,
  });
}

function fromDb(r: Record<string, any>): PoolSandboxRow {
  return {
    name: r.name,
    repo: r.repo,
    host: r.host,
    image: r.image,
    limits: r.limits,
    createdAt: new Date(r.created_at).toISOString(),
    claimedBy: r.claimed_by,
    expiresAt: r.expires_at && new Date(r.expires_at).toISOString(),
  };
}

export class PoolRegistry {
  constructor(private readonly pool: Pool) {}

  /** The pool size of a registered repo (0: none). */
  async size(repo: string): Promise<number> {
    const { rows } = await this.pool.query('select pool from snapshot_repos where repo = $1', [repo]);
    return rows[0]?.pool ?? 0;
  }

  /** Sets a registered repo's pool size (0 to POOL_MAX). */
  async setSize(repo: string, size: number): Promise<void> {
    if (!Number.isInteger(size) || size < 0 || size > POOL_MAX) {
      throw new Error(`pool: expected a whole number from 0 to ${POOL_MAX}, got ${size}`);
    }
    await this.pool.query('update snapshot_repos set pool = $2, updated_at = now() where repo = $1', [repo, size]);
  }

  /** Every repo with a pool, and its size. */
  async sizes(): Promise<{ repo: string; size: number }[]> {
    const { rows } = await this.pool.query('select repo, pool from snapshot_repos where pool > 0 order by repo');
    return rows.map((r) => ({ repo: r.repo, size: r.pool }));
  }

  /** Records a ready pool sandbox (after it is provisioned: a row is claimable). */
  async add(row: Pick<PoolSandboxRow, 'name' | 'repo' | 'host' | 'image' | 'limits'>): Promise<void> {
    await this.pool.query(
      `insert into pool_sandboxes (name, repo, host, image, limits) values ($1, $2, $3, $4, $5)
       on conflict (name) do nothing`,
      [row.name, row.repo, row.host, row.image, limitsJson(row.limits)],
    );
  }

  /**
   * Claims one idle sandbox of `repo` on `host` started from `image` with
   * exactly `limits`, for `sessionId`; undefined when none is left. The outer
   * `claimed_by is null` is re-checked on the locked row, so a racing claim
   * of the same row gets nothing; `skip locked` lets it take another instead.
   */
  async claim(c: {
    sessionId: string;
    repo: string;
    host: string;
    image: string;
    limits: ProvisionInput['limits'];
    expiresAt: string;
  }): Promise<string | undefined> {
    const { rows } = await this.pool.query(
      `update pool_sandboxes set claimed_by = $1, claimed_at = now(), expires_at = $6
       where claimed_by is null and name = (
         select name from pool_sandboxes
         where repo = $2 and host = $3 and image = $4 and limits = $5::jsonb and claimed_by is null
         order by created_at limit 1 for update skip locked)
       returning name`,
      [c.sessionId, c.repo, c.host, c.image, limitsJson(c.limits), c.expiresAt],
    );
    return rows[0]?.name;
  }

  /** The pool sandbox a session claimed (a retried provisioning finds it again). */
  async claimedBy(sessionId: string): Promise<string | undefined> {
    const { rows } = await this.pool.query('select name from pool_sandboxes where claimed_by = $1', [sessionId]);
    return rows[0]?.name;
  }

  /** The sessions holding a claimed sandbox of a host's pool, with its limits (admission counts them). */
  async claimed(host: string): Promise<{ sessionId: string; limits: ProvisionInput['limits'] }[]> {
    const { rows } = await this.pool.query(
      'select claimed_by, limits from pool_sandboxes where host = $1 and claimed_by is not null',
      [host],
    );
    return rows.map((r) => ({ sessionId: r.claimed_by, limits: r.limits }));
  }

  async get(name: string): Promise<PoolSandboxRow | undefined> {
    const { rows } = await this.pool.query('select * from pool_sandboxes where name = $1', [name]);
    return rows[0] && fromDb(rows[0]);
  }

  /** The idle sandboxes of a host, oldest first. */
  async idle(host: string, repo?: string): Promise<PoolSandboxRow[]> {
    const { rows } = await this.pool.query(
      `select * from pool_sandboxes where host = $1 and claimed_by is null and ($2::text is null or repo = $2)
       order by created_at`,
      [host, repo ?? null],
    );
    return rows.map(fromDb);
  }

  /** Takes an idle sandbox out of the pool (true) unless a session claimed it first (false). */
  async retire(name: string): Promise<boolean> {
    const { rowCount } = await this.pool.query('delete from pool_sandboxes where name = $1 and claimed_by is null', [
      name,
    ]);
    return (rowCount ?? 0) > 0;
  }

  /** Forgets a sandbox whose container is gone (claimed or not). */
  async forget(name: string): Promise<void> {
    await this.pool.query('delete from pool_sandboxes where name = $1', [name]);
  }
}
