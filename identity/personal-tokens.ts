/**
 * A person's tokens, in the database: the console's sign-in (purpose
 * `console`, hours) and the CLI's (`cli`, days), issued after an OpenID
 * Connect sign-in or by the operator (`drydock token issue`). Only a token's
 * SHA-256 is stored; a token is shown once, when it is issued.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Pool } from 'pg';

export type TokenPurpose = 'console' | 'cli';

/** Personal tokens start with this, so a leaked one is recognisable (and scrubbed: lib/scrub.ts). */
export const PERSONAL_PREFIX = 'ddp_';

export interface IssuedToken {
  /** Shown once; only its hash is kept. */
  token: string;
  id: string;
  person: string;
  purpose: TokenPurpose;
  expiresAt: Date;
}

const digest = (token: string) => createHash('sha256').update(token).digest();

export class PersonalTokens {
  constructor(private readonly pool: Pool) {}

  async issue(person: string, purpose: TokenPurpose, ttlMs: number): Promise<IssuedToken> {
    const secret = randomBytes(32).toString('base64url');
    const token = `${PERSONAL_PREFIX}${secret}`;
    const id = secret.slice(0, 8);
    const expiresAt = new Date(Date.now() + ttlMs);
    await this.pool.query(
      'insert into personal_tokens (id, person, hash, purpose, expires_at) values ($1, $2, $3, $4, $5)',
      [id, person, digest(token), purpose, expiresAt],
    );
    return { token, id, person, purpose, expiresAt };
  }

  /** The person a live token belongs to (looked up by its hash), or undefined. */
  async identify(token: string | undefined): Promise<{ person: string; purpose: TokenPurpose } | undefined> {
    if (!token?.startsWith(PERSONAL_PREFIX) || token.length > 100) return undefined;
    const { rows } = await this.pool.query<{ person: string; purpose: TokenPurpose }>(
      'select person, purpose from personal_tokens where hash = $1 and revoked_at is null and expires_at > now()',
      [digest(token)],
    );
    return rows[0];
  }

  /** Ends a token now (sign-out, `drydock token revoke`); true when it was live. */
  async revoke(token: string): Promise<boolean> {
    const { rowCount } = await this.pool.query(
      'update personal_tokens set revoked_at = now() where hash = $1 and revoked_at is null',
      [digest(token)],
    );
    return (rowCount ?? 0) > 0;
  }

  async revokeById(id: string): Promise<boolean> {
    const { rowCount } = await this.pool.query(
      'update personal_tokens set revoked_at = now() where id = $1 and revoked_at is null',
      [id],
    );
    return (rowCount ?? 0) > 0;
  }

  /** Live tokens, newest first (never the tokens themselves). */
  async list(person?: string) {
    const { rows } = await this.pool.query<{
      id: string;
      person: string;
      purpose: TokenPurpose;
      created_at: Date;
      expires_at: Date;
    }>(
      `select id, person, purpose, created_at, expires_at from personal_tokens
        where revoked_at is null and expires_at > now() and ($1::text is null or person = $1)
        order by created_at desc limit 500`,
      [person ?? null],
    );
    return rows.map((r) => ({
      id: r.id,
      person: r.person,
      purpose: r.purpose,
      createdAt: r.created_at.toISOString(),
      expiresAt: r.expires_at.toISOString(),
    }));
  }
}
