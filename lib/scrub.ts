/**
 * Scrubbing of secrets from whatever leaves a sandbox for logs, artifacts and
 * status: by value (the secrets granted to the step, the worker's own) and by
 * pattern (token formats of common providers), so a secret an agent prints
 * is not carried into the workflow history or the review console.
 */

import type { Config } from './config';

/**
 * Token shapes of common providers; each match is replaced whole, or, when
 * the pattern has a group, all but the group (the context kept for the
 * reader). No lookbehinds and no unbounded repetition that can fail after a
 * long scan: each pattern starts at a literal and runs in linear time on any
 * input (a variable-length lookbehind took 8 s on 80 k spaces, blocking the
 * worker past its heartbeats).
 */
export const TOKEN_PATTERNS: RegExp[] = [
  /\bgh[pousr]_[A-Za-z0-9]{30,}\b/g, // GitHub tokens
  /\bgithub_pat_[A-Za-z0-9_]{40,}\b/g, // GitHub fine-grained tokens
  /\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}\b/g, // OpenAI, Anthropic
  /\b(?:AKIA|ASIA)[0-9A-Z]{16}\b/g, // AWS access key ids
  /\bxox[abposr]-[A-Za-z0-9-]{10,}\b/g, // Slack
  /\bglpat-[A-Za-z0-9_-]{20,}\b/g, // GitLab
  /\bnpm_[A-Za-z0-9]{36}\b/g, // npm
  /-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]{0,40}PRIVATE KEY-----|$)/g,
  /(authorization:\s{0,64}(?:bearer|token|basic)\s{1,64})[^\s"']+/gi, // HTTP authorization headers
  /(\bbearer\s{1,64})[A-Za-z0-9._~+/=-]{16,}/gi,
  /(\/\/[^/\s:@]{1,256}:)[^@\s/]{1,1024}(?=@)/g, // passwords in URLs
];

export const REDACTED = '[redacted]';

/** Values shorter than this are not scrubbed by value (they would blank ordinary words). */
const MIN_SECRET_LENGTH = 8;

/** Scrubs one piece of text, in time linear in its length. For large texts, `scrubLarge`. */
export function scrub(text: string, secrets: readonly string[] = []): string {
  let out = scrubValues(text, secrets);
  for (const pattern of TOKEN_PATTERNS) {
    out = out.replace(pattern, (_match, kept: unknown) => (typeof kept === 'string' ? kept : '') + REDACTED);
  }
  return out;
}

function scrubValues(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const value of [...secrets].sort((a, b) => b.length - a.length)) {
    if (value.length >= MIN_SECRET_LENGTH) out = out.split(value).join(REDACTED);
  }
  return out;
}

/** Characters scrubbed between two turns of the event loop in `scrubLarge`. */
export const SCRUB_CHUNK_CHARS = 256 * 1024;
/** A private key block longer than this is not a key: its lines are not kept in one piece. */
const MAX_KEY_BLOCK = 64 * 1024;

/**
 * Where to end the piece of `text` that starts at `start`: after the first
 * newline past SCRUB_CHUNK_CHARS, else after whitespace, else (a run with
 * neither, longer than any token) at twice that size; a private key block
 * open at the cut stays whole. So no token is cut, and each piece is bounded.
 */
function pieceEnd(text: string, start: number): number {
  const soft = start + SCRUB_CHUNK_CHARS;
  if (soft >= text.length) return text.length;
  const hard = Math.min(soft + SCRUB_CHUNK_CHARS, text.length);
  const newline = text.indexOf('\n', soft);
  let cut = newline !== -1 && newline < hard ? newline + 1 : -1;
  if (cut === -1) {
    const space = text.slice(soft, hard).search(/\s/);
    cut = space === -1 ? hard : soft + space + 1;
  }
  const opened = text.lastIndexOf('-----BEGIN ', cut - 1);
  if (opened >= Math.max(start, cut - MAX_KEY_BLOCK)) {
    const end = text.indexOf('-----END ', opened);
    // Past its END line (at most 80 characters), or MAX_KEY_BLOCK when it has none: the pattern redacts to the piece's end.
    const blockEnd = end !== -1 && end < opened + MAX_KEY_BLOCK ? end + 80 : opened + MAX_KEY_BLOCK;
    cut = Math.min(Math.max(cut, blockEnd), text.length);
  }
  return cut;
}

/**
 * `scrub` for text of any size: secret values over the whole text (a native
 * search), then the patterns piece by piece, yielding to the event loop
 * between pieces so heartbeats and other activities go on.
 */
export async function scrubLarge(text: string, secrets: readonly string[] = []): Promise<string> {
  if (text.length <= SCRUB_CHUNK_CHARS) return scrub(text, secrets);
  const byValue = scrubValues(text, secrets);
  const pieces: string[] = [];
  for (let start = 0; start < byValue.length;) {
    const end = pieceEnd(byValue, start);
    pieces.push(scrub(byValue.slice(start, end)));
    start = end;
    await new Promise((resolve) => setImmediate(resolve));
  }
  return pieces.join('');
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
    ...Object.values(config.DRYDOCK_MODEL_ENDPOINTS).map((e) => (typeof e === 'string' ? e : e.key)),
  ]);
}
