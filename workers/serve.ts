/**
 * `drydock serve`: one HTTP process for the triggers and the people.
 *   POST /webhooks/github   GitHub deliveries (X-Hub-Signature-256 over the raw body)
 *   POST /webhooks/gitlab   GitLab deliveries (X-Gitlab-Token)
 *   POST /webhooks/gitea    Gitea deliveries (X-Gitea-Signature over the raw body)
 *   POST /webhooks/ci       a generic CI trigger (X-Drydock-Signature-256 over X-Drydock-Timestamp and the body)
 *   POST /webhooks/linear   Linear deliveries (Linear-Signature over the raw body)
 *   POST /slack/*           the Slack app: commands, events, interactions (X-Slack-Signature, v0)
 *   /api/sessions...        the JSON API, bearer tokens mapped to people
 *   GET /api/sessions/:id/attach   Upgrade: drydock-attach, a shell in the session's sandbox
 *   GET /sessions/:id/terminal/socket   Upgrade: websocket, the same shell for the console's terminal
 *   GET /sessions/:id/desktop/socket    Upgrade: websocket, VNC of the session's desktop (noVNC)
 *   GET /sessions/:id/editor/socket     Upgrade: websocket, holds the takeover of the console's editor
 *   /                       the review console (same tokens, as a cookie)
 * It answers within seconds: verify, start or find the session, return.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import type { Client } from '@temporalio/client';
import { PHASE_ATTRIBUTE, REPO_ATTRIBUTE } from '../workflows/api';
import type { Pool } from 'pg';
import { loadIdentities, type Identities } from '../identity/identities';
import {
  hostProvider,
  type SandboxProvider,
  TERMINAL_LIMITS,
  SessionTerminals,
  SessionShells,
  SessionPeople,
} from '../sandbox';
import { ArtifactStore } from '../store/artifacts';
import { AuditTrail, loadAuditKey } from '../store/audit';
import type { Config } from '../platform/config';
import { openDatabase } from '../store/db';
import { forgeSettings } from '../activities/forges';
import type { Logger } from '../platform/log';
import { seededRepoLookup, type RepoLookupService } from '../repos/registry';
import { redactorOf } from '../platform/scrub';
import { ReviewTimes } from '../review/review-time';
import { loginPage, tokensPage } from './console';
import { readableStatus } from './access';
import { consoleUrl, HttpError, identify, sendHtml, sendJson, type ServeContext } from './http';
import { apiDecide, apiFollowup, apiList, apiStart } from './routes/api';
import { apiReviewTime } from './routes/review';
import {
  artifact,
  consoleEvents,
  consoleList,
  consoleScript,
  consoleSession,
  diffStylesheet,
  report,
} from './routes/console';
import { issueCliToken, login, logout, oidcBegin, oidcCallback, whoami } from './routes/identity';
import { attachUpgrade, isAttachUpgrade } from './routes/attach';
import { isTerminalUpgrade, terminalPageRoute, terminalUpgrade, xtermAsset } from './routes/terminal';
import { previewEntry, previewRequest, previewRequestLabel, previewUpgrade } from './routes/preview';
import { desktopPageRoute, desktopUpgrade, isDesktopUpgrade, novncAsset } from './routes/desktop';
import {
  editorPageRoute,
  editorRequest,
  editorRequestLabel,
  editorSocketUpgrade,
  editorUpgrade,
  isEditorUpgrade,
} from './routes/editor';
import { WebSocketServer } from 'ws';
import { ciWebhook, giteaWebhook, githubWebhook, gitlabWebhook } from './routes/webhooks';
import { linearWebhook } from './routes/linear';
import { slackCommand, slackEvents, slackInteractions } from './routes/slack';
import { sessionGauge } from '../platform/metrics';
import { servePilotRoute } from './routes/pilot';
import { serveNotesRoute } from './routes/notes';
import { metricsScrape } from './routes/metrics';

export { consoleUrl } from './http';

export interface ServeDeps {
  config: Config;
  client: Client;
  log: Logger;
  /** Default: from the configuration (the identities file, API tokens, OpenID Connect), over `pool`. */
  identities?: Identities;
  /** The repo registry (startServer opens it over the database, seeded from DRYDOCK_REPOS). */
  repos: RepoLookupService;
  /** Where webhook deliveries that start a session are recorded (startServer opens one). */
  audit?: AuditTrail;
  /** The database of the report page (startServer opens one). */
  pool?: Pool;
  /** Whose sandboxes `drydock attach --server` reaches (default: the configured provider's: sandbox/providers.ts). */
  sandboxes?: SandboxProvider;
}

