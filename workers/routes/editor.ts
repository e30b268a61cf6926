/**
 * VS Code in the browser (docs/editor.md): GET /sessions/:id/editor (the
 * console's page, with a ticket), GET /sessions/:id/editor/socket (its
 * WebSocket, which holds the takeover) and the session's editor origin
 * (`e<hash>.<preview host>`), where every request is forwarded to
 * code-server in the sandbox (sandbox/editor.ts).
 *
 * The page's socket is the terminal's takeover (workers/routes/terminal.ts):
 * the same roles (an approver or the requester), the same `attach` through
 * the session's SessionTerminals (the agent's step ends first and the agent
 * waits; the last person to leave detaches, and the edits are committed,
 * verified and reviewed again; a person leaving while others stay hands the
 * attach over). Once attached, code-server is started in the sandbox (one
 * per session, shared) and the page gets a one-minute pass to the editor
 * origin, which becomes that origin's cookie. A request there is forwarded
 * only while its person holds the editor through a page's socket, with the
 * role now; the editor stops when the last socket closes, or after 15
 * minutes in which nothing of a person's reached it. Opened and closed are
 * `editor` rows of the audit trail under the person's name.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { Agent, IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type WebSocket from 'ws';
import type { WebSocketServer } from 'ws';
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { AttachRefused, reachableSandbox, requestAttach, requestDetach } from '../../sandbox/attach';
import { sandboxOf } from '../../sandbox/handle';
import {
  EDITOR_LIMITS,
  EDITOR_MOUNT,
  EDITOR_PORT,
  editorLabel,
  editorLabelOf,
  editorOrigin,
  EditorRefused,
  SessionEditors,
} from '../../sandbox/editor';
import {
  appConnection,
  PREVIEW_LIMITS,
  PREVIEW_OWN_PATH,
  PreviewPasses,
  type PreviewPass,
} from '../../sandbox/preview';
import type { SandboxProvider } from '../../sandbox/provider';
import { CLOSE, TerminalTickets } from '../../sandbox/web-terminal';
import { handOver } from '../../workflows/api';
import { readableStatus, steeringRefused } from '../access';
import { editorPage } from '../console/editor';
import { cookiesOf, header, HttpError, sendHtml, type ServeContext } from '../http';
import { checkedUpgrade } from './attach';
import {
  appHeaders,
  carryUpgrade,
  forwardRequest,
  previewBase,
  previewPage,
  refuseUpgrade,
  upgradeRequestHead,
} from './preview';
import { presenceTo, ticketedSocket } from './terminal';

const SOCKET_PATH = /^\/sessions\/([^/]+)\/editor\/socket$/;
/** The editor origin's cookie (host-only, like the preview's). */
export const EDITOR_COOKIE = 'drydock_editor';

/** This process's tickets (a key of their own: a terminal's ticket opens no editor) and passes to editor origins. */
const tickets = new TerminalTickets();
const passes = new PreviewPasses(undefined, editorLabel, 'editor');

/** The editors this process started (one provider per serve). */
let editors: SessionEditors | undefined;
const editorsOf = (sandboxes: SandboxProvider) => (editors ??= new SessionEditors(sandboxes));

/**
 * GET /sessions/:id/editor: the page, for a person who may steer the session
 * (403 naming the role otherwise); with `?watch=1`, the watcher's page (who
 * is in, no editor), for anyone who reads the session.
 */
export async function editorPageRoute(ctx: ServeContext, res: ServerResponse, id: string, who: string, watch = false) {
  const s = await readableStatus(ctx, id, who);
  const refused = watch ? undefined : await steeringRefused(ctx, who, s);
  if (refused) throw new HttpError(403, `${refused}; anyone who reads the session may watch (?watch=1)`);
  const nonce = randomBytes(16).toString('base64');
  sendHtml(res, 200, editorPage(s, { who, nonce, ticket: tickets.issue(id, who, Date.now()), watch }), nonce);
}

