/**
 * Scrubs secrets from text before it reaches logs, status or the audit trail:
 * by pattern (token formats of GitHub, OpenAI-style keys, AWS keys, bearer
 * headers, private keys, credentials in URLs) and by value (the secrets this
 * worker was configured with).
 */
import type { Config } from './config';

const PATTERNS: RegExp[] = [
  /\bgh[pousr]_[A-Za-z0-9]{20,}\b/g,
  /\bgithub_pat_[A-Za-z0-9_]{20,}\b/g,
  /\bsk-[A-Za-z0-9_-]{20,}\b/g,
  /\bAKIA[0-9A-Z]{16}\b/g,
  /\bxox[abposr]-[A-Za-z0-9-]{10,}\b/g,
  /(authorization:\s*(?:bearer|token|basic)\s+)[^\s"']+/gi,
  /(\bbearer\s+)[A-Za-z0-9._~+/=-]{16,}/gi,
  /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----/g,
  /(\/\/[^/\s:@]+:)[^@\s/]+(@)/g,
];

export const REDACTED = '[redacted]';

export class Redactor {
  private readonly values: string[];

  /** `secrets`: exact values to scrub wherever they appear (too short ones are ignored: they would scrub words). */
  constructor(secrets: (string | undefined)[] = []) {
    this.values = secrets.filter((s): s is string => typeof s === 'string' && s.length >= 8);
  }

  text(input: string): string {
    let out = input;
    for (const value of this.values) out = out.split(value).join(REDACTED);
    for (const pattern of PATTERNS) {
      out = out.replace(pattern, (_match, ...args: unknown[]) => {
        // Keep a captured prefix/suffix ("Authorization: Bearer ", "//user:" … "@"), drop the secret.
        // (The last two arguments are the offset and the whole input.)
        const captured = args.slice(0, -2).filter((g): g is string => typeof g === 'string');
        if (captured.length === 2) return `${captured[0]}${REDACTED}${captured[1]}`;
        if (captured.length === 1) return `${captured[0]}${REDACTED}`;
        return REDACTED;
      });
    }
    return out;
  }

  /** Every string inside a JSON-like value, scrubbed. */
  value<T>(input: T): T {
    if (typeof input === 'string') return this.text(input) as T;
    if (Array.isArray(input)) return input.map((v) => this.value(v)) as T;
    if (input && typeof input === 'object') {
      return Object.fromEntries(Object.entries(input).map(([k, v]) => [k, this.value(v)])) as T;
    }
    return input;
  }
}

/** Scrubs the secrets a drydock process holds (and token patterns) from what it records. */
export function redactorOf(
  config: Pick<Config, 'GITHUB_TOKEN' | 'DRYDOCK_MODEL_API_KEY' | 'DRYDOCK_MODEL_ENDPOINTS'>,
): Redactor {
  return new Redactor([
    config.GITHUB_TOKEN,
    config.DRYDOCK_MODEL_API_KEY,
    ...Object.values(config.DRYDOCK_MODEL_ENDPOINTS),
  ]);
}