/** The request handler, separate from listening so tests and `drydock up` share it. */
export function createHandler(deps: ServeDeps) {
  const ctx: ServeContext = {
    ...deps,
    identities: deps.identities ?? loadIdentities(deps.config, () => consoleUrl(deps.config), deps.pool),
    ...forgeSettings(deps.config),
    artifacts: new ArtifactStore(path.join(deps.config.DRYDOCK_DATA_DIR, 'artifacts')),
    sessionMetrics: sessionGauge(deps.client),
    reviews: deps.pool ? new ReviewTimes(deps.pool) : undefined,
    terminals: new SessionTerminals(),
    shells: new SessionShells(),
    people: new SessionPeople(),
  };
  const handler = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    try {
      // A session's app preview has an origin of its own; nothing else of serve answers there.
      // So has its editor (VS Code on the sandbox's /workspace).
      const editorLabel = editorRequestLabel(ctx, req);
      if (editorLabel) {
        if (!deps.sandboxes) throw new HttpError(503, 'this server reaches no sandboxes: no editor here');
        return await editorRequest(ctx, deps.sandboxes, req, res, editorLabel);
      }
      const label = previewRequestLabel(ctx, req);
      if (label) {
        if (!deps.sandboxes) throw new HttpError(503, 'this server reaches no sandboxes: no preview here');
        return await previewRequest(ctx, deps.sandboxes, req, res, label);
      }
      await route(ctx, req, res);
    } catch (err) {
      answerError(ctx, req, res, err);
    }
  };
  return Object.assign(handler, { context: ctx });
}

/**
 * Upgrade requests: `drydock attach --server`'s endpoint and the console's
 * terminal sockets (others: 404); the connections, to end them on close.
 */
function acceptAttach(server: Server, ctx: ServeContext, sandboxes: SandboxProvider): Set<Duplex> {
  const upgraded = new Set<Duplex>();
  // Over maxPayload a message closes the socket (1009) before it is buffered whole.
  const sockets = new WebSocketServer({ noServer: true, maxPayload: TERMINAL_LIMITS.maxMessageBytes });
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const terminal = isTerminalUpgrade(req);
    const desktop = isDesktopUpgrade(req);
    const editor = isEditorUpgrade(req);
    const editorLabel = editorRequestLabel(ctx, req);
    const label = previewRequestLabel(ctx, req);
    if (!editorLabel && !label && !terminal && !desktop && !editor && !isAttachUpgrade(req)) {
      return void socket.end('HTTP/1.1 404 Not Found\r\nconnection: close\r\n\r\n');
    }
    upgraded.add(socket);
    socket.on('close', () => upgraded.delete(socket));
    // An app's own WebSockets (a dev server's hot reload), on its preview origin: carried to the app.
    if (editorLabel) void editorSocketUpgrade(ctx, sandboxes, req, socket, head, editorLabel);
    else if (label) void previewUpgrade(ctx, sandboxes, req, socket, head, label);
    else if (editor) void editorUpgrade(ctx, sandboxes, sockets, req, socket, head);
    else if (terminal) void terminalUpgrade(ctx, sandboxes, sockets, req, socket, head);
    else if (desktop) void desktopUpgrade(ctx, sandboxes, sockets, req, socket, head);
    else void attachUpgrade(ctx, sandboxes, req, socket);
  });
  return upgraded;
}

/**
 * Ready once Temporal answers for drydock's namespace and its search attributes are usable:
 * before its setup made them, a session's start fails ("Namespace not found", "no mapping
 * defined for search attribute"). The check is the list query serve itself makes. /healthz
 * says only that the process lives (a liveness probe must not restart serve for Temporal's
 * outage).
 */
async function readiness(ctx: ServeContext): Promise<[number, unknown]> {
  const namespace = ctx.client.options.namespace;
  const query = `${PHASE_ATTRIBUTE.name} = 'provisioning' and ${REPO_ATTRIBUTE.name} = ''`;
  try {
    const { connection, workflowService } = ctx.client;
    await connection.withDeadline(Date.now() + 5_000, () =>
      workflowService.listWorkflowExecutions({ namespace, pageSize: 1, query }),
    );
    return [200, { ok: true }];
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    return [
      503,
      {
        ok: false,
        error: `Temporal is not ready for namespace "${namespace}" (its setup makes it and drydock's search attributes): ${why.slice(0, 300)}`,
      },
    ];
  }
}