/** Whether an Upgrade request is for an editor page's socket. */
export function isEditorUpgrade(req: IncomingMessage): boolean {
  return SOCKET_PATH.test(new URL(req.url ?? '/', 'http://drydock').pathname);
}

/** The label of a request sent to an editor origin; undefined for any other. */
export function editorRequestLabel(ctx: Pick<ServeContext, 'config'>, req: IncomingMessage): string | undefined {
  return editorLabelOf(header(req, 'host'), previewBase(ctx));
}

async function checkEditorRequest(ctx: ServeContext, req: IncomingMessage) {
  const { url, who, id } = await ticketedSocket(ctx, req, { kind: 'editor', path: SOCKET_PATH, tickets });
  const watch = url.searchParams.get('watch') === '1';
  const s = await readableStatus(ctx, id, who); // a watcher needs only to read the session
  const refused = watch ? undefined : await steeringRefused(ctx, who, s);
  if (refused) throw new HttpError(403, refused);
  if (!ctx.audit)
    throw new HttpError(503, 'the editor needs the audit trail (drydock serve opens it with its database)');
  return { id, who, watch };
}

/** An Upgrade to an editor page's socket: checked, then attached, the editor started, held until the socket ends. */
export async function editorUpgrade(
  ctx: ServeContext,
  sandboxes: SandboxProvider,
  sockets: WebSocketServer,
  req: IncomingMessage,
  raw: Duplex,
  head: Buffer,
): Promise<void> {
  const upgraded = await checkedUpgrade(ctx, sockets, { req, raw, head }, checkEditorRequest);
  if (!upgraded) return;
  if (upgraded.checked.watch) await watchingEditor(ctx, sandboxes, upgraded.socket, upgraded.checked);
  else await heldEditor(ctx, sandboxes, upgraded.socket, upgraded.checked);
}

/**
 * A watcher: who is in the session, live, while someone is in its editor;
 * no pass, nothing of the editor, no attach (the agent does not wait for a
 * watcher). Ends when the editor stops (its last person left) or the page goes.
 */
async function watchingEditor(
  ctx: ServeContext,
  sandboxes: SandboxProvider,
  socket: WebSocket,
  { id, who }: { id: string; who: string },
): Promise<void> {
  if (!editorsOf(sandboxes).running(id)) {
    control(socket, { type: 'refused', reason: "nobody is in the session's VS Code now: watch once someone is" });
    return socket.close(CLOSE.refused);
  }
  control(socket, { type: 'watching' });
  const stopped = new AbortController();
  const poll = setInterval(() => {
    if (!editorsOf(sandboxes).running(id)) stopped.abort("nobody is in the session's VS Code any more");
  }, 1000);
  const leave = ctx.people.join(id, { who, way: 'editor', watching: true }, presenceTo(socket));
  try {
    await untilEnded(socket, stopped.signal, Infinity, () => 0);
    if (socket.readyState === socket.OPEN) socket.close(CLOSE.normal, 'stopped watching');
  } finally {
    clearInterval(poll);
    leave();
  }
}

const control = (socket: WebSocket, message: Record<string, unknown>) => {
  if (socket.readyState === socket.OPEN) socket.send(JSON.stringify(message));
};

/**
 * The open socket: attach (in the session's turn, shared with its
 * terminals), the editor started (or joined), its pass sent; then held until
 * the page detaches or goes, the editor idles, or another tab of the session
 * detached. Then the editor is released (the last holder stops it) before the
 * detach, so nothing writes /workspace while the session commits it.
 */
