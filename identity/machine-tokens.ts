/**
 * API tokens for machines (CI jobs, Prometheus, scripts): configured in
 * DRYDOCK_API_TOKENS or DRYDOCK_API_TOKENS_FILE as `name=token`, and recorded
 * as `machine:<name>`, a namespace no person or GitHub login shares. Compared
 * in constant time and never logged.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Config } from '../platform/config';
import { machineName } from './names';

export interface MachineTokens {
  /** The machine a token belongs to (`machine:<name>`), or undefined. */
  identify(token: string | undefined): string | undefined;
  readonly count: number;
  /** The machines that have a token (`machine:<name>`), which roles may name. */
  readonly names: ReadonlySet<string>;
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

export function loadMachineTokens(
  config: Pick<Config, 'DRYDOCK_API_TOKENS' | 'DRYDOCK_API_TOKENS_FILE'>,
): MachineTokens {
  const entries = [
    ...(config.DRYDOCK_API_TOKENS ? parseTokens(config.DRYDOCK_API_TOKENS, 'DRYDOCK_API_TOKENS') : []),
    ...(config.DRYDOCK_API_TOKENS_FILE
      ? parseTokens(readFileSync(config.DRYDOCK_API_TOKENS_FILE, 'utf8'), 'DRYDOCK_API_TOKENS_FILE')
      : []),
  ].map(([name, token]) => ({ name: machineName(name), hash: digest(token) }));
  return {
    count: entries.length,
    names: new Set(entries.map((e) => e.name)),
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
