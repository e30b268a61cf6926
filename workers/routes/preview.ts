/**
 * The app previewed (docs/preview.md): GET /sessions/:id/preview on the
 * console sends a person who reads the session to the session's own preview
 * origin, `<label>.<DRYDOCK_PREVIEW_URL's host>`, with a one-minute pass that
 * becomes that origin's cookie; every request there is checked again (the
 * pass, its session against the Host, the person's read access now) and
 * forwarded to the app in the sandbox, one exec of `drydock-port` per
 * connection (sandbox/preview.ts): the sandbox keeps only its loopback. The
 * app never sees drydock's cookies; its pages never run on the console's
 * origin. When nothing answers, the page offers to start the app
 * (startPreview: the workflow starts it beside the sandbox at its gate).
 */
import { randomUUID } from 'node:crypto';
import {
  request as httpRequest,
  STATUS_CODES,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type RequestOptions,
  type ServerResponse,
} from 'node:http';
import type { Duplex } from 'node:stream';
import { WorkflowUpdateFailedError } from '@temporalio/client';
import {
  appConnection,
  PREVIEW_COOKIE,
  PREVIEW_LIMITS,
  PREVIEW_OWN_PATH,
  previewLabelOf,
  previewOrigin,
  PreviewPasses,
  type PreviewPass,
  type SandboxProvider,
} from '../../sandbox';
import { startPreview, type SessionStatus } from '../../workflows/api';
import { esc } from '../console/page';
import { readableStatus } from '../access';
import { consoleUrl, cookiesOf, header, HttpError, type ServeContext } from '../http';

/** This process's passes (a restart of serve asks people to open the preview from the console again). */
const passes = new PreviewPasses();

/** Where previews hang: DRYDOCK_PREVIEW_URL, else `preview.localhost` on the console's port (browsers resolve *.localhost to loopback). */
export function previewBase(ctx: Pick<ServeContext, 'config'>): string {
  if (ctx.config.DRYDOCK_PREVIEW_URL) return ctx.config.DRYDOCK_PREVIEW_URL.replace(/\/$/, '');
  const console = new URL(consoleUrl(ctx.config));
  return `${console.protocol}//preview.localhost${console.port ? `:${console.port}` : ''}`;
}

/** The label of a request sent to a preview origin; undefined for the console's own requests. */
export function previewRequestLabel(ctx: Pick<ServeContext, 'config'>, req: IncomingMessage): string | undefined {
  return previewLabelOf(header(req, 'host'), previewBase(ctx));
}

/** GET /sessions/:id/preview: to the session's preview origin, for a person who reads it. */
export async function previewEntry(ctx: ServeContext, res: ServerResponse, id: string, who: string): Promise<void> {
  const s = await readableStatus(ctx, id, who);
  if (!s.sandbox?.appPort)
    throw new HttpError(409, `${id} has no app to preview (the repo declares none, or no sandbox)`);
  const pass = passes.issue('enter', { sessionId: id, who }, Date.now());
  const to = `${previewOrigin(previewBase(ctx), id)}${PREVIEW_OWN_PATH}enter?pass=${encodeURIComponent(pass)}`;
  res.writeHead(303, { location: to, 'cache-control': 'no-store' });
  res.end();
}

/** The first of the cookie's values that is a valid pass for this preview, else why the first is not. */
function firstPass(values: string[], label: string): PreviewPass | string {
  const checked = (values.length ? values : [undefined]).map((v) => passes.check(v, 'cookie', label, Date.now()));
  return checked.find((c) => typeof c !== 'string') ?? checked[0];
}

