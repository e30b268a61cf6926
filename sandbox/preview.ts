/**
 * The app previewed (issue 48 item 4): what `drydock serve` needs to show a
 * person the app running in a session's sandbox. The sandbox listens on
 * nothing but its loopback; serve reaches the app with one exec per TCP
 * connection (the `drydock-port` helper in the sandbox's network namespace,
 * as the browser check's helper runs there), and shows it on an origin of
 * the session's own, `<label>.<preview host>`, so the app's pages (written
 * by the agent: untrusted) never run on the console's origin, nor on another
 * session's. This module holds the pure parts (the host name of a session,
 * the signed passes) and the exec connection; the route that checks who and
 * forwards is workers/routes/preview.ts.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { Duplex, type Readable } from 'node:stream';
import type { SandboxProvider } from './provider';
import { HELPER } from './toolchains';

/** Lifetimes of the passes, in ms. */
export const PREVIEW_LIMITS = {
  /** The console's link opens the preview within this long (a one-time hop: it becomes the cookie). */
  enterTtlMs: 60_000,
  /** The preview's cookie; after it, the person opens the preview from the console again. */
  cookieTtlMs: 60 * 60_000,
  /** How long the app may take to answer one request before serve answers 504. */
  answerMs: 60_000,
} as const;

/** The cookie of a preview origin (host-only: no other session's host gets it). */
export const PREVIEW_COOKIE = 'drydock_preview';
/** Paths of serve's own on a preview origin; the app's pages are every other path. */
export const PREVIEW_OWN_PATH = '/.drydock/';

/** The DNS label of a session's preview origin: a hash of its id (ids may hold anything). */
export function previewLabel(sessionId: string): string {
  return `p${createHash('sha256').update(sessionId).digest('hex').slice(0, 24)}`;
}

/** The base URL previews hang under (`http://preview.localhost:8080`), its host names prefixed by a label. */
export function previewOrigin(base: string, sessionId: string): string {
  const url = new URL(base);
  return `${url.protocol}//${previewLabel(sessionId)}.${url.host}`;
}

/**
 * The label of a request's Host when it is a preview origin under `base`
 * (`p…` then `.` then base's host name, any port); undefined otherwise.
 */
export function previewLabelOf(host: string | undefined, base: string): string | undefined {
  if (!host) return undefined;
  const name = host.replace(/:\d+$/, '').toLowerCase();
  const suffix = `.${new URL(base).hostname.toLowerCase()}`;
  if (!name.endsWith(suffix)) return undefined;
  const label = name.slice(0, -suffix.length);
  return /^p[0-9a-f]{24}$/.test(label) ? label : undefined;
}

/** Who a pass speaks for, and for which session. */
export interface PreviewPass {
  sessionId: string;
  who: string;
}

type PassKind = 'enter' | 'cookie';

/**
 * Passes to a session's preview, signed with a key of this serve process:
 * `enter` (in the console's link: a minute) and `cookie` (the preview
 * origin's cookie: an hour). Each names one session and one person; one of
 * another session is refused on this one's origin even when copied by hand.
 */
export class PreviewPasses {
  constructor(
    private readonly key: Buffer = randomBytes(32),
    /** The label of a session's origin (the editor's passes are the same, on an origin of their own). */
    private readonly labelOf: (sessionId: string) => string = previewLabel,
    private readonly what: string = 'preview',
  ) {}

  issue(kind: PassKind, pass: PreviewPass, now: number): string {
    const until = now + (kind === 'enter' ? PREVIEW_LIMITS.enterTtlMs : PREVIEW_LIMITS.cookieTtlMs);
    const body = Buffer.from(JSON.stringify({ k: kind, s: pass.sessionId, w: pass.who, u: until })).toString(
      'base64url',
    );
    return `${body}.${this.sign(body)}`;
  }

  /** The pass, when it is a valid one of `kind` for the session whose origin is `label`; else why not. */
  check(text: string | undefined, kind: PassKind, label: string, now: number): PreviewPass | string {
    const [body, mac] = (text ?? '').split('.');
    if (!body || !mac) return `no ${this.what} pass: open the ${this.what} from the session page in the console`;
    const given = Buffer.from(mac, 'base64url');
    const expected = Buffer.from(this.sign(body), 'base64url');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      return `the ${this.what} pass is not valid here: open the ${this.what} from the session page in the console`;
    }
    let fields: { k?: unknown; s?: unknown; w?: unknown; u?: unknown };
    try {
      fields = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as typeof fields;
    } catch {
      return `the ${this.what} pass is not valid here: open the ${this.what} from the session page in the console`;
    }
    const { k, s, w, u } = fields;
    if (k !== kind || typeof s !== 'string' || typeof w !== 'string' || typeof u !== 'number') {
      return `the ${this.what} pass is not valid here: open the ${this.what} from the session page in the console`;
    }
    if (this.labelOf(s) !== label)
      return `this ${this.what} pass is another session's: open this session's ${this.what} from its page`;
    if (now > u)
      return `the ${this.what} pass ran out: open the ${this.what} from the session page in the console again`;
    return { sessionId: s, who: w };
  }

  private sign(body: string): string {
    return createHmac('sha256', this.key).update(body).digest('base64url');
  }
}

/** Bytes of drydock-port's stderr kept: its one line says why the connection ended. */
const PORT_ERROR_BYTES = 1024;

/**
 * One TCP connection to `127.0.0.1:port` in the sandbox, as a stream (for
 * http.request's createConnection): an exec of the `drydock-port` helper
 * whose stdin and stdout carry the bytes. Nothing listens on a network.
 * The stream ends once the helper's stdout and stderr both did: with an
 * error naming what the helper said (nothing listening on the port, say),
 * else as the app closed it. A write the helper no longer reads is no
 * error of its own: whichever came first, the helper's end says why.
 */
export async function appConnection(provider: SandboxProvider, sandbox: string, port: number): Promise<Duplex> {
  const proc = await provider.attach(sandbox, [HELPER.port, String(port)]);
  proc.busy(true);
  const stream = new Duplex({
    write(chunk: Buffer, _encoding, done) {
      proc.stdin.write(chunk, () => done());
    },
    final(done) {
      proc.stdin.end();
      done();
    },
    read() {
      proc.stdout.resume();
    },
    destroy(err, done) {
      proc.close();
      done(err);
    },
  });
  proc.stdin.on('error', () => undefined);
  proc.stdout.on('data', (chunk: Buffer) => {
    if (!stream.push(chunk)) proc.stdout.pause();
  });
  let said = '';
  proc.stderr.on('data', (chunk: Buffer) => (said = (said + chunk.toString()).slice(0, PORT_ERROR_BYTES)));
  const ended = (from: Readable) => new Promise<void>((resolve) => from.on('end', resolve).on('close', resolve));
  void Promise.all([ended(proc.stdout), ended(proc.stderr)]).then(() => {
    const why = said.trim().replace(/^drydock-port: /, '');
    if (!why) return void stream.push(null);
    // In Node's words for a refused connection: the preview's page shows it after "Nothing answers on port …".
    stream.destroy(
      new Error(why === 'ECONNREFUSED' ? `connect ECONNREFUSED 127.0.0.1:${port}` : `drydock-port: ${why}`),
    );
  });
  proc.stdout.on('error', (err) => stream.destroy(err));
  // What http.request asks of a socket besides the stream.
  return Object.assign(stream, {
    setTimeout: () => stream,
    setNoDelay: () => stream,
    setKeepAlive: () => stream,
    ref: () => stream,
    unref: () => stream,
  });
}