/** Every URL of the server: webhooks (signed), the API (bearer token), the console (cookie). */
async function route(ctx: ServeContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://drydock');
  const method = req.method ?? 'GET';
  const p = url.pathname;
  const is = (m: string, pattern: RegExp) => (method === m ? pattern.exec(p) : null);
  let match: RegExpExecArray | null;

  if (is('GET', /^\/healthz$/)) return sendJson(res, 200, { ok: true });
  if (is('GET', /^\/readyz$/)) return sendJson(res, ...(await readiness(ctx)));
  if (is('POST', /^\/webhooks\/github$/)) return sendJson(res, ...(await githubWebhook(ctx, req)));
  if (is('POST', /^\/webhooks\/gitlab$/)) return sendJson(res, ...(await gitlabWebhook(ctx, req)));
  if (is('POST', /^\/webhooks\/gitea$/)) return sendJson(res, ...(await giteaWebhook(ctx, req)));
  if (is('POST', /^\/webhooks\/ci$/)) return sendJson(res, ...(await ciWebhook(ctx, req)));
  if (is('POST', /^\/webhooks\/linear$/)) return sendJson(res, ...(await linearWebhook(ctx, req)));
  if (is('POST', /^\/slack\/commands$/)) return sendJson(res, ...(await slackCommand(ctx, req)));
  if (is('POST', /^\/slack\/events$/)) return sendJson(res, ...(await slackEvents(ctx, req)));
  if (is('POST', /^\/slack\/interactions$/)) return sendJson(res, ...(await slackInteractions(ctx, req)));

  // Prometheus scrapes with a bearer token as the API's (its `authorization` setting) that reads every repo.
  if (is('GET', /^\/metrics$/)) return metricsScrape(ctx, req, res);
  if (p.startsWith('/api/')) {
    const who = await identify(req, ctx.identities);
    if (!who) throw new HttpError(401, 'a valid bearer token is required');
    if (is('GET', /^\/api\/whoami$/)) return sendJson(res, ...(await whoami(ctx, req)));
    if (is('POST', /^\/api\/tokens$/)) return sendJson(res, ...(await issueCliToken(ctx, req)));
    if (is('GET', /^\/api\/sessions$/)) return sendJson(res, 200, await apiList(ctx, url, who));
    if (is('POST', /^\/api\/sessions$/)) return sendJson(res, ...(await apiStart(ctx, req, who)));
    if ((match = is('GET', /^\/api\/sessions\/([^/]+)$/))) {
      return sendJson(res, 200, await readableStatus(ctx, decodeURIComponent(match[1]), who));
    }
    if ((match = is('POST', /^\/api\/sessions\/([^/]+)\/decide$/))) {
      return sendJson(res, ...(await apiDecide(ctx, req, decodeURIComponent(match[1]), who)));
    }
    if ((match = is('POST', /^\/api\/sessions\/([^/]+)\/followups$/))) {
      return sendJson(res, ...(await apiFollowup(ctx, req, decodeURIComponent(match[1]), who)));
    }
    if ((match = is('POST', /^\/api\/sessions\/([^/]+)\/review-time$/))) {
      return sendJson(res, ...(await apiReviewTime(ctx, req, decodeURIComponent(match[1]), who)));
    }
    if (await servePilotRoute(ctx, req, res, url, who)) return;
    if (await serveNotesRoute(ctx, req, res, url, who)) return;
    throw new HttpError(404, `no such endpoint: ${method} ${p}`);
  }

  if (is('GET', /^\/assets\/diff2html\.css$/)) return diffStylesheet(res);
  if ((match = is('GET', /^\/assets\/xterm\/(xterm\.js|xterm\.css)$/))) return xtermAsset(res, match[1]);
  if ((match = is('GET', /^\/assets\/console\/([a-z-]+\.js)$/))) return consoleScript(res, match[1]);
  if ((match = is('GET', /^\/assets\/novnc\/(.+)$/))) return novncAsset(res, match[1]);
  if (is('GET', /^\/login$/)) return sendHtml(res, 200, loginPage(Boolean(ctx.identities.oidc)));
  if (is('POST', /^\/login$/)) return login(ctx, req, res);
  if (is('POST', /^\/logout$/)) return logout(ctx, req, res);
  if (is('GET', /^\/auth\/login$/)) return oidcBegin(ctx, res);
  if (is('GET', /^\/auth\/callback$/)) return oidcCallback(ctx, req, res, url);
  const who = await identify(req, ctx.identities);
  if (!who && method === 'GET') {
    res.writeHead(303, { location: '/login' });
    return void res.end();
  }
  if (!who) throw new HttpError(401, 'sign in first');
  if (is('GET', /^\/$/)) return consoleList(ctx, res, who);
  if ((match = is('GET', /^\/sessions\/([^/]+)$/))) {
    return consoleSession(ctx, res, decodeURIComponent(match[1]), who);
  }
  if ((match = is('GET', /^\/sessions\/([^/]+)\/terminal$/))) {
    return terminalPageRoute(ctx, res, decodeURIComponent(match[1]), who, url.searchParams.get('watch') === '1');
  }
  if ((match = is('GET', /^\/sessions\/([^/]+)\/preview$/))) {
    return previewEntry(ctx, res, decodeURIComponent(match[1]), who);
  }
  if ((match = is('GET', /^\/sessions\/([^/]+)\/editor$/))) {
    return editorPageRoute(ctx, res, decodeURIComponent(match[1]), who, url.searchParams.get('watch') === '1');
  }
  if ((match = is('GET', /^\/sessions\/([^/]+)\/desktop$/))) {
    return desktopPageRoute(ctx, res, decodeURIComponent(match[1]), who);
  }
  if ((match = is('GET', /^\/sessions\/([^/]+)\/events$/))) {
    return consoleEvents(ctx, req, res, decodeURIComponent(match[1]), who);
  }
  if ((match = is('GET', /^\/artifacts\/(.+)$/))) return artifact(ctx, res, decodeURIComponent(match[1]), who);
  if (is('GET', /^\/report$/)) return report(ctx, res, url, who);
  if (await servePilotRoute(ctx, req, res, url, who)) return;
  if (await serveNotesRoute(ctx, req, res, url, who)) return;
  if (is('GET', /^\/tokens$/)) {
    const nonce = randomBytes(16).toString('base64');
    return sendHtml(res, 200, tokensPage(who, consoleUrl(ctx.config), nonce), nonce);
  }
  throw new HttpError(404, `no such page: ${method} ${p}`);
}