/** Any request to a preview origin: serve's own paths, else the app's. */
export async function previewRequest(
  ctx: ServeContext,
  sandboxes: SandboxProvider,
  req: IncomingMessage,
  res: ServerResponse,
  label: string,
): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://preview');
  if (url.pathname === `${PREVIEW_OWN_PATH}enter` && req.method === 'GET') return enter(ctx, res, url, label);
  // Every value sent: an app's script can set a cookie of this name for a parent domain (document.cookie
  // escapes the Set-Cookie filter), which the browser may send first; only a pass that checks counts.
  const pass = firstPass(cookiesOf(req, PREVIEW_COOKIE), label);
  if (typeof pass === 'string') return previewPage(res, 401, 'Sign-in needed', pass);
  // Read access now, not only when the pass was made: a person whose role went is refused at once.
  const s = await readableStatus(ctx, pass.sessionId, pass.who).catch((err: unknown) => {
    if (err instanceof HttpError && err.status === 404) throw new HttpError(404, `no session ${pass.sessionId}`);
    throw err;
  });
  if (url.pathname === `${PREVIEW_OWN_PATH}start` && req.method === 'POST') return start(ctx, req, res, label, pass);
  if (url.pathname.startsWith(PREVIEW_OWN_PATH)) throw new HttpError(404, `no such preview page: ${url.pathname}`);
  if (!s.sandbox?.appPort) return previewPage(res, 409, 'No app', `${s.sessionId} has no app to preview now.`);
  await forward(ctx, sandboxes, req, res, s as SessionStatus & { sandbox: { appPort: number } });
}

function enter(ctx: ServeContext, res: ServerResponse, url: URL, label: string): void {
  const pass = passes.check(url.searchParams.get('pass') ?? undefined, 'enter', label, Date.now());
  if (typeof pass === 'string') return previewPage(res, 403, 'Refused', pass);
  const secure = previewBase(ctx).startsWith('https:') ? '; Secure' : '';
  const cookie = passes.issue('cookie', pass, Date.now());
  res.writeHead(303, {
    location: '/',
    'cache-control': 'no-store',
    'set-cookie': `${PREVIEW_COOKIE}=${cookie}; HttpOnly; SameSite=Lax; Path=/; Max-Age=${PREVIEW_LIMITS.cookieTtlMs / 1000}${secure}`,
  });
  res.end();
}

/**
 * POST /.drydock/start (the page's own button: its Origin must be this preview origin). Every start
 * asked of the workflow is a `preview` row of the audit trail under the person's name, with its outcome.
 */
async function start(ctx: ServeContext, req: IncomingMessage, res: ServerResponse, label: string, pass: PreviewPass) {
  const origin = header(req, 'origin');
  if (!origin || previewLabelOf(new URL(origin).host, previewBase(ctx)) !== label) {
    throw new HttpError(403, 'start the app from its preview page');
  }
  const audit = (data: Record<string, unknown>) =>
    ctx.audit?.append({
      sessionId: pass.sessionId,
      key: `preview/start/${randomUUID()}`,
      kind: 'preview',
      actor: pass.who,
      data: { event: 'start', via: 'preview page', ...data },
    });
  try {
    const started = await ctx.client.workflow
      .getHandle(pass.sessionId)
      .executeUpdate(startPreview, { args: [{ by: pass.who }] });
    ctx.log.info({ sessionId: pass.sessionId, by: pass.who, ready: started.ready }, 'app started for its preview');
    await audit(started.ready ? { ready: true } : { ready: false, why: started.why.slice(0, 500) });
    if (!started.ready) return previewPage(res, 502, 'The app did not start', started.why);
  } catch (err) {
    if (!(err instanceof WorkflowUpdateFailedError)) throw err;
    const why = (err.cause as Error | undefined)?.message ?? err.message;
    await audit({ refused: why.slice(0, 500) });
    return previewPage(res, 409, 'Not now', why);
  }
  res.writeHead(303, { location: '/', 'cache-control': 'no-store' });
  res.end();
}

/** Headers that belong to one connection, not to the request (RFC 9110 7.6.1). */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** The browser's headers for the app: without drydock's cookies and hop-by-hop headers, Host the app's own. */
export function appHeaders(headers: IncomingHttpHeaders, port: number, origin: string): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (!HOP_BY_HOP.has(name) && name !== 'host' && name !== 'cookie') out[name] = value;
  }
  const cookies = (headers.cookie ?? '')
    .split(';')
    .map((c) => c.trim())
    .filter((c) => c && !/^drydock_(preview|editor|token)=/.test(c));
  if (cookies.length) out.cookie = cookies.join('; ');
  out.host = `localhost:${port}`;
  out['x-forwarded-host'] = new URL(origin).host;
  out['x-forwarded-proto'] = new URL(origin).protocol.replace(':', '');
  return out;
}

