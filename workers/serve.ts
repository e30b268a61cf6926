/**
 * `drydock serve`: one HTTP process for the triggers and the people.
 *   POST /webhooks/github   GitHub deliveries (X-Hub-Signature-256 over the raw body)
 *   POST /webhooks/ci       a generic CI trigger (X-Drydock-Signature-256, same scheme)
 *   /api/sessions...        the JSON API, bearer tokens mapped to people
 *   /                       the review console (same tokens, as a cookie)
 * It answers within seconds: verify, start or find the session, return.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import path from 'node:path';
import {
  WorkflowExecutionAlreadyStartedError,
  WorkflowIdConflictPolicy,
  WorkflowIdReusePolicy,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  type Client,
} from '@temporalio/client';
import { loadApiTokens, type ApiTokens } from '../lib/access';
import { ArtifactStore } from '../lib/artifacts';
import type { Config } from '../lib/config';
import type { Logger } from '../lib/log';
import { createRepoLookup, type RepoLookupService } from '../lib/repos';
import { getStatus, listSessions } from '../lib/sessions';
import { sessionLink } from '../lib/temporal';
import { AuditTrail } from '../lib/audit';
import { openDatabase } from '../lib/db';
import { buildReport, windowStart } from '../lib/report';
import type { Pool } from 'pg';
import { redactorOf } from '../lib/scrub';
import { routeGitHubEvent, signatureMatches, type StartTrigger } from '../lib/webhooks';
import {
  ACTIONS,
  decide,
  PHASE_ATTRIBUTE,
  PR_CLOSED_WORKFLOW_TYPE,
  REPO_ATTRIBUTE,
  WORKFLOW_TYPE,
  type DecideInput,
  type PullRequestClosed,
  type SessionStatus,
} from '../workflows/api';
import { parseSessionInput, type SessionInputDraft } from '../workflows/input';
import { listPage, loginPage, metricsPage, sessionPage } from './console';

const COOKIE = 'drydock_token';

/** An answer with a status code; thrown anywhere in a handler. */
class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export interface ServeDeps {
  config: Config;
  client: Client;
  log: Logger;
  tokens?: ApiTokens;
  repos?: RepoLookupService;
  /** Where webhook deliveries that start a session are recorded (startServer opens one). */
  audit?: AuditTrail;
  /** The database of the metrics page (startServer opens one). */
  pool?: Pool;
}

export function consoleUrl(config: Pick<Config, 'DRYDOCK_CONSOLE_URL' | 'DRYDOCK_HTTP_HOST' | 'DRYDOCK_HTTP_PORT'>) {
  if (config.DRYDOCK_CONSOLE_URL) return config.DRYDOCK_CONSOLE_URL.replace(/\/$/, '');
  const host = config.DRYDOCK_HTTP_HOST.includes(':') ? `[${config.DRYDOCK_HTTP_HOST}]` : config.DRYDOCK_HTTP_HOST;
  return `http://${host}:${config.DRYDOCK_HTTP_PORT}`;
}

