/**
 * GET /api/sessions/:id/attach with `Upgrade: drydock-attach` and a bearer
 * token (`drydock attach --server`): attaches as the token's owner, bridges
 * the connection to a shell in the sandbox through the provider this server
 * reaches, and detaches when either side ends, so a client that vanishes does
 * not leave the session paused; counted with the console's terminal sockets
 * (ctx.terminals), so the detach waits for the last shell of the session.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { WebSocket, WebSocketServer } from 'ws';
import { WorkflowNotFoundError } from '@temporalio/client';
import {
  ATTACH_PROTOCOL,
  AttachRefused,
  bridgeShell,
  boundedSize,
  reachableSandbox,
  requestAttach,
  requestDetach,
  sandboxOf,
  type SandboxProvider,
  type TerminalPresence,
} from '../../sandbox';
import { readableStatus, steeringRefused } from '../access';
import { header, HttpError, type ServeContext } from '../http';

const ATTACH_PATH = /^\/api\/sessions\/([^/]+)\/attach$/;

/** Whether an Upgrade request is for the attach endpoint (others are refused). */
export function isAttachUpgrade(req: IncomingMessage): boolean {
  const path = new URL(req.url ?? '/', 'http://drydock').pathname;
  return ATTACH_PATH.test(path);
}

export async function attachUpgrade(
  ctx: ServeContext,
  sandboxes: SandboxProvider,
  req: IncomingMessage,
  socket: Duplex,
): Promise<void> {
  let presence: { id: string; joined: TerminalPresence } | undefined;
  try {
    const { id, by, size } = await checkRequest(ctx, req);
    // The roles: a session `by` may not read is not there; steering it needs an approver or its requester.
    const refused = await steeringRefused(ctx, by, await readableStatus(ctx, id, by));
    if (refused) throw new HttpError(403, refused);
    const name = await reachableSandbox(ctx.client, sandboxes, id);
    presence = { id, joined: ctx.terminals.join(id, by) }; // counted before the attach is asked for
    await presence.joined.attach(by, () => requestAttach(ctx.client, id, by));
    const shell = await sandboxOf(sandboxes, name).commands.shell(size);
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${ATTACH_PROTOCOL}\r\nConnection: Upgrade\r\n\r\n`);
    ctx.log.info({ sessionId: id, by, sandbox: name }, 'attached through serve');
    await bridgeShell(socket, shell);
  } catch (err) {
    answerUpgrade(ctx, socket, err);
  } finally {
    // The last shell of the session to leave detaches (a console tab of the same person may still be in).
    const at = presence;
    if (at) await at.joined.leave(false, (attachedBy) => detachQuietly(ctx, at.id, attachedBy));
  }
}

async function checkRequest(ctx: ServeContext, req: IncomingMessage) {
  const url = new URL(req.url ?? '/', 'http://drydock');
  if (req.method !== 'GET') throw new HttpError(405, 'attach is GET with Upgrade');
  if (header(req, 'upgrade')?.toLowerCase() !== ATTACH_PROTOCOL) {
    throw new HttpError(426, `send Upgrade: ${ATTACH_PROTOCOL}`);
  }
  // The bearer header only: a page's cookie must not open a shell.
  const bearer = /^Bearer\s+(\S+)$/i.exec(header(req, 'authorization') ?? '')?.[1];
  const by = bearer ? (await ctx.identities.identify(bearer))?.name : undefined;
  if (!by) throw new HttpError(401, 'a valid bearer token is required');
  const id = sessionIdOf(url.pathname);
  const size = boundedSize({ cols: Number(url.searchParams.get('cols')), rows: Number(url.searchParams.get('rows')) });
  return { id, by, size };
}

function sessionIdOf(pathname: string): string {
  try {
    return decodeURIComponent(ATTACH_PATH.exec(pathname)![1]);
  } catch {
    throw new HttpError(400, 'the session id in the path is not valid percent-encoding');
  }
}

/** An error before the Upgrade is an HTTP answer on the raw socket; after it, the connection just ends. */
function answerUpgrade(ctx: ServeContext, socket: Duplex, err: unknown): void {
  const status =
    err instanceof HttpError
      ? err.status
      : err instanceof AttachRefused
        ? 409
        : err instanceof WorkflowNotFoundError
          ? 404
          : 500;
  const message = status === 500 ? 'internal error' : (err as Error).message;
  if (status === 500) ctx.log.error({ err }, 'attach failed');
  else ctx.log.info({ status, reason: message }, 'attach refused');
  if (!socket.writable) return;
  const body = JSON.stringify({ error: message });
  socket.end(
    `HTTP/1.1 ${status} ${status === 409 ? 'Conflict' : 'Error'}\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/**
 * A browser's Upgrade to one of serve's sockets (terminal, desktop): `check` reads the request (its
 * refusal is answered on the raw socket), then the WebSocket handshake; ws answers a malformed one
 * itself (400) and never calls back, so the raw socket's close ends the wait. Undefined: no socket.
 */
export async function checkedUpgrade<T>(
  ctx: ServeContext,
  sockets: WebSocketServer,
  upgrade: { req: IncomingMessage; raw: Duplex; head: Buffer },
  check: (ctx: ServeContext, req: IncomingMessage) => Promise<T>,
): Promise<{ socket: WebSocket; checked: T } | undefined> {
  const { req, raw, head } = upgrade;
  let checked: T;
  try {
    checked = await check(ctx, req);
  } catch (err) {
    answerUpgrade(ctx, raw, err);
    return undefined;
  }
  const socket = await new Promise<WebSocket | undefined>((resolve) => {
    raw.once('close', () => resolve(undefined));
    sockets.handleUpgrade(req, raw, head, resolve);
  });
  return socket && { socket, checked };
}

async function detachQuietly(ctx: ServeContext, id: string, by: string): Promise<void> {
  try {
    const detached = await requestDetach(ctx.client, id, by);
    ctx.log.info({ sessionId: id, by, durationMs: detached.durationMs }, 'detached through serve');
  } catch (err) {
    // Already detached (by someone else, or the session ended): nothing to undo.
    ctx.log.info({ sessionId: id, by, reason: (err as Error).message }, 'detach after the shell ended refused');
  }
}