async function heldEditor(
  ctx: ServeContext,
  sandboxes: SandboxProvider,
  socket: WebSocket,
  { id, who }: { id: string; who: string },
): Promise<void> {
  const presence = ctx.terminals.join(id, who);
  let leave: () => void = () => undefined;
  const connection = randomUUID();
  const opened = Date.now();
  let held: Awaited<ReturnType<SessionEditors['hold']>> | undefined;
  let end = 'closed';
  let sandbox: string | undefined;
  try {
    sandbox = await reachableSandbox(ctx.client, sandboxes, id);
    // Before the agent is stopped for nothing: a sandbox made before this host had the editor has none.
    if (!(await sandboxOf(sandboxes, sandbox).files.exists(`${EDITOR_MOUNT}/bin/code-server`))) {
      throw new EditorRefused(
        `the sandbox ${sandbox} has no editor mounted (made before this host had one: DRYDOCK_EDITOR_DIR, infra/code-server.sh)`,
      );
    }
    control(socket, { type: 'waiting' });
    await presence.attach(who, () => requestAttach(ctx.client, id, who));
    if (socket.readyState !== socket.OPEN) return;
    control(socket, { type: 'starting', sandbox });
    held = await editorsOf(sandboxes).hold(id, sandbox, who);
    await audit(ctx, id, who, `editor/${connection}/open`, {
      event: 'opened',
      sandbox,
      connection,
      started: held.started,
    });
    if (socket.readyState !== socket.OPEN) return;
    const pass = passes.issue('enter', { sessionId: id, who }, Date.now());
    const href = `${editorOrigin(previewBase(ctx), id)}${PREVIEW_OWN_PATH}enter?pass=${encodeURIComponent(pass)}`;
    control(socket, { type: 'ready', by: who, sandbox, href });
    leave = ctx.people.join(id, { who, way: 'editor', watching: false }, presenceTo(socket));
    ctx.log.info({ sessionId: id, by: who, sandbox, started: held.started }, 'editor opened in the console');
    end = await untilEnded(socket, presence.signal, ctx.config.DRYDOCK_EDITOR_IDLE, () =>
      editorsOf(sandboxes).idleFor(id),
    );
  } catch (err) {
    const refused = err instanceof AttachRefused || err instanceof EditorRefused;
    if (!refused) ctx.log.error({ err, sessionId: id }, 'console editor failed');
    end = refused ? (err as Error).message : 'failed';
    control(socket, { type: 'refused', reason: refused ? (err as Error).message : 'internal error' });
    if (socket.readyState === socket.OPEN) socket.close(refused ? CLOSE.refused : CLOSE.failed);
  } finally {
    leave();
    const stopped = held
      ? await editorsOf(sandboxes)
          .release(id, held.holder)
          .catch(() => false)
      : false;
    if (held) {
      const data = { event: 'closed', sandbox, connection, durationMs: Date.now() - opened, end, stopped };
      await audit(ctx, id, who, `editor/${connection}/close`, data).catch((err: unknown) =>
        ctx.log.error({ err, sessionId: id }, 'the editor close was not audited'),
      );
    }
    const detached = await presence.leave(
      end === 'detach',
      (by) => detachAndSay(ctx, socket, id, by),
      (from, to) => handOverQuietly(ctx, id, from, to),
    );
    if (!detached && socket.readyState === socket.OPEN) {
      socket.close(CLOSE.normal, 'left; the session stays attached while another way in of it is open');
    }
  }
}