/**
 * The app's answer headers for the browser: without hop-by-hop headers, and
 * without any cookie that names a Domain: one the app sets for a parent
 * domain would reach other sessions' previews, or the console (cookie
 * tossing); its host-only cookies stay on its own origin.
 */
export function answerHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name)) continue;
    if (name === 'set-cookie') {
      const kept = (value as string[]).filter((cookie) => !/;\s*domain\s*=/i.test(cookie));
      if (kept.length) out[name] = kept;
    } else out[name] = value;
  }
  return out;
}

/** The request to the app over one exec connection, its answer back as it comes. */
async function forward(
  ctx: ServeContext,
  sandboxes: SandboxProvider,
  req: IncomingMessage,
  res: ServerResponse,
  s: SessionStatus & { sandbox: { appPort: number } },
): Promise<void> {
  const port = s.sandbox.appPort;
  const origin = previewOrigin(previewBase(ctx), s.sessionId);
  const connection = await appConnection(sandboxes, s.sandbox.name, port);
  await forwardRequest(req, res, {
    headers: appHeaders(req.headers, port, origin),
    connect: { createConnection: () => connection as never },
    onEnd: () => connection.destroy(),
    onError: (why) => notRunning(res, port, why),
  });
}

/**
 * One request forwarded over an exec connection (the preview's own, or an
 * editor's kept-alive agent), its answer back as it comes. The connection is
 * no socket, so http's own timeout never fires: a timer of ours, so that a
 * server that never answers, or a browser that left, holds no exec.
 */
export function forwardRequest(
  req: IncomingMessage,
  res: ServerResponse,
  to: {
    headers: IncomingHttpHeaders;
    connect: Pick<RequestOptions, 'agent' | 'createConnection'>;
    /** When the exchange is over (the answer sent or the browser gone) or the request failed. */
    onEnd?: () => void;
    /** A failure before any answer: the page that says why. */
    onError: (why: string) => void;
  },
): Promise<void> {
  return new Promise<void>((resolve) => {
    const upstream = httpRequest(
      { method: req.method, path: req.url, headers: to.headers, ...to.connect },
      (answer) => {
        clearTimeout(waiting);
        res.writeHead(answer.statusCode ?? 502, answerHeaders(answer.headers));
        answer.pipe(res);
        answer.on('end', resolve).on('error', () => (res.destroy(), resolve()));
      },
    );
    const waiting = setTimeout(
      () => upstream.destroy(new Error(`no answer within ${PREVIEW_LIMITS.answerMs / 1000} s`)),
      PREVIEW_LIMITS.answerMs,
    );
    res.on('close', () => {
      clearTimeout(waiting);
      upstream.destroy();
      to.onEnd?.();
      resolve();
    });
    upstream.on('error', (err) => {
      clearTimeout(waiting);
      to.onEnd?.();
      if (res.headersSent) res.destroy();
      else to.onError(err.message);
      resolve();
    });
    req.pipe(upstream);
  });
}

/** Nothing answered on the app's port: say so, with the button that starts it. */
function notRunning(res: ServerResponse, port: number, why: string): void {
  previewPage(
    res,
    502,
    'The app is not running',
    `Nothing answers on port ${port} in the sandbox (${why}).`,
    `<form method="post" action="${PREVIEW_OWN_PATH}start"><button id="start-app" type="submit">Start the app</button></form>
<p>It starts beside the sandbox while the session waits at its gate, and stops before the next verification or agent step.</p>`,
  );
}

/** serve's own pages on a preview origin: no script at all. */
export function previewPage(res: ServerResponse, status: number, title: string, message: string, extra = ''): void {
  res.writeHead(status, {
    'content-type': 'text/html; charset=utf-8',
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
    'content-security-policy':
      "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
  });
  res.end(
    `<!doctype html><html><head><meta charset="utf-8"><title>${esc(title)}: drydock preview</title></head>` +
      `<body><h1>${esc(title)}</h1><p id="preview-message">${esc(message)}</p>${extra}</body></html>`,
  );
}

/** The most an app's answer to a WebSocket's handshake may send before its blank line. */
const MAX_UPGRADE_HEAD = 16 * 1024;

/** An answer to an Upgrade refused before any app is reached (a raw socket: no ServerResponse). */
export function refuseUpgrade(raw: Duplex, status: number, why: string): void {
  const text = why.slice(0, 300).replace(/[\r\n]/g, ' ');
  raw.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Refused'}\r\ncontent-type: text/plain; charset=utf-8\r\n` +
      `content-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`,
  );
}

