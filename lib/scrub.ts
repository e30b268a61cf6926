/**
 * Scrubbing of secrets from whatever leaves a sandbox for logs, artifacts and
 * status: by value (the secrets granted to the step, the worker's own) and by
 * pattern (token formats of common providers), so a secret an agent prints
 * is not carried into the workflow history or the review console.
 */

import type { Config } from './config';

/** Token shapes of common providers; each match is replaced whole. */
export const TOKEN_PATTERNS: RegExp[] = [
  /\bgh[pousr]_[A-Za-z0-9]{30,}\b/g, // GitHub tokens
  /\bgithub_pat_[A-Za-z0-9_]{40,}\b/g, // GitHub fine-grained tokens
  /\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}\b/g, // OpenAI, Anthropic
  /\b(?:AKIA|ASIA)[0-9A-Z]{16}\b/g, // AWS access key ids
  /\bxox[abposr]-[A-Za-z0-9-]{10,}\b/g, // Slack
  /\bglpat-[A-Za-z0-9_-]{20,}\b/g, // GitLab
  /\bnpm_[A-Za-z0-9]{36}\b/g, // npm
  /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)/g,
  /(?<=authorization:\s*(?:bearer|token|basic)\s+)[^\s"']+/gi, // HTTP authorization headers
  /(?<=\bbearer\s+)[A-Za-z0-9._~+/=-]{16,}/gi,
  /(?<=\/\/[^/\s:@]+:)[^@\s/]+(?=@)/g, // passwords in URLs
];

export const REDACTED = '[redacted]';

/** Values shorter than this are not scrubbed by value (they would blank ordinary words). */
const MIN_SECRET_LENGTH = 8;

export function scrub(text: string, secrets: readonly string[] = []): string {
  let out = text;
  for (const value of [...secrets].sort((a, b) => b.length - a.length)) {
    if (value.length >= MIN_SECRET_LENGTH) out = out.split(value).join(REDACTED);
  }
  for (const pattern of TOKEN_PATTERNS) out = out.replace(pattern, REDACTED);
  return out;
}

/** Whether text holds something shaped like a token. */
export function hasTokenPattern(text: string): boolean {
  return TOKEN_PATTERNS.some((p) => new RegExp(p.source, p.flags.replace('g', '')).test(text));
}

/** Scrubs a fixed set of secret values and every token pattern, from text or any JSON-like value. */
export class Redactor {
  private readonly values: string[];

  /** `secrets`: exact values to scrub wherever they appear (unset ones are skipped). */
  constructor(secrets: (string | undefined)[] = []) {
    this.values = secrets.filter((s): s is string => typeof s === 'string');
  }

  text(input: string): string {
    return scrub(input, this.values);
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