/** Waits until the page detaches or goes, the editor idles, or `signal` ends it (the reason why). */
function untilEnded(socket: WebSocket, signal: AbortSignal, idleMs: number, idleFor: () => number): Promise<string> {
  return new Promise((resolve) => {
    let answered = true;
    let pinged = 0;
    const done = (why: string, code?: number) => {
      clearInterval(timer);
      if (code && socket.readyState === socket.OPEN) socket.close(code, why.slice(0, 120));
      resolve(why);
    };
    const timer = setInterval(
      () => {
        if (idleFor() >= idleMs) {
          control(socket, { type: 'idle', seconds: Math.round(idleMs / 1000) });
          return done(`nothing reached the editor for ${Math.round(idleMs / 1000)} s`, CLOSE.idle);
        }
        if (Date.now() - pinged < EDITOR_LIMITS.pingMs) return;
        if (!answered) return (socket.terminate(), done('the page stopped answering'));
        answered = false;
        pinged = Date.now();
        socket.ping();
      },
      Math.min(EDITOR_LIMITS.pingMs, Math.max(1000, idleMs / 4)),
    );
    socket.on('pong', () => (answered = true));
    socket.on('message', (data: Buffer, isBinary: boolean) => {
      let type: unknown;
      try {
        type = isBinary ? undefined : (JSON.parse(data.toString('utf8')) as { type?: unknown }).type;
      } catch {
        type = undefined;
      }
      if (type === 'detach') done('detach');
      else done('the editor page sends only {"type":"detach"}', CLOSE.policy);
    });
    socket.on('close', () => done('closed'));
    if (signal.aborted) done(String(signal.reason), CLOSE.normal);
    else signal.addEventListener('abort', () => done(String(signal.reason), CLOSE.normal), { once: true });
    if (socket.readyState !== socket.OPEN) done('closed');
  });
}

async function audit(ctx: ServeContext, id: string, who: string, key: string, data: Record<string, unknown>) {
  await ctx.audit!.append({ sessionId: id, key, kind: 'editor', actor: who, data: { via: 'console editor', ...data } });
}

async function detachAndSay(ctx: ServeContext, socket: WebSocket, id: string, who: string): Promise<void> {
  try {
    const detached = await requestDetach(ctx.client, id, who);
    ctx.log.info({ sessionId: id, by: who, durationMs: detached.durationMs }, 'detached through the console editor');
    control(socket, { type: 'detached', durationMs: detached.durationMs });
  } catch (err) {
    control(socket, { type: 'detached', reason: (err as Error).message });
  }
  if (socket.readyState === socket.OPEN) socket.close(CLOSE.normal, 'detached');
}

async function handOverQuietly(ctx: ServeContext, id: string, from: string, to: string): Promise<boolean> {
  try {
    await ctx.client.workflow.getHandle(id).executeUpdate(handOver, { args: [{ from, to }] });
    return true;
  } catch (err) {
    if (!(err instanceof WorkflowUpdateFailedError)) ctx.log.warn({ err, sessionId: id }, 'hand over failed');
    return false;
  }
}

/** Roles checked for editor requests, briefly remembered (the workbench loads many files at once). */
const roleChecks = new Map<string, { until: number; refused?: string }>();

async function steeringNow(ctx: ServeContext, pass: PreviewPass): Promise<string | undefined> {
  const key = `${pass.sessionId}\n${pass.who}`;
  const known = roleChecks.get(key);
  if (known && known.until > Date.now()) return known.refused;
  const refused = await steeringRefused(ctx, pass.who, await readableStatus(ctx, pass.sessionId, pass.who)).catch(
    (err: unknown) => (err instanceof HttpError ? err.message : Promise.reject(err)),
  );
  if (roleChecks.size > 10_000) roleChecks.clear();
  roleChecks.set(key, { until: Date.now() + EDITOR_LIMITS.roleCheckMs, refused });
  return refused;
}

/** The first cookie value that is a valid pass for this editor origin, else why the first is not. */
function firstPass(values: string[], label: string): PreviewPass | string {
  const checked = (values.length ? values : [undefined]).map((v) => passes.check(v, 'cookie', label, Date.now()));
  return checked.find((c) => typeof c !== 'string') ?? checked[0];
}

/** Who may reach the editor behind this request: the pass, the person in the editor, the role now. */
type Admission = { status: number; why: string } | { pass: PreviewPass; editor: { sandbox: string; agent: Agent } };

