/**
 * Who is calling the API or the console: bearer tokens from the configuration,
 * each mapped to a person's name, which is what approvals record. Tokens are
 * compared in constant time and never logged.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Config } from '../platform/config';

export interface ApiTokens {
  /** The name a token belongs to, or undefined. */
  identify(token: string | undefined): string | undefined;
  readonly count: number;
}

/** Parses `name=token` entries: comma-separated in the environment, one a line (and # comments) in a file. */
export function parseTokens(text: string, source: string): [name: string, token: string][] {
  return text
    .split(source.endsWith('_FILE') ? '\n' : ',')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'))
    .map((entry) => {
      const at = entry.indexOf('=');
      const name = entry.slice(0, at).trim();
      const token = entry.slice(at + 1).trim();
      if (at <= 0 || !/^[A-Za-z0-9._@-]+$/.test(name)) throw new Error(`${source}: an entry is not name=token`);
      if (token.length < 16) throw new Error(`${source}: the token of ${name} is shorter than 16 characters`);
      return [name, token];
    });
}

const digest = (s: string) => createHash('sha256').update(s).digest();

export function loadApiTokens(config: Pick<Config, 'DRYDOCK_API_TOKENS' | 'DRYDOCK_API_TOKENS_FILE'>): ApiTokens {
  const entries = [
    ...(config.DRYDOCK_API_TOKENS ? parseTokens(config.DRYDOCK_API_TOKENS, 'DRYDOCK_API_TOKENS') : []),
    ...(config.DRYDOCK_API_TOKENS_FILE
      ? parseTokens(readFileSync(config.DRYDOCK_API_TOKENS_FILE, 'utf8'), 'DRYDOCK_API_TOKENS_FILE')
      : []),
  ].map(([name, token]) => ({ name, hash: digest(token) }));
  return {
    count: entries.length,
    identify(token) {
      if (!token) return undefined;
      const hash = digest(token);
      // Compare with every entry (equal-length digests), so timing says nothing about which.
      let found: string | undefined;
      for (const entry of entries) if (timingSafeEqual(entry.hash, hash)) found ??= entry.name;
      return found;
    },
  };
}

/**
 * For the dev stack (`drydock up`) without configured tokens: one token for
 * the local user in `<data dir>/api-tokens` (mode 0600), created once, so the
 * console works out of the box. Returns the file.
 */
export function ensureDevTokenFile(dataDir: string, user: string): string {
  const file = path.join(dataDir, 'api-tokens');
  if (!existsSync(file)) {
    const name = user.replace(/[^A-Za-z0-9._@-]/g, '-') || 'developer';
    writeFileSync(
      file,
      `# name=token, one a line; the name is what approvals record\n${name}=${randomBytes(24).toString('hex')}\n`,
      {
        mode: 0o600,
        flag: 'wx',
      },
    );
  }
  return file;
}