/** An HttpError is its answer; anything else is a logged 500 that tells the caller nothing more. */
function answerError(ctx: ServeContext, req: IncomingMessage, res: ServerResponse, err: unknown): void {
  const status = err instanceof HttpError ? err.status : 500;
  const message = err instanceof HttpError ? err.message : 'internal error';
  const where = { method: req.method, path: req.url?.split('?')[0] };
  if (status >= 500) ctx.log.error({ err, ...where }, 'request failed');
  else ctx.log.info({ status, ...where, reason: message }, 'request refused');
  if (res.headersSent) return void res.destroy();
  if (status === 413) {
    // Read no further: answer, then close the connection under the rest of the body.
    res.writeHead(413, { 'content-type': 'application/json', connection: 'close' });
    res.end(JSON.stringify({ error: message }), () => req.destroy());
    return;
  }
  sendJson(res, status, { error: message }, err instanceof HttpError ? err.headers : {});
}

export interface RunningServer {
  url: string;
  server: Server;
  close(): Promise<void>;
}

/** Listens on DRYDOCK_HTTP_HOST:DRYDOCK_HTTP_PORT (port 0: any free one). */
export async function startServer(
  deps: Omit<ServeDeps, 'repos'> & Partial<Pick<ServeDeps, 'repos'>>,
): Promise<RunningServer> {
  // The handler reads this config: port 0 becomes the real port once listening.
  const config = { ...deps.config };
  const auditKey = deps.audit ? undefined : loadAuditKey(config);
  const db = deps.audit && deps.pool ? undefined : await openDatabase(config, deps.log);
  const pool = deps.pool ?? db!.pool;
  const audit = deps.audit ?? new AuditTrail(pool, config.DRYDOCK_HOST_ID, redactorOf(config), auditKey!);
  const repos = deps.repos ?? (await seededRepoLookup(pool, config));
  const sandboxes = deps.sandboxes ?? (await hostProvider(config));
  const handler = createHandler({ ...deps, config, audit, pool, repos, sandboxes });
  const server = createServer((req, res) => void handler(req, res));
  const upgraded = acceptAttach(server, handler.context, sandboxes);
  // Slow senders cannot hold connections open for long.
  server.requestTimeout = 30_000;
  server.headersTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(deps.config.DRYDOCK_HTTP_PORT, deps.config.DRYDOCK_HTTP_HOST, () => resolve());
  });
  config.DRYDOCK_HTTP_PORT = (server.address() as { port: number }).port;
  const url = consoleUrl({ ...config, DRYDOCK_CONSOLE_URL: undefined });
  deps.log.info(
    {
      url,
      apiTokens: handler.context.identities.machines.count,
      oidc: Boolean(handler.context.identities.oidc),
      githubWebhook: Boolean(deps.config.DRYDOCK_WEBHOOK_SECRETS?.length),
      gitlabWebhook: Boolean(deps.config.DRYDOCK_GITLAB_WEBHOOK_TOKENS?.length),
      giteaWebhook: Boolean(deps.config.DRYDOCK_GITEA_WEBHOOK_SECRETS?.length),
      ciWebhook: Boolean(deps.config.DRYDOCK_CI_SECRET),
      slack: Boolean(deps.config.DRYDOCK_SLACK_SIGNING_SECRET),
      linearWebhook: Boolean(deps.config.DRYDOCK_LINEAR_WEBHOOK_SECRET),
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
        for (const socket of upgraded) socket.destroy();
      });
      await db?.close();
    },
  };
}
