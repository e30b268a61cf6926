/**
 * The console's desktop: GET /sessions/:id/desktop (the page, with a ticket
 * for its socket), GET /sessions/:id/desktop/socket (a WebSocket carrying
 * VNC) and GET /assets/novnc/... (noVNC's modules from node_modules). The
 * rules of the terminal's socket (workers/routes/terminal.ts): an approver or
 * the requester, the console's Origin, a ticket of this serve for this
 * person and session, the audit trail. Opening it does not pause the agent:
 * the desktop shows the app and the agent's browser, it changes no file the
 * session commits. Each viewer's connection is a `desktop` row of the audit
 * trail under their name (opened; then closed, with how long and how much
 * input). The companion and its bridge: sandbox/desktop.ts.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import type WebSocket from 'ws';
import type { WebSocketServer } from 'ws';
import { AttachRefused, reachableSandbox } from '../../sandbox/attach';
import { browserContainerName } from '../../sandbox/activities/container';
import {
  bridgeDesktop,
  desktopContainerName,
  DesktopRefused,
  SessionDesktops,
  startDesktop,
  VNC_BRIDGE,
} from '../../sandbox/desktop';
import type { SandboxProvider } from '../../sandbox/provider';
import { CLOSE, TerminalTickets } from '../../sandbox/web-terminal';
import { baseImageTag } from '../../sandbox-images/base-image';
import { ensureDesktopImage } from '../../sandbox-images/desktop-image';
import { readableStatus, steeringRefused } from '../access';
import { desktopPage } from '../console/desktop';
import { HttpError, sendHtml, type ServeContext } from '../http';
import { checkedUpgrade } from './attach';
import { ticketedSocket } from './terminal';

const SOCKET_PATH = /^\/sessions\/([^/]+)\/desktop\/socket$/;

/** This process's tickets for desktop sockets (a key of their own: a terminal's ticket opens no desktop). */
const tickets = new TerminalTickets();

/** GET /sessions/:id/desktop: the page, for a person who may steer the session (403 naming the role otherwise). */
export async function desktopPageRoute(ctx: ServeContext, res: ServerResponse, id: string, who: string) {
  const s = await readableStatus(ctx, id, who);
  const refused = await steeringRefused(ctx, who, s);
  if (refused) throw new HttpError(403, refused);
  const nonce = randomBytes(16).toString('base64');
  // noVNC draws JPEG rectangles through data: images; nothing else of the page's CSP changes.
  sendHtml(res, 200, desktopPage(s, { who, nonce, ticket: tickets.issue(id, who, Date.now()) }), nonce, {
    images: 'data:',
  });
}

/** noVNC's package folder (its exports name only core/rfb.js, so its package.json cannot be resolved). */
const novncRoot = () => path.resolve(path.dirname(require.resolve('@novnc/novnc')), '..');
/** noVNC's ES modules: its core and vendored pako, by a plain relative path. */
const NOVNC_FILE = /^(core|vendor)\/(?:[A-Za-z0-9_-]+\/)*[A-Za-z0-9_.-]+\.js$/;

/** Whether a path under /assets/novnc/ names one of noVNC's modules. */
export function isNovncFile(rel: string): boolean {
  return NOVNC_FILE.test(rel) && !rel.split('/').some((part) => part === '..' || part.startsWith('.'));
}

/** GET /assets/novnc/<core|vendor>/....js: noVNC from the project's node_modules (no CDN, no bundle). */
export async function novncAsset(res: ServerResponse, rel: string): Promise<void> {
  if (!isNovncFile(rel)) throw new HttpError(404, 'no such noVNC module');
  const body = await readFile(path.join(novncRoot(), rel)).catch(() => undefined);
  if (!body) throw new HttpError(404, 'no such noVNC module');
  res.writeHead(200, {
    'content-type': 'text/javascript; charset=utf-8',
    'cache-control': 'public, max-age=86400',
    'x-content-type-options': 'nosniff',
  });
  res.end(body);
}

/** Whether an Upgrade request is for a desktop socket. */
export function isDesktopUpgrade(req: IncomingMessage): boolean {
  return SOCKET_PATH.test(new URL(req.url ?? '/', 'http://drydock').pathname);
}

