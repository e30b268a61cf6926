/**
 * The console's terminal: GET /sessions/:id/terminal (the page, with a ticket
 * for its socket) and GET /sessions/:id/terminal/socket (a WebSocket). The
 * socket is `drydock attach` for a browser: the same roles (an approver or
 * the requester), the same `attach`/`detach` updates (the agent waits; the
 * edits are committed, verified and reviewed again), the same shell and
 * escape filter; besides, every batch of keystrokes is an `attach.input` row
 * of the audit trail under the signed-in person's name, written after its
 * keys reached the shell (a crash of serve loses the batch under way)
 * (sandbox/web-terminal.ts holds the protocol and its limits).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { readFile } from 'node:fs/promises';
import type WebSocket from 'ws';
import type { WebSocketServer } from 'ws';
import { AttachRefused, boundedSize, reachableSandbox, requestAttach, requestDetach } from '../../sandbox/attach';
import { handOver } from '../../workflows/api';
import { sandboxOf } from '../../sandbox/handle';
import type { SandboxProvider } from '../../sandbox/provider';
import { bridgeWebTerminal, CLOSE, TerminalTickets, type InputBatch } from '../../sandbox/web-terminal';
import type { Person } from '../../sandbox/shared-shell';
import { readableStatus, steeringRefused } from '../access';
import { terminalPage } from '../console/terminal';
import { consoleUrl, header, HttpError, identify, sendHtml, type ServeContext } from '../http';
import { checkedUpgrade } from './attach';

const SOCKET_PATH = /^\/sessions\/([^/]+)\/terminal\/socket$/;

/** This process's tickets: a page served by this serve opens a socket on it within a minute. */
const tickets = new TerminalTickets();

/**
 * GET /sessions/:id/terminal: the page, for a person who may attach (403
 * naming the role otherwise); with `?watch=1`, the watcher's page, for
 * anyone who reads the session.
 */
export async function terminalPageRoute(
  ctx: ServeContext,
  res: ServerResponse,
  id: string,
  who: string,
  watch = false,
) {
  const s = await readableStatus(ctx, id, who);
  const refused = watch ? undefined : await steeringRefused(ctx, who, s);
  if (refused) throw new HttpError(403, `${refused}; anyone who reads the session may watch (?watch=1)`);
  const nonce = randomBytes(16).toString('base64');
  sendHtml(res, 200, terminalPage(s, { who, nonce, ticket: tickets.issue(id, who, Date.now()), watch }), nonce);
}

/** GET /assets/xterm/xterm.js and xterm.css: xterm.js from the project's node_modules (no CDN). */
export async function xtermAsset(res: ServerResponse, name: string): Promise<void> {
  const file = name === 'xterm.js' ? '@xterm/xterm/lib/xterm.js' : '@xterm/xterm/css/xterm.css';
  const type = name === 'xterm.js' ? 'text/javascript' : 'text/css';
  res.writeHead(200, { 'content-type': `${type}; charset=utf-8`, 'cache-control': 'public, max-age=86400' });
  res.end(await readFile(require.resolve(file)));
}

/** Whether an Upgrade request is for a terminal socket. */
export function isTerminalUpgrade(req: IncomingMessage): boolean {
  return SOCKET_PATH.test(new URL(req.url ?? '/', 'http://drydock').pathname);
}

/**
 * Why the request's Origin is not the console's own; undefined when it is:
 * the console's configured URL, or the very host the request was sent to.
 * A browser always sends Origin on a WebSocket; a request without one is refused.
 */
export function originRefusal(req: IncomingMessage, console: string): string | undefined {
  const origin = header(req, 'origin');
  if (!origin) return 'a terminal socket needs an Origin header (open it from the console)';
  let host: string;
  try {
    host = new URL(origin).host;
  } catch {
    return `the Origin ${origin} is not a URL`;
  }
  if (origin === new URL(console).origin || host === header(req, 'host')) return undefined;
  return `the Origin ${origin} is not this console's: open the terminal from the console's own page`;
}

/**
 * The checks every console socket (terminal, desktop) makes before its Upgrade, answered over HTTP:
 * GET, the console's Origin, a signed-in person, the session in the path, that person's ticket for it.
 */
