/**
 * Scrubbing of secrets from whatever leaves a sandbox for logs, artifacts and
 * status: by value (the secrets granted to the step, the worker's own) and by
 * pattern (token formats of common providers), so a secret an agent prints
 * is not carried into the workflow history or the review console. And of
 * terminal sequences (plainLogText), so what a sandbox printed cannot drive
 * the terminal or page that shows it.
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
  /\blin_(?:api|oauth)_[A-Za-z0-9]{20,}\b/g, // Linear
  /\bddp_[A-Za-z0-9_-]{40,}/g, // drydock personal tokens
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

/**
 * The part of `value`'s base64 that does not depend on its neighbours, for
 * each of the three alignments it can have in a longer encoded text (the
 * characters mixing its first or last bits with a neighbour's are left out),
 * in both alphabets (standard and URL-safe).
 */
function base64Forms(value: string): string[] {
  const forms: string[] = [];
  for (const offset of [0, 1, 2]) {
    const bytes = Buffer.concat([Buffer.alloc(offset), Buffer.from(value)]);
    const encoded = bytes.toString('base64').replace(/=+$/, '');
    const start = [0, 2, 3][offset];
    const end = bytes.length % 3 === 0 ? encoded.length : encoded.length - 1;
    const form = encoded.slice(start, end);
    forms.push(form, form.replace(/\+/g, '-').replace(/\//g, '_'));
  }
  return forms;
}

/** `value` as it appears URL-encoded: percent-encoded (either hex case), and as a form field. */
function urlForms(value: string): string[] {
  const encoded = encodeURIComponent(value);
  if (encoded === value) return [];
  return [encoded, encoded.replace(/%[0-9A-F]{2}/g, (e) => e.toLowerCase()), encoded.replace(/%20/g, '+')];
}

/**
 * What to search for to scrub `secrets`: each value long enough to scrub,
 * its base64 and URL-encoded forms; distinct, longest first (so a longer
 * match wins over a shorter one inside it).
 */
export function needlesOf(secrets: readonly (string | undefined)[]): string[] {
  const values = secrets.filter((s): s is string => typeof s === 'string' && s.length >= MIN_SECRET_LENGTH);
  const forms = values.flatMap((v) => [v, ...base64Forms(v), ...urlForms(v)]);
  return [...new Set(forms.filter((f) => f.length >= MIN_SECRET_LENGTH - 2))].sort((a, b) => b.length - a.length);
}

/** Scrubs one piece of text, in time linear in its length. For large texts, `scrubLarge`. */
export function scrub(text: string, secrets: readonly string[] = []): string {
  return scrubNeedles(text, needlesOf(secrets));
}

function scrubNeedles(text: string, needles: readonly string[]): string {
  return scrubPatterns(replaceNeedles(text, needles));
}

function scrubPatterns(text: string): string {
  let out = text;
  for (const pattern of TOKEN_PATTERNS) {
    out = out.replace(pattern, (_match, kept: unknown) => (typeof kept === 'string' ? kept : '') + REDACTED);
  }
  return out;
}

/** Each needle (longest first) replaced wherever it occurs: a native search per needle. */
function replaceNeedles(text: string, needles: readonly string[]): string {
  let out = text;
  for (const needle of needles) if (out.includes(needle)) out = out.split(needle).join(REDACTED);
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
  return scrubLargeNeedles(text, needlesOf(secrets));
}

async function scrubLargeNeedles(text: string, needles: readonly string[]): Promise<string> {
  if (text.length <= SCRUB_CHUNK_CHARS) return scrubNeedles(text, needles);
  const byValue = replaceNeedles(text, needles);
  const pieces: string[] = [];
  for (let start = 0; start < byValue.length;) {
    const end = pieceEnd(byValue, start);
    pieces.push(scrubPatterns(byValue.slice(start, end)));
    start = end;
    await new Promise((resolve) => setImmediate(resolve));
  }
  return pieces.join('');
}

/** Whether text holds something shaped like a token. */
export function hasTokenPattern(text: string): boolean {
  return TOKEN_PATTERNS.some((p) => new RegExp(p.source, p.flags.replace('g', '')).test(text));
}

/**
 * The worker's one redactor: every string that leaves a sandbox (step output,
 * streamed and final, heartbeats, verification output and reports, browser
 * logs, the change's diff, activity results and errors) and every audit
 * record passes through it. It scrubs a fixed set of secret values, in their
 * plain, base64 and URL-encoded forms, and every token pattern.
 */
export class Redactor {
  /** The values and their encoded forms, longest first (see needlesOf). */
  readonly needles: readonly string[];
  /** Each needle's secret by name (the variable it came from), for saying which secret a text holds. */
  private readonly owners = new Map<string, string>();

  /**
   * `secrets`: exact values to scrub wherever they appear (unset ones are
   * skipped); as a record, by the name that says which one was found (`holds`).
   */
  constructor(secrets: readonly (string | undefined)[] | Readonly<Record<string, string | undefined>> = []) {
    const named: [string, string | undefined][] = Array.isArray(secrets)
      ? secrets.map((value) => ['a secret the worker holds', value])
      : Object.entries(secrets);
    for (const [name, value] of named) for (const needle of needlesOf([value])) this.owners.set(needle, name);
    this.needles = needlesOf(named.map(([, value]) => value));
  }

  /**
   * The names of the secrets whose value (plain, base64 or URL-encoded) is in
   * `content`, text or bytes: what the worker refuses to publish.
   */
  holds(content: string | Buffer): string[] {
    const found = new Set<string>();
    for (const needle of this.needles) if (content.includes(needle)) found.add(this.owners.get(needle)!);
    return [...found].sort();
  }

  text(input: string): string {
    return scrubNeedles(input, this.needles);
  }

  /** `text` for text of any size, leaving the event loop free (see scrubLarge). */
  large(input: string): Promise<string> {
    return scrubLargeNeedles(input, this.needles);
  }

  /** Every string inside a JSON-like value (arrays and plain objects), scrubbed; anything else as it is. */
  value<T>(input: T): T {
    if (typeof input === 'string') return this.text(input) as T;
    if (Array.isArray(input)) return input.map((v) => this.value(v)) as T;
    if (input && typeof input === 'object' && [Object.prototype, null].includes(Object.getPrototypeOf(input))) {
      return Object.fromEntries(Object.entries(input).map(([k, v]) => [k, this.value(v)])) as T;
    }
    return input;
  }

  /** A redactor for one stream of text that arrives in chunks (see StreamRedactor). */
  stream(): StreamRedactor {
    return new StreamRedactor(this);
  }
}

/**
 * Scrubs a stream whose chunks may cut a secret in two: of what has arrived,
 * it gives out only what can no longer be part of a secret (or of one of its
 * encoded forms), and holds the rest, at most the longest needle's length − 1
 * characters, until the next chunk or `end`. (Token patterns are scrubbed
 * per chunk given out: a token cut by a chunk boundary can pass.)
 */
export class StreamRedactor {
  private pending = '';
  private readonly longest: number;

  constructor(private readonly redactor: Redactor) {
    this.longest = redactor.needles[0]?.length ?? 0;
  }

  /** Takes the next chunk; returns the scrubbed text that is safe to give out now. */
  push(chunk: string): string {
    const text = this.pending + chunk;
    const cut = this.safeEnd(text);
    this.pending = text.slice(cut);
    return this.redactor.text(text.slice(0, cut));
  }

  /** The stream is over: the scrubbed rest. */
  end(): string {
    const rest = this.pending;
    this.pending = '';
    return this.redactor.text(rest);
  }

  /**
   * Where `text` can be cut so that no needle occurrence crosses the cut and
   * nothing after it could still become one: past every occurrence that
   * starts in the first length − (longest − 1) characters, then up to the
   * first position whose rest is the start of a needle (or holds one whole).
   */
  private safeEnd(text: string): number {
    const needles = this.redactor.needles;
    let cut = Math.max(0, text.length - Math.max(0, this.longest - 1));
    for (let moved = true; moved;) {
      moved = false;
      for (const needle of needles) {
        for (let at = text.indexOf(needle, Math.max(0, cut - needle.length + 1)); at !== -1 && at < cut;) {
          if (at + needle.length > cut) {
            cut = at + needle.length;
            moved = true;
          }
          at = text.indexOf(needle, at + 1);
        }
      }
    }
    for (let at = cut; at < text.length; at++) {
      const rest = text.length - at;
      if (needles.some((n) => text.startsWith(n.slice(0, Math.min(n.length, rest)), at))) return at;
    }
    return text.length;
  }
}

/** Each DRYDOCK_GIT_CREDENTIALS entry, whole ("user:token", which its header encodes) and its token alone. */
function gitHostSecrets(hosts: Config['DRYDOCK_GIT_CREDENTIALS']): Record<string, string> {
  return Object.fromEntries(
    Object.entries(hosts).flatMap(([host, given]) => [
      [`DRYDOCK_GIT_CREDENTIALS[${host}]`, given],
      [`the token of DRYDOCK_GIT_CREDENTIALS[${host}]`, given.slice(given.indexOf(':') + 1)],
    ]),
  );
}

/** The secrets a drydock process holds: its tokens, model keys and the secrets sessions may be granted. */
export function redactorOf(
  config: Pick<
    Config,
    | 'GITHUB_TOKEN'
    | 'GITLAB_TOKEN'
    | 'DRYDOCK_GITLAB_WEBHOOK_TOKENS'
    | 'DRYDOCK_MODEL_API_KEY'
    | 'DRYDOCK_ANTHROPIC_API_KEY'
    | 'DRYDOCK_MODEL_ENDPOINTS'
    | 'DRYDOCK_GIT_CREDENTIALS'
    | 'DRYDOCK_AUDIT_KEY'
    | 'DRYDOCK_CI_SECRET'
    | 'DRYDOCK_WEBHOOK_SECRETS'
    | 'DRYDOCK_GITEA_TOKEN'
    | 'DRYDOCK_GITEA_WEBHOOK_SECRETS'
    | 'secrets'
  >,
): Redactor {
  const endpoints = Object.entries(config.DRYDOCK_MODEL_ENDPOINTS).map(([name, e]) => [
    `the key of model endpoint ${name}`,
    typeof e === 'string' ? e : e.key,
  ]);
  return new Redactor({
    GITHUB_TOKEN: config.GITHUB_TOKEN,
    GITLAB_TOKEN: config.GITLAB_TOKEN,
    ...Object.fromEntries(
      (config.DRYDOCK_GITLAB_WEBHOOK_TOKENS ?? []).map((v, i) => [`DRYDOCK_GITLAB_WEBHOOK_TOKENS[${i}]`, v]),
    ),
    DRYDOCK_MODEL_API_KEY: config.DRYDOCK_MODEL_API_KEY,
    DRYDOCK_ANTHROPIC_API_KEY: config.DRYDOCK_ANTHROPIC_API_KEY,
    DRYDOCK_AUDIT_KEY: config.DRYDOCK_AUDIT_KEY,
    DRYDOCK_CI_SECRET: config.DRYDOCK_CI_SECRET,
    ...Object.fromEntries((config.DRYDOCK_WEBHOOK_SECRETS ?? []).map((v, i) => [`DRYDOCK_WEBHOOK_SECRETS[${i}]`, v])),
    DRYDOCK_GITEA_TOKEN: config.DRYDOCK_GITEA_TOKEN,
    ...Object.fromEntries(
      (config.DRYDOCK_GITEA_WEBHOOK_SECRETS ?? []).map((v, i) => [`DRYDOCK_GITEA_WEBHOOK_SECRETS[${i}]`, v]),
    ),
    ...Object.fromEntries(endpoints),
    ...gitHostSecrets(config.DRYDOCK_GIT_CREDENTIALS),
    ...Object.fromEntries(Object.entries(config.secrets).map(([name, value]) => [`DRYDOCK_SECRET_${name}`, value])),
  });
}

/** Terminal sequences a sandbox may print (the repo's output), dropped before a log, a model, a page or a terminal shows it. */
const SEQUENCES = [
  /\x1b\[[0-?]*[ -/]*[@-~]/g, // CSI: colours, cursor moves
  /\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?/g, // OSC: titles, hyperlinks, the clipboard
  /\x1b[PX^_][^\x1b]*(?:\x1b\\)?/g, // DCS, SOS, PM, APC strings
  /\x1b[ -/]*[0-~]?/g, // any other escape
  /\x9b[0-?]*[ -/]*[@-~]/g, // CSI's 8-bit form
  /[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x9c)?/g, // the strings' 8-bit forms
];
const CONTROLS = /[\x00-\x08\x0b-\x1f\x7f-\x9f]/g;

/** Text with every terminal sequence and control character but tab and newline removed (a lone CR ends a line). */
export function plainLogText(text: string): string {
  let out = text.replace(/\r\n/g, '\n').replace(/\r/g, '\n');
  for (const sequence of SEQUENCES) out = out.replace(sequence, '');
  return out.replace(CONTROLS, '');
}