/** The checks before the Upgrade, answered over HTTP: who, from where, with which ticket, with which role. */
async function checkDesktopRequest(ctx: ServeContext, req: IncomingMessage) {
  const { who, id } = await ticketedSocket(ctx, req, { kind: 'desktop', path: SOCKET_PATH, tickets });
  const refused = await steeringRefused(ctx, who, await readableStatus(ctx, id, who));
  if (refused) throw new HttpError(403, refused);
  if (!ctx.audit)
    throw new HttpError(503, 'the desktop needs the audit trail (drydock serve opens it with its database)');
  return { id, who };
}

/** The desktops this process started, per provider (one provider per serve). */
let desktops: SessionDesktops | undefined;
function desktopsOf(sandboxes: SandboxProvider): SessionDesktops {
  desktops ??= new SessionDesktops(
    async (sandbox) => void (await sandboxes.destroy(desktopContainerName(sandbox))),
    // A browser check may be drawing on it: kept until the check's container is gone.
    (sandbox) => sandboxes.exists(browserContainerName(sandbox)),
  );
  return desktops;
}

/** An Upgrade to a desktop socket: checked, then the desktop started and bridged. */
export async function desktopUpgrade(
  ctx: ServeContext,
  sandboxes: SandboxProvider,
  sockets: WebSocketServer,
  req: IncomingMessage,
  raw: Duplex,
  head: Buffer,
): Promise<void> {
  const upgraded = await checkedUpgrade(ctx, sockets, { req, raw, head }, checkDesktopRequest);
  if (upgraded) await shownDesktop(ctx, sandboxes, upgraded.socket, upgraded.checked);
}

/** The open socket: the desktop made (or found), one VNC connection bridged, each end audited. */
async function shownDesktop(
  ctx: ServeContext,
  sandboxes: SandboxProvider,
  socket: WebSocket,
  { id, who }: { id: string; who: string },
): Promise<void> {
  const connection = randomUUID();
  const opened = Date.now();
  let sandbox: string | undefined;
  // Shown on the terminal's and the editor's pages; this page's socket carries VNC alone, so it lists nobody.
  let leave: () => void = () => undefined;
  try {
    sandbox = await reachableSandbox(ctx.client, sandboxes, id);
    desktopsOf(sandboxes).join(sandbox);
    const image = await ensureDesktopImage(ctx.config.DRYDOCK_BASE_IMAGE ?? (await baseImageTag()), (line) =>
      ctx.log.info({ sessionId: id }, line),
    );
    const egressDir = path.join(ctx.config.DRYDOCK_DATA_DIR, 'desktop-no-egress');
    await mkdir(egressDir, { recursive: true, mode: 0o755 });
    const name = await startDesktop(sandboxes, sandbox, { image, egressDir });
    if (socket.readyState !== socket.OPEN) return;
    await audit(ctx, id, who, `desktop/${connection}/open`, { event: 'opened', sandbox, connection });
    ctx.log.info({ sessionId: id, by: who, desktop: name }, 'desktop opened in the console');
    const vnc = await sandboxes.attach(name, VNC_BRIDGE);
    leave = ctx.people.join(id, { who, way: 'desktop', watching: false }, () => undefined);
    const { end, use } = await bridgeDesktop(socket, vnc);
    const data = { event: 'closed', sandbox, connection, durationMs: Date.now() - opened, ...use };
    await audit(ctx, id, who, `desktop/${connection}/close`, {
      ...data,
      end: typeof end === 'string' ? end : end.reason,
    });
  } catch (err) {
    const refused = err instanceof DesktopRefused || err instanceof AttachRefused;
    if (!refused) ctx.log.error({ err, sessionId: id }, 'console desktop failed');
    if (socket.readyState === socket.OPEN) {
      socket.close(
        refused ? CLOSE.refused : CLOSE.failed,
        refused ? (err as Error).message.slice(0, 120) : 'internal error',
      );
    }
  } finally {
    leave();
    if (sandbox) desktopsOf(sandboxes).leave(sandbox);
  }
}

async function audit(ctx: ServeContext, id: string, who: string, key: string, data: Record<string, unknown>) {
  await ctx.audit!.append({
    sessionId: id,
    key,
    kind: 'desktop',
    actor: who,
    data: { via: 'console desktop', ...data },
  });
}