/** The request handler, separate from listening so tests and `drydock up` share it. */
export function createHandler(deps: ServeDeps) {
  const { config, client, log } = deps;
  const tokens = deps.tokens ?? loadApiTokens(config);
  const repos = deps.repos ?? createRepoLookup(config);
  const artifacts = new ArtifactStore(path.join(config.DRYDOCK_DATA_DIR, 'artifacts'));
  const maxBody = config.DRYDOCK_HTTP_MAX_BODY;

  /** The body, up to the limit; over it → 413 without reading the rest. */
  async function readBody(req: IncomingMessage): Promise<Buffer> {
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

  function parseJson(body: Buffer): any {
    try {
      return JSON.parse(body.toString('utf8'));
    } catch (err) {
      throw new HttpError(400, `body is not JSON: ${(err as Error).message}`);
    }
  }

  /**
   * Starts a session under a deterministic id, once: a running one is reused
   * (USE_EXISTING) and a closed one is not started again (REJECT_DUPLICATE),
   * so a redelivery days later starts nothing. With `failIfExists` any
   * existing session is an error instead.
   */
  async function startOnce(sessionId: string, input: SessionInputDraft, repoUrl: string, failIfExists = false) {
    try {
      await client.workflow.start(WORKFLOW_TYPE, {
        workflowId: sessionId,
        taskQueue: config.DRYDOCK_TASK_QUEUE,
        args: [input],
        workflowIdConflictPolicy: failIfExists ? WorkflowIdConflictPolicy.FAIL : WorkflowIdConflictPolicy.USE_EXISTING,
        workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
        typedSearchAttributes: [
          { key: PHASE_ATTRIBUTE, value: 'provisioning' },
          { key: REPO_ATTRIBUTE, value: repoUrl },
        ],
      });
    } catch (err) {
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      if (failIfExists) throw new HttpError(409, `session ${sessionId} already exists`);
    }
  }

  async function startFromTrigger(trigger: StartTrigger, delivery: string) {
    const found = repos.byName(trigger.repo);
    if (!found.ok) throw new HttpError(422, found.reason);
    const input: SessionInputDraft = {
      repo: { url: found.repo.url, ...(trigger.ref ? { ref: trigger.ref } : {}) },
      task: trigger.task,
      requestedBy: trigger.requestedBy,
      publish: {
        pullRequest: { repo: found.repo.name, ...(trigger.pullRequestBase ? { base: trigger.pullRequestBase } : {}) },
      },
    };
    const parsed = parseSessionInput(input);
    if (!parsed.ok) throw new HttpError(422, `cannot start a session: ${parsed.problems.join('; ')}`);
    await startOnce(trigger.sessionId, input, found.repo.url);
    // Recorded in the session's chain; GitHub waits ~10 s for an answer, so this waits at most 5 s.
    await deps.audit
      ?.append(
        {
          sessionId: trigger.sessionId,
          key: `webhook/${delivery}`,
          kind: 'webhook',
          actor: trigger.requestedBy,
          data: { source: trigger.source, delivery, repo: found.repo.name, ref: trigger.ref, task: trigger.task },
        },
        AbortSignal.timeout(5_000),
      )
      .catch((err: unknown) =>
        log.error({ sessionId: trigger.sessionId, delivery, err }, 'webhook delivery not recorded in the audit trail'),
      );
    log.info(
      { sessionId: trigger.sessionId, delivery, repo: found.repo.name, source: trigger.source },
      'webhook: session started (or found, for a redelivery)',
    );
    return { sessionId: trigger.sessionId };
  }

  async function githubWebhook(req: IncomingMessage): Promise<[number, unknown]> {
    const secrets = config.DRYDOCK_WEBHOOK_SECRETS ?? [];
    if (secrets.length === 0) throw new HttpError(503, 'GitHub webhooks are not configured (DRYDOCK_WEBHOOK_SECRETS)');
    const signature = header(req, 'x-hub-signature-256');
    if (!signature?.startsWith('sha256=')) throw new HttpError(401, 'missing or malformed X-Hub-Signature-256');
    const body = await readBody(req);
    if (!(await signatureMatches(secrets, body, signature))) throw new HttpError(401, 'signature does not match');
    const event = header(req, 'x-github-event');
    const delivery = header(req, 'x-github-delivery');
    if (!event || !delivery || !/^[A-Za-z0-9-]{1,100}$/.test(delivery)) {
      throw new HttpError(400, 'missing X-GitHub-Event or a well-formed X-GitHub-Delivery');
    }
    const payload = parseJson(body);
    if (event === 'ping') return [200, { ok: true, zen: payload?.zen }];
    const trigger = routeGitHubEvent(event, delivery, payload);
    if (trigger.kind === 'ignore') {
      log.info({ event, delivery, reason: trigger.reason }, 'webhook ignored');
      return [202, { ignored: trigger.reason }];
    }
    if (trigger.kind === 'start') return [202, await startFromTrigger(trigger, delivery)];

    // pull_request closed on a drydock branch: record merged or not for the metrics.
    const found = repos.byName(trigger.repo);
    if (!found.ok) throw new HttpError(422, found.reason);
    try {
      await client.workflow.getHandle(trigger.sessionId).describe();
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) throw err;
      log.info({ event, delivery, sessionId: trigger.sessionId }, 'webhook ignored: no such session');
      return [202, { ignored: `no drydock session ${trigger.sessionId}` }];
    }
    const record: PullRequestClosed = {
      sessionId: trigger.sessionId,
      repo: trigger.repo,
      number: trigger.number,
      url: trigger.url,
      merged: trigger.merged,
      by: trigger.by,
    };
    const recordId = `pr-closed-${trigger.sessionId}-${trigger.number}`;
    try {
      await client.workflow.start(PR_CLOSED_WORKFLOW_TYPE, {
        workflowId: recordId,
        taskQueue: config.DRYDOCK_TASK_QUEUE,
        args: [record],
        workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
        workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
        typedSearchAttributes: [{ key: REPO_ATTRIBUTE, value: found.repo.url }],
      });
    } catch (err) {
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    }
    log.info({ delivery, sessionId: trigger.sessionId, merged: trigger.merged, recordId }, 'pull request closed');
    return [202, { recorded: recordId, merged: trigger.merged }];
  }

  /** `{repo: "owner/name", ref?, task, sha?, requestedBy?}`, HMAC-signed like GitHub's deliveries. */
  async function ciWebhook(req: IncomingMessage): Promise<[number, unknown]> {
    if (!config.DRYDOCK_CI_SECRET) throw new HttpError(503, 'the CI trigger is not configured (DRYDOCK_CI_SECRET)');
    const signature = header(req, 'x-drydock-signature-256');
    if (!signature?.startsWith('sha256=')) throw new HttpError(401, 'missing or malformed X-Drydock-Signature-256');
    const body = await readBody(req);
    if (!(await signatureMatches([config.DRYDOCK_CI_SECRET], body, signature))) {
      throw new HttpError(401, 'signature does not match');
    }
    const payload = parseJson(body);
    if (payload === null || typeof payload !== 'object') throw new HttpError(400, 'body must be a JSON object');
    if (typeof payload.task !== 'string' || !payload.task.trim()) throw new HttpError(422, 'task: required text');
    // The same delivery (or, without an id, the same body) starts one session.
    const delivery = header(req, 'x-drydock-delivery') ?? createHash('sha256').update(body).digest('hex').slice(0, 20);
    if (!/^[A-Za-z0-9-]{1,100}$/.test(delivery)) throw new HttpError(400, 'X-Drydock-Delivery: letters, digits, -');
    const ref = payload.sha ?? payload.ref;
    return [
      202,
      await startFromTrigger(
        {
          kind: 'start',
          sessionId: `ci-${delivery.toLowerCase()}`,
          repo: payload.repo,
          ...(typeof ref === 'string' && ref ? { ref } : {}),
          task: payload.task,
          requestedBy: typeof payload.requestedBy === 'string' ? payload.requestedBy : 'ci',
          ...(typeof payload.ref === 'string' && payload.ref ? { pullRequestBase: payload.ref } : {}),
          source: 'CI trigger',
        },
        delivery,
      ),
    ];
  }

  /** The caller's name from `Authorization: Bearer` or the console cookie; undefined when neither is valid. */
  function identify(req: IncomingMessage): string | undefined {
    const bearer = /^Bearer\s+(\S+)$/i.exec(header(req, 'authorization') ?? '')?.[1];
    return tokens.identify(bearer ?? cookieOf(req, COOKIE));
  }

  function requireIdentity(req: IncomingMessage): string {
    const who = identify(req);
    if (!who) throw new HttpError(401, 'a valid bearer token is required');
    return who;
  }

  /** Cookie-authenticated writes need a JSON body: a cross-site form cannot send one. */
  function requireJsonRequest(req: IncomingMessage): void {
    if (!/^application\/json\b/i.test(header(req, 'content-type') ?? '')) {
      throw new HttpError(415, 'send Content-Type: application/json');
    }
  }

  async function statusOr404(id: string): Promise<SessionStatus> {
    try {
      return await getStatus(client, id);
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) throw new HttpError(404, `no session ${id}`);
      throw err;
    }
  }

  async function apiList(url: URL): Promise<unknown> {
    let repo = url.searchParams.get('repo') ?? undefined;
    if (repo && !repo.includes('://')) {
      const found = repos.byName(repo);
      if (!found.ok) throw new HttpError(422, found.reason);
      repo = found.repo.url;
    }
    const limit = Number(url.searchParams.get('limit') ?? 50);
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new HttpError(400, 'limit: 1 to 1000');
    try {
      return await listSessions(client, { phase: url.searchParams.get('phase') ?? undefined, repo, limit });
    } catch (err) {
      if (err instanceof RangeError) throw new HttpError(400, err.message);
      throw err;
    }
  }

  /** A session input, with `repo` as "owner/name" or {name|url, ref}; only repos drydock serves. */
  async function apiStart(req: IncomingMessage, who: string): Promise<[number, unknown]> {
    requireJsonRequest(req);
    const body = parseJson(await readBody(req));
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      throw new HttpError(400, 'body must be a JSON object');
    }
    const { sessionId: requestedId, repo, ...rest } = body;
    const spec = typeof repo === 'string' ? { name: repo } : (repo ?? {});
    const found = spec.name !== undefined ? repos.byName(spec.name) : repos.byUrl(spec.url);
    if (!found.ok) throw new HttpError(422, found.reason);
    const input = {
      ...rest,
      repo: { url: found.repo.url, ...(spec.ref ? { ref: spec.ref } : {}) },
      requestedBy: who,
    };
    const parsed = parseSessionInput(input);
    if (!parsed.ok) throw new HttpError(422, `invalid session input: ${parsed.problems.join('; ')}`);
    if (
      requestedId !== undefined &&
      (typeof requestedId !== 'string' || !/^[A-Za-z0-9._-]{1,100}$/.test(requestedId))
    ) {
      throw new HttpError(422, 'sessionId: letters, digits, ".", "_" and "-" only');
    }
    const sessionId = requestedId ?? `api-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
    await startOnce(sessionId, input as SessionInputDraft, found.repo.url, true);
    log.info({ sessionId, by: who, repo: found.repo.name }, 'API started a session');
    return [201, { sessionId, url: `${consoleUrl(config)}/sessions/${encodeURIComponent(sessionId)}` }];
  }

  /** `{decision, action?, change?, comment?}`; the decider is the token's owner. */
  async function apiDecide(req: IncomingMessage, id: string, who: string): Promise<[number, unknown]> {
    requireJsonRequest(req);
    const body = parseJson(await readBody(req));
    if (body === null || typeof body !== 'object') throw new HttpError(400, 'body must be a JSON object');
    if (body.by !== undefined && body.by !== who) {
      throw new HttpError(403, `you are ${who}; a decision is recorded as its sender`);
    }
    let action = body.action;
    if (action === undefined) {
      const current = await statusOr404(id);
      if (!current.pendingApproval) throw new HttpError(409, `${id} is not waiting for an approval (${current.phase})`);
      action = current.pendingApproval.action;
    }
    if (!ACTIONS.includes(action)) throw new HttpError(400, `action: one of ${ACTIONS.join(', ')}`);
    const input: DecideInput = {
      decision: body.decision,
      action,
      by: who,
      ...(body.comment !== undefined ? { comment: body.comment } : {}),
      ...(body.change !== undefined ? { change: body.change } : {}),
    };
    try {
      const decision = await client.workflow.getHandle(id).executeUpdate(decide, { args: [input] });
      log.info({ sessionId: id, by: who, decision: decision.decision, action }, 'decision accepted');
      return [200, decision];
    } catch (err) {
      if (err instanceof WorkflowUpdateFailedError) {
        throw new HttpError(409, (err.cause as Error | undefined)?.message ?? err.message);
      }
      if (err instanceof WorkflowNotFoundError) throw new HttpError(404, `no session ${id}`);
      throw err;
    }
  }

  async function login(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const form = new URLSearchParams((await readBody(req)).toString('utf8'));
    const token = form.get('token') ?? '';
    const who = tokens.identify(token);
    if (!who) {
      log.warn({ ip: req.socket.remoteAddress }, 'console sign-in refused');
      return sendHtml(res, 401, loginPage('That token is not valid.'));
    }
    res.writeHead(303, {
      location: '/',
      'set-cookie': `${COOKIE}=${encodeURIComponent(token)}; HttpOnly; SameSite=Strict; Path=/${config.DRYDOCK_CONSOLE_URL?.startsWith('https:') ? '; Secure' : ''}`,
    });
    res.end();
  }

  async function metrics(res: ServerResponse, url: URL, who: string): Promise<void> {
    if (!deps.pool) throw new HttpError(503, 'no database configured for metrics');
    const asked = url.searchParams.get('since') || '7d';
    const since = windowStart(asked);
    if (!since) throw new HttpError(400, `since: expected a duration like 7d, got "${asked}"`);
    const repo = url.searchParams.get('repo') || undefined;
    const report = await buildReport(deps.pool, { since, repo });
    sendHtml(res, 200, metricsPage(report, who));
  }

  async function consoleList(res: ServerResponse, who: string): Promise<void> {
    const rows = await listSessions(client, { limit: 100 });
    // Task and pending action of the sessions still running (closed ones would need a replay each).
    const details = new Map<string, SessionStatus>();
    await Promise.all(
      rows
        .filter((r) => r.status === 'RUNNING')
        .slice(0, 30)
        .map(async (r) => {
          const s = await getStatus(client, r.sessionId).catch(() => undefined);
          if (s) details.set(r.sessionId, s);
        }),
    );
    sendHtml(res, 200, listPage(rows, details, who));
  }

  async function consoleSession(res: ServerResponse, id: string, who: string): Promise<void> {
    const s = await statusOr404(id);
    const diff = s.agent?.diff ? (await artifacts.get(s.sessionId, 'change.diff'))?.toString('utf8') : undefined;
    const nonce = randomBytes(16).toString('base64');
    sendHtml(res, 200, sessionPage(s, { diff, who, nonce, temporalLink: sessionLink(config, id) }), nonce);
  }

  /** Screenshots and logs from the artifact store, confined to it. */
  async function artifact(res: ServerResponse, ref: string): Promise<void> {
    const root = artifacts.pathOf('');
    const file = path.resolve(root, ref);
    if (!file.startsWith(root) || ref.split('/').includes('..')) throw new HttpError(400, 'bad artifact reference');
    const content = await readFile(file).catch(() => undefined);
    if (!content) throw new HttpError(404, `no artifact ${ref}`);
    const type = file.endsWith('.png') ? 'image/png' : 'text/plain; charset=utf-8';
    res.writeHead(200, { 'content-type': type, 'x-content-type-options': 'nosniff', 'cache-control': 'private' });
    res.end(content);
  }

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://drydock');
    const method = req.method ?? 'GET';
    const p = url.pathname;
    const is = (m: string, pattern: RegExp) => (method === m ? pattern.exec(p) : null);
    let match: RegExpExecArray | null;

    if (is('GET', /^\/healthz$/)) return sendJson(res, 200, { ok: true });
    if (is('POST', /^\/webhooks\/github$/)) return sendJson(res, ...(await githubWebhook(req)));
    if (is('POST', /^\/webhooks\/ci$/)) return sendJson(res, ...(await ciWebhook(req)));

    if (p.startsWith('/api/')) {
      const who = requireIdentity(req);
      if (is('GET', /^\/api\/sessions$/)) return sendJson(res, 200, await apiList(url));
      if (is('POST', /^\/api\/sessions$/)) return sendJson(res, ...(await apiStart(req, who)));
      if ((match = is('GET', /^\/api\/sessions\/([^/]+)$/))) {
        return sendJson(res, 200, await statusOr404(decodeURIComponent(match[1])));
      }
      if ((match = is('POST', /^\/api\/sessions\/([^/]+)\/decide$/))) {
        return sendJson(res, ...(await apiDecide(req, decodeURIComponent(match[1]), who)));
      }
      throw new HttpError(404, `no such endpoint: ${method} ${p}`);
    }

    if (is('GET', /^\/login$/)) return sendHtml(res, 200, loginPage());
    if (is('POST', /^\/login$/)) return login(req, res);
    if (is('POST', /^\/logout$/)) {
      res.writeHead(303, {
        location: '/login',
        'set-cookie': `${COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0`,
      });
      return void res.end();
    }
    const who = identify(req);
    if (!who && method === 'GET') {
      res.writeHead(303, { location: '/login' });
      return void res.end();
    }
    if (!who) throw new HttpError(401, 'sign in first');
    if (is('GET', /^\/$/)) return consoleList(res, who);
    if ((match = is('GET', /^\/sessions\/([^/]+)$/))) return consoleSession(res, decodeURIComponent(match[1]), who);
    if ((match = is('GET', /^\/artifacts\/(.+)$/))) return artifact(res, decodeURIComponent(match[1]));
    if (is('GET', /^\/metrics$/)) return metrics(res, url, who);
    throw new HttpError(404, `no such page: ${method} ${p}`);
  }

  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    try {
      await route(req, res);
    } catch (err) {
      const status = err instanceof HttpError ? err.status : 500;
      const message = err instanceof HttpError ? err.message : 'internal error';
      if (status >= 500) log.error({ err, method: req.method, path: req.url?.split('?')[0] }, 'request failed');
      else log.info({ status, method: req.method, path: req.url?.split('?')[0], reason: message }, 'request refused');
      if (res.headersSent) return void res.destroy();
      if (status === 413) {
        // Read no further: answer, then close the connection under the rest of the body.
        res.writeHead(413, { 'content-type': 'application/json', connection: 'close' });
        res.end(JSON.stringify({ error: message }), () => req.destroy());
        return;
      }
      sendJson(res, status, { error: message });
    }
  };
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function cookieOf(req: IncomingMessage, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key === name) return decodeURIComponent(value.join('='));
  }
  return undefined;
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' });
  res.end(JSON.stringify(body));
}

function sendHtml(res: ServerResponse, status: number, html: string, nonce?: string): void {
  res.writeHead(status, {
    'content-type': 'text/html; charset=utf-8',
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'content-security-policy': `default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'${nonce ? `; script-src 'nonce-${nonce}'` : ''}`,
  });
  res.end(html);
}