export async function ticketedSocket(
  ctx: ServeContext,
  req: IncomingMessage,
  socket: { kind: 'terminal' | 'desktop' | 'editor'; path: RegExp; tickets: TerminalTickets },
) {
  const url = new URL(req.url ?? '/', 'http://drydock');
  if (req.method !== 'GET') throw new HttpError(405, `a ${socket.kind} socket is GET with Upgrade: websocket`);
  const badOrigin = originRefusal(req, consoleUrl(ctx.config));
  if (badOrigin) throw new HttpError(403, badOrigin);
  const who = await identify(req, ctx.identities);
  if (!who) throw new HttpError(401, 'sign in first');
  let id: string;
  try {
    id = decodeURIComponent(socket.path.exec(url.pathname)![1]);
  } catch {
    throw new HttpError(400, 'the session id in the path is not valid percent-encoding');
  }
  const badTicket = socket.tickets.refusal(url.searchParams.get('ticket'), id, who, Date.now());
  if (badTicket) throw new HttpError(403, badTicket.replace(/terminal/g, socket.kind));
  return { url, who, id };
}

/** The checks before the Upgrade, answered over HTTP: who, from where, with which ticket, with which role. */
async function checkTerminalRequest(ctx: ServeContext, req: IncomingMessage) {
  const { url, who, id } = await ticketedSocket(ctx, req, { kind: 'terminal', path: SOCKET_PATH, tickets });
  const watch = url.searchParams.get('watch') === '1';
  const s = await readableStatus(ctx, id, who); // a watcher needs only to read the session
  const refused = watch ? undefined : await steeringRefused(ctx, who, s);
  if (refused) throw new HttpError(403, refused);
  if (!ctx.audit)
    throw new HttpError(503, 'the terminal needs the audit trail (drydock serve opens it with its database)');
  const size = boundedSize({ cols: Number(url.searchParams.get('cols')), rows: Number(url.searchParams.get('rows')) });
  return { id, who, size, watch };
}

/** An Upgrade to a terminal socket: checked, then attached, bridged and detached. */
export async function terminalUpgrade(
  ctx: ServeContext,
  sandboxes: SandboxProvider,
  sockets: WebSocketServer,
  req: IncomingMessage,
  raw: Duplex,
  head: Buffer,
): Promise<void> {
  const upgraded = await checkedUpgrade(ctx, sockets, { req, raw, head }, checkTerminalRequest);
  if (!upgraded) return;
  const { socket, checked } = upgraded;
  if (checked.watch) await watchingTerminal(ctx, socket, checked);
  else await attachedTerminal(ctx, sandboxes, socket, checked);
}

/** Who is in the session (the terminal, VS Code, the desktop), told to one socket. */
export const presenceTo = (socket: WebSocket) => (people: Person[]) => control(socket, { type: 'presence', people });

/**
 * A watcher: the session's shared shell, output only, for anyone who reads
 * the session. Watching attaches nothing (the agent does not wait for a
 * watcher); with nobody in the sandbox's terminal there is nothing to watch.
 */
async function watchingTerminal(ctx: ServeContext, socket: WebSocket, { id, who }: { id: string; who: string }) {
  const shared = ctx.shells.get(id);
  if (!shared) {
    control(socket, { type: 'refused', reason: "nobody is in the sandbox's terminal now: watch once someone is" });
    return socket.close(CLOSE.refused);
  }
  control(socket, { type: 'watching', sandbox: id });
  ctx.log.info({ sessionId: id, by: who }, 'watching the console terminal');
  const view = shared.join({ who, watching: true });
  const leave = ctx.people.join(id, { who, way: 'terminal', watching: true }, presenceTo(socket));
  const end = await bridgeWebTerminal(socket, view, { audit: async () => undefined, watchOnly: true }).finally(leave);
  control(socket, {
    type: 'detached',
    reason: end === 'shell-ended' ? 'nobody is in the sandbox any more' : 'stopped watching',
  });
  if (socket.readyState === socket.OPEN) socket.close(CLOSE.normal, 'stopped watching');
}

const control = (socket: WebSocket, message: Record<string, unknown>) => {
  if (socket.readyState === socket.OPEN) socket.send(JSON.stringify(message));
};

/**
 * The open socket: attach (the agent's step under way ends first), the shell,
 * then the detach, sent only when no other socket of the session is left
 * (SessionTerminals: a second tab or a reload's new socket keeps it), or
 * at once when this one asked for it, which ends the others (M2).
 */