async function admitted(
  ctx: ServeContext,
  sandboxes: SandboxProvider,
  req: IncomingMessage,
  label: string,
): Promise<Admission> {
  const pass = firstPass(cookiesOf(req, EDITOR_COOKIE), label);
  if (typeof pass === 'string') return { status: 401, why: pass };
  const refused = await steeringNow(ctx, pass);
  if (refused) return { status: 403, why: refused };
  const editor = editorsOf(sandboxes).live(pass.sessionId, pass.who);
  if (!editor) {
    return { status: 409, why: `${pass.who} has no editor of ${pass.sessionId} open: open it from the session page` };
  }
  return { pass, editor };
}

/** Any request to an editor origin: the pass's entry, else code-server's pages for a person in the editor. */
export async function editorRequest(
  ctx: ServeContext,
  sandboxes: SandboxProvider,
  req: IncomingMessage,
  res: ServerResponse,
  label: string,
): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://editor');
  if (url.pathname === `${PREVIEW_OWN_PATH}enter` && req.method === 'GET') {
    const pass = passes.check(url.searchParams.get('pass') ?? undefined, 'enter', label, Date.now());
    if (typeof pass === 'string') return previewPage(res, 403, 'Refused', pass);
    const secure = previewBase(ctx).startsWith('https:') ? '; Secure' : '';
    res.writeHead(303, {
      location: '/?folder=/workspace',
      'cache-control': 'no-store',
      'set-cookie': `${EDITOR_COOKIE}=${passes.issue('cookie', pass, Date.now())}; HttpOnly; SameSite=Lax; Path=/; Max-Age=${PREVIEW_LIMITS.cookieTtlMs / 1000}${secure}`,
    });
    return void res.end();
  }
  const ok = await admitted(ctx, sandboxes, req, label);
  if (!('pass' in ok)) return previewPage(res, ok.status, 'No editor', ok.why);
  editorsOf(sandboxes).touch(ok.pass.sessionId);
  const origin = editorOrigin(previewBase(ctx), ok.pass.sessionId);
  await forwardRequest(req, res, {
    headers: appHeaders(req.headers, EDITOR_PORT, origin),
    connect: { agent: ok.editor.agent },
    onError: (why) => previewPage(res, 502, 'The editor did not answer', why),
  });
}

/**
 * A WebSocket to an editor origin (the workbench's connection to its
 * server): from a page of this very origin, with the checks of its
 * requests, carried byte for byte over its own `drydock-port` exec.
 * Messages from the browser longer than a keep-alive count as the person's doing.
 */
export async function editorSocketUpgrade(
  ctx: ServeContext,
  sandboxes: SandboxProvider,
  req: IncomingMessage,
  raw: Duplex,
  head: Buffer,
  label: string,
): Promise<void> {
  raw.on('error', () => raw.destroy());
  try {
    let originLabel: string | undefined;
    try {
      originLabel = editorLabelOf(new URL(header(req, 'origin') ?? '').host, previewBase(ctx));
    } catch {
      originLabel = undefined;
    }
    if (originLabel !== label) return refuseUpgrade(raw, 403, "an editor's socket opens from the editor's own pages");
    const ok = await admitted(ctx, sandboxes, req, label);
    if (!('pass' in ok)) return refuseUpgrade(raw, ok.status, ok.why);
    const { sessionId } = ok.pass;
    const editor = await appConnection(sandboxes, ok.editor.sandbox, EDITOR_PORT);
    editor.write(upgradeRequestHead(req, EDITOR_PORT, editorOrigin(previewBase(ctx), sessionId)));
    if (head.length) editor.write(head);
    raw.on('data', (chunk: Buffer) => {
      if (chunk.length >= EDITOR_LIMITS.activityBytes) editorsOf(sandboxes).touch(sessionId);
    });
    carryUpgrade(raw, editor);
  } catch (err) {
    if (!(err instanceof HttpError)) ctx.log.error({ err }, 'editor socket failed');
    refuseUpgrade(raw, err instanceof HttpError ? err.status : 502, 'the editor could not be reached');
  }
}