export interface RunningServer {
  url: string;
  server: Server;
  close(): Promise<void>;
}

/** Listens on DRYDOCK_HTTP_HOST:DRYDOCK_HTTP_PORT (port 0: any free one). */
export async function startServer(deps: ServeDeps): Promise<RunningServer> {
  // The handler reads this config: port 0 becomes the real port once listening.
  const config = { ...deps.config };
  const db = deps.audit ? undefined : await openDatabase(config, deps.log);
  const audit = deps.audit ?? new AuditTrail(db!.pool, config.DRYDOCK_HOST_ID, redactorOf(config));
  const handler = createHandler({ ...deps, config, audit, pool: deps.pool ?? db?.pool });
  const server = createServer((req, res) => void handler(req, res));
  // Slow senders cannot hold connections open for long.
  server.requestTimeout = 30_000;
  server.headersTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(deps.config.DRYDOCK_HTTP_PORT, deps.config.DRYDOCK_HTTP_HOST, () => resolve());
  });
  config.DRYDOCK_HTTP_PORT = (server.address() as { port: number }).port;
  const url = consoleUrl({ ...config, DRYDOCK_CONSOLE_URL: undefined });
  const tokens = deps.tokens ?? loadApiTokens(deps.config);
  deps.log.info(
    {
      url,
      apiTokens: tokens.count,
      githubWebhook: Boolean(deps.config.DRYDOCK_WEBHOOK_SECRETS?.length),
      ciWebhook: Boolean(deps.config.DRYDOCK_CI_SECRET),
    },
    'drydock serve listening',
  );
  return {
    url,
    server,
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await db?.close();
    },
  };
}