async function attachedTerminal(
  ctx: ServeContext,
  sandboxes: SandboxProvider,
  socket: WebSocket,
  { id, who, size }: { id: string; who: string; size: { cols: number; rows: number } },
): Promise<void> {
  const presence = ctx.terminals.join(id, who); // counted before the attach is asked for
  let asked = false;
  let leave: () => void = () => undefined;
  try {
    const name = await reachableSandbox(ctx.client, sandboxes, id);
    control(socket, { type: 'waiting' });
    await presence.attach(who, () => requestAttach(ctx.client, id, who));
    if (presence.signal.aborted) socket.close(CLOSE.normal, String(presence.signal.reason));
    if (socket.readyState !== socket.OPEN) return; // the page went away while the step ended
    // One shell per session, shared by everyone in it (each person's keys audited under their name).
    const shared = await ctx.shells.getOrOpen(id, () => sandboxOf(sandboxes, name).commands.shell(size));
    const shell = shared.join({ who, watching: false });
    leave = ctx.people.join(id, { who, way: 'terminal', watching: false }, presenceTo(socket));
    control(socket, { type: 'attached', by: who, sandbox: name });
    ctx.log.info({ sessionId: id, by: who, sandbox: name }, 'attached through the console terminal');
    const connection = randomUUID();
    const end = await bridgeWebTerminal(socket, shell, {
      audit: (batch) => auditInput(ctx, { id, who, sandbox: name, connection }, batch),
      signal: presence.signal,
    });
    asked = end === 'detach';
    ctx.log.info({ sessionId: id, by: who, end }, 'console terminal ended');
  } catch (err) {
    const refused = err instanceof AttachRefused;
    if (!refused) ctx.log.error({ err, sessionId: id }, 'console terminal failed');
    control(socket, { type: 'refused', reason: refused ? err.message : 'internal error' });
    socket.close(refused ? CLOSE.refused : CLOSE.failed);
  } finally {
    leave();
    const detached = await presence.leave(
      asked,
      (by) => detachAndSay(ctx, socket, id, by),
      (from, to) => handOverAndSay(ctx, id, from, to),
    );
    if (!detached && socket.readyState === socket.OPEN) {
      socket.close(CLOSE.normal, 'left; the session stays attached while another terminal of it is open');
    }
  }
}

async function auditInput(
  ctx: ServeContext,
  at: { id: string; who: string; sandbox: string; connection: string },
  batch: InputBatch,
): Promise<void> {
  await ctx.audit!.append({
    sessionId: at.id,
    key: `terminal/${at.connection}/${batch.seq}`,
    kind: 'attach.input',
    actor: at.who,
    data: { via: 'console terminal', sandbox: at.sandbox, connection: at.connection, ...batch },
  });
}

/** The session goes on; the page hears how long the person was in (or why the detach was refused). */
async function detachAndSay(ctx: ServeContext, socket: WebSocket, id: string, who: string): Promise<void> {
  try {
    const detached = await requestDetach(ctx.client, id, who);
    ctx.log.info({ sessionId: id, by: who, durationMs: detached.durationMs }, 'detached through the console terminal');
    control(socket, { type: 'detached', durationMs: detached.durationMs });
  } catch (err) {
    // Already detached (by someone else, or the session ended): nothing to undo.
    ctx.log.info({ sessionId: id, by: who, reason: (err as Error).message }, 'detach after the terminal refused');
    control(socket, { type: 'detached', reason: (err as Error).message });
  }
  if (socket.readyState === socket.OPEN) socket.close(CLOSE.normal, 'detached');
}

/** The person attached left, another stays: the attach is theirs now (if the workflow refuses, it stays as it was). */
async function handOverAndSay(ctx: ServeContext, id: string, from: string, to: string): Promise<boolean> {
  try {
    await ctx.client.workflow.getHandle(id).executeUpdate(handOver, { args: [{ from, to }] });
    ctx.log.info({ sessionId: id, from, to }, 'the attach was handed over in the console terminal');
    return true;
  } catch (err) {
    ctx.log.warn({ sessionId: id, from, to, reason: (err as Error).message }, 'the attach was not handed over');
    return false;
  }
}
