/**
 * What the routes of `drydock serve` share: their dependencies, the error that
 * becomes an answer, reading bodies, identifying the caller, writing answers.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Pool } from 'pg';
import type { Registry } from 'prom-client';
import type { Identities } from '../identity/identities';
import type { ArtifactStore } from '../store/artifacts';
import type { AuditTrail } from '../store/audit';
import type { Config } from '../platform/config';
import type { GitHubSettings } from '../github/client';
import type { ForgeSet } from '../forge/registry';
import type { Logger } from '../platform/log';
import type { RepoLookupService } from '../repos/registry';
import type { ReviewTimes } from '../review/review-time';
import { getStatus } from '../platform/sessions';
import type { SessionStatus } from '../workflows/api';
import type { SessionTerminals } from '../sandbox/web-terminal';
import type { SessionPeople, SessionShells } from '../sandbox/shared-shell';

/** The console's cookie: a token, as `Authorization: Bearer` carries (a sign-in's personal token, or a pasted one). */
export const COOKIE = 'drydock_token';

/** An answer with a status code; thrown anywhere in a handler. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** Headers of the answer besides the JSON ones (429's Retry-After). */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** Everything a route needs, built once per handler. */
export interface ServeContext {
  config: Config;
  client: Client;
  log: Logger;
  /** People, machines and their tokens; the identities file; OpenID Connect sign-in. */
  identities: Identities;
  repos: RepoLookupService;
  artifacts: ArtifactStore;
  /** The server's GitHub credentials (its pilots read pull requests with them). */
  github: GitHubSettings;
  /** The forges, with the server's credentials: checks before a trigger starts, and answers when it may not. */
  forges: ForgeSet;
  /** Where webhook deliveries that start a session are recorded. */
  audit?: AuditTrail;
  /** The database of the report page. */
  pool?: Pool;
  /** Where review time is kept (with the database). */
  reviews?: ReviewTimes;
  /** Sessions by phase, for Prometheus (GET /metrics). */
  sessionMetrics: Registry;
  /** The shells this process bridges per session (console sockets, `drydock attach --server`): the last to leave detaches. */
  terminals: SessionTerminals;
  /** The console terminals' shells, one per session, shared by everyone in it (sandbox/shared-shell.ts). */
  shells: SessionShells;
  /** Who is in each session, by any way in (terminal, editor, desktop), told to each of their pages. */
  people: SessionPeople;
}

export function consoleUrl(config: Pick<Config, 'DRYDOCK_CONSOLE_URL' | 'DRYDOCK_HTTP_HOST' | 'DRYDOCK_HTTP_PORT'>) {
  if (config.DRYDOCK_CONSOLE_URL) return config.DRYDOCK_CONSOLE_URL.replace(/\/$/, '');
  const host = config.DRYDOCK_HTTP_HOST.includes(':') ? `[${config.DRYDOCK_HTTP_HOST}]` : config.DRYDOCK_HTTP_HOST;
  return `http://${host}:${config.DRYDOCK_HTTP_PORT}`;
}

/** The body, up to `maxBody` bytes; over it → 413 without reading the rest. */
export async function readBody(req: IncomingMessage, maxBody: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (declared > maxBody) throw new HttpError(413, `body over ${maxBody} bytes`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > maxBody) throw new HttpError(413, `body over ${maxBody} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

export function parseJson(body: Buffer): any {
  try {
    return JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw new HttpError(400, `body is not JSON: ${(err as Error).message}`);
  }
}

/** The caller's name from `Authorization: Bearer` or the console cookie; undefined when neither is valid. */
export async function identify(req: IncomingMessage, identities: Identities): Promise<string | undefined> {
  return (await identities.identify(tokenOf(req)))?.name;
}

/** The bearer token, else the console cookie's. */
export function tokenOf(req: IncomingMessage): string | undefined {
  return /^Bearer\s+(\S+)$/i.exec(header(req, 'authorization') ?? '')?.[1] ?? cookieOf(req, COOKIE);
}

/** Cookie-authenticated writes need a JSON body: a cross-site form cannot send one. */
export function requireJsonRequest(req: IncomingMessage): void {
  if (!/^application\/json\b/i.test(header(req, 'content-type') ?? '')) {
    throw new HttpError(415, 'send Content-Type: application/json');
  }
}

export async function statusOr404(client: Client, id: string): Promise<SessionStatus> {
  try {
    return await getStatus(client, id);
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) throw new HttpError(404, `no session ${id}`);
    throw err;
  }
}

export function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

export function cookieOf(req: IncomingMessage, name: string): string | undefined {
  return cookiesOf(req, name)[0];
}

/** Every value of cookie `name` the browser sent (one set for a parent domain comes along too). */
export function cookiesOf(req: IncomingMessage, name: string): string[] {
  const values: string[] = [];
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key !== name) continue;
    try {
      values.push(decodeURIComponent(value.join('=')));
    } catch {
      // Not percent-encoded as a cookie of ours is: not ours.
    }
  }
  return values;
}

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { ...headers, 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' });
  res.end(JSON.stringify(body));
}

/** `images`: more sources for img-src (the desktop's noVNC draws its JPEG rectangles from `data:` images). */
export function sendHtml(
  res: ServerResponse,
  status: number,
  html: string,
  nonce?: string,
  opts: { images?: string } = {},
): void {
  res.writeHead(status, {
    'content-type': 'text/html; charset=utf-8',
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'content-security-policy': `default-src 'none'; img-src 'self'${opts.images ? ` ${opts.images}` : ''}; media-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'${nonce ? `; script-src 'nonce-${nonce}'` : ''}`,
  });
  res.end(html);
}