/** The browser's handshake for the app: appHeaders, with the Upgrade itself kept. */
export function upgradeRequestHead(req: IncomingMessage, port: number, origin: string): string {
  const headers = appHeaders(req.headers, port, origin);
  headers.connection = 'Upgrade';
  headers.upgrade = req.headers.upgrade;
  const lines = Object.entries(headers).flatMap(([name, value]) =>
    (Array.isArray(value) ? value : [value]).filter((v) => v !== undefined).map((v) => `${name}: ${v}`),
  );
  return `${req.method ?? 'GET'} ${req.url ?? '/'} HTTP/1.1\r\n${lines.join('\r\n')}\r\n\r\n`;
}

/**
 * The app's answer head, filtered as its HTTP answers are (no cookie for a
 * parent domain); the handshake's own headers (Upgrade, Connection) kept.
 */
export function upgradeAnswerHead(head: string): string {
  const [status, ...lines] = head.split('\r\n');
  const kept = lines.filter((line) => {
    const [name, ...rest] = line.split(':');
    return !(name.trim().toLowerCase() === 'set-cookie' && /;\s*domain\s*=/i.test(rest.join(':')));
  });
  return [status, ...kept].join('\r\n');
}

/**
 * A WebSocket to a preview origin (a dev server's hot reload): checked as its
 * pages are (the pass, its session, read access now) and besides opened from
 * a page of this very preview origin (a sibling origin is same-site, so its
 * pages would send the cookie), then carried byte for byte over one exec
 * connection to the app's port; the app's handshake answer is filtered as
 * its HTTP answers are. It ends when either side does.
 */
export async function previewUpgrade(
  ctx: ServeContext,
  sandboxes: SandboxProvider,
  req: IncomingMessage,
  raw: Duplex,
  head: Buffer,
  label: string,
): Promise<void> {
  raw.on('error', () => raw.destroy());
  try {
    const origin = header(req, 'origin');
    let originLabel: string | undefined;
    try {
      originLabel = origin ? previewLabelOf(new URL(origin).host, previewBase(ctx)) : undefined;
    } catch {
      originLabel = undefined;
    }
    if (originLabel !== label) return refuseUpgrade(raw, 403, "a preview's socket opens from the preview's own pages");
    const pass = firstPass(cookiesOf(req, PREVIEW_COOKIE), label);
    if (typeof pass === 'string') return refuseUpgrade(raw, 401, pass);
    const s = await readableStatus(ctx, pass.sessionId, pass.who);
    if (!s.sandbox?.appPort) return refuseUpgrade(raw, 409, `${s.sessionId} has no app to preview now`);
    const port = s.sandbox.appPort;
    const app = await appConnection(sandboxes, s.sandbox.name, port);
    app.write(upgradeRequestHead(req, port, previewOrigin(previewBase(ctx), s.sessionId)));
    if (head.length) app.write(head);
    carryUpgrade(raw, app);
  } catch (err) {
    const status = err instanceof HttpError ? err.status : 502;
    if (!(err instanceof HttpError)) ctx.log.error({ err }, 'preview socket failed');
    refuseUpgrade(raw, status, err instanceof HttpError ? err.message : 'the app could not be reached');
  }
}

/** The app's answer head filtered, then both ways byte for byte; one side's end ends the other. */
export function carryUpgrade(raw: Duplex, app: Duplex): void {
  const end = () => (raw.destroy(), app.destroy());
  raw.on('close', end);
  app.on('close', end).on('error', end);
  let buffered = Buffer.alloc(0);
  const answer = (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    const at = buffered.indexOf('\r\n\r\n');
    if (at < 0) {
      if (buffered.length > MAX_UPGRADE_HEAD) end();
      return;
    }
    app.off('data', answer);
    app.pause();
    raw.write(`${upgradeAnswerHead(buffered.subarray(0, at).toString('latin1'))}\r\n\r\n`, 'latin1');
    if (buffered.length > at + 4) raw.write(buffered.subarray(at + 4));
    app.pipe(raw);
    raw.pipe(app);
  };
  app.on('data', answer);
}
