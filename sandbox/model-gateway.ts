/**
 * The model gateway: how an agent CLI in a sandbox reaches its model without
 * the key. The CLI's base URL is the sandbox's 127.0.0.1:GATEWAY_PORT, where
 * drydock-egress relays to this server on a unix socket in the sandbox's
 * /run/drydock folder. The gateway
 * - forwards only to the one endpoint the worker configured for the CLI's
 *   protocol, and only its model paths (a CONNECT, an absolute URL, another
 *   path or method is refused and recorded);
 * - drops whatever credential the CLI sent (a placeholder) and adds the
 *   worker's key;
 * - forwards over HTTPS (plain HTTP only to a loopback endpoint: the tests'
 *   fake providers);
 * - reads the usage of every answer, streamed (SSE) or not, for the budgets
 *   and the audit trail, and once the step's token or cost budget is spent,
 *   answers every further request with an error instead of forwarding.
 */
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { rm } from 'node:fs/promises';
import type { Socket } from 'node:net';
import type { Config } from '../platform/config';
import { listenForSandbox } from './egress';
import type { Logger } from '../platform/log';
import { PROTOCOL_PATHS, type ModelProtocol } from '../workflows/rules/agent-clis';

export interface GatewayUpstream {
  /** e.g. https://api.anthropic.com, https://api.openai.com/v1; http only for a loopback host. */
  baseUrl: string;
  apiKey?: string;
}

/** What a worker needs to run agent CLIs: where they are cached, and the endpoints their gateway reaches. */
export interface AgentCliSettings {
  /** Host folder of the installed CLIs (DRYDOCK_AGENTS_DIR). */
  dir: string;
  /** Anthropic Messages (Claude Code) and OpenAI (Codex: Responses; opencode: chat completions). */
  upstreams: { anthropic: GatewayUpstream; openai: GatewayUpstream };
  prices: ModelGatewayOptions['prices'];
}

export function agentCliSettings(config: Config): AgentCliSettings {
  return {
    dir: config.DRYDOCK_AGENTS_DIR,
    upstreams: {
      anthropic: { baseUrl: config.DRYDOCK_ANTHROPIC_BASE_URL, apiKey: config.DRYDOCK_ANTHROPIC_API_KEY },
      openai: { baseUrl: config.DRYDOCK_MODEL_BASE_URL, apiKey: config.DRYDOCK_MODEL_API_KEY },
    },
    prices: config.DRYDOCK_MODEL_PRICES,
  };
}

export interface GatewayUsage {
  inputTokens: number;
  outputTokens: number;
  /** Of inputTokens: read from and written to the provider's prompt cache, where it reports them. */
  cachedTokens: number;
}

export interface GatewayCall extends GatewayUsage {
  model: string;
  status: number;
  costUsd?: number;
  durationMs: number;
}

export interface ModelGatewayOptions {
  socketPath: string;
  protocol: ModelProtocol;
  upstream: GatewayUpstream;
  /** What this step may still spend; absent: no such limit. */
  budget: { maxCalls?: number; maxTokens?: number; maxCostUsd?: number };
  /** USD per million tokens, per model (the worker's DRYDOCK_MODEL_PRICES). */
  prices: Record<string, { input: number; output: number; cachedInput?: number }>;
  log: Logger;
  sessionId: string;
  /** Called after each forwarded answer ends, with what it used. */
  onCall?: (call: GatewayCall) => void;
  /** Bytes of one request body. @default 32 MiB */
  maxBodyBytes?: number;
}

export interface Refusal {
  method: string;
  target: string;
  reason: string;
}

export interface ModelGateway {
  calls: GatewayCall[];
  refusals: Refusal[];
  used: { tokens: number; costUsd: number };
  /** Set once a budget refused a request: which one. */
  stopped?: 'max_turns' | 'max_tokens' | 'max_cost';
  close(): Promise<void>;
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|localhost|\[::1\])$/;

/** The upstream URL is https, or http to a loopback address (a test's fake provider); anything else is a configuration error. */
export function checkUpstream(baseUrl: string): URL {
  const url = new URL(baseUrl);
  if (url.protocol === 'https:') return url;
  if (url.protocol === 'http:' && LOOPBACK.test(url.hostname)) return url;
  throw new Error(`model endpoint ${url.origin} must be https (plain http only to a loopback address)`);
}

/** Headers never passed on: credentials the CLI holds (placeholders), hop-by-hop ones, and compression we must read through. */
const DROPPED = new Set([
  'authorization',
  'x-api-key',
  'api-key',
  'cookie',
  'host',
  'connection',
  'keep-alive',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'upgrade',
  'transfer-encoding',
  'content-length',
  'accept-encoding',
]);

/** The costs of a call at the model's price; undefined when the model has none. */
export function priceOf(prices: ModelGatewayOptions['prices'], model: string, u: GatewayUsage): number | undefined {
  const p = prices[model];
  if (!p) return undefined;
  const fresh = u.inputTokens - u.cachedTokens;
  return (fresh * p.input + u.cachedTokens * (p.cachedInput ?? p.input) + u.outputTokens * p.output) / 1e6;
}

/**
 * Reads usage from an answer's bytes as they pass, streamed or whole:
 * Anthropic (message_start / message_delta, or `usage` of a message), the
 * Responses API (response.completed) and chat completions (a chunk's or the
 * answer's `usage`).
 */
export class UsageReader {
  readonly usage: GatewayUsage = { inputTokens: 0, outputTokens: 0, cachedTokens: 0 };
  private buffer = '';
  private whole = '';
  constructor(
    private readonly protocol: ModelProtocol,
    private readonly streamed: boolean,
  ) {}

  push(chunk: Buffer): void {
    if (!this.streamed) {
      // Bounded: an answer without usage in its first 8 MiB is not read further.
      if (this.whole.length < 8 << 20) this.whole += chunk.toString();
      return;
    }
    this.buffer += chunk.toString();
    let newline: number;
    while ((newline = this.buffer.indexOf('\n')) >= 0) {
      const line = this.buffer.slice(0, newline).trim();
      this.buffer = this.buffer.slice(newline + 1);
      if (line.startsWith('data:')) this.event(line.slice(5).trim());
    }
    if (this.buffer.length > 8 << 20) this.buffer = '';
  }

  end(): GatewayUsage {
    if (!this.streamed) this.event(this.whole);
    else if (this.buffer.trim().startsWith('data:')) this.event(this.buffer.trim().slice(5).trim());
    return this.usage;
  }

  private event(text: string): void {
    let data: Record<string, any>;
    try {
      data = JSON.parse(text);
    } catch {
      return; // "[DONE]", a keep-alive, an error page
    }
    if (!data || typeof data !== 'object') return;
    const u = this.usageIn(data);
    if (!u) return;
    const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined);
    if (this.protocol === 'anthropic') {
      // input_tokens excludes the cache's; output_tokens in message_delta is cumulative.
      const cached = (num(u.cache_read_input_tokens) ?? 0) + (num(u.cache_creation_input_tokens) ?? 0);
      const input = num(u.input_tokens);
      if (input !== undefined) {
        this.usage.inputTokens = input + cached;
        this.usage.cachedTokens = cached;
      }
      this.usage.outputTokens = num(u.output_tokens) ?? this.usage.outputTokens;
      return;
    }
    const input = num(u.input_tokens) ?? num(u.prompt_tokens);
    const output = num(u.output_tokens) ?? num(u.completion_tokens);
    const cached = num(u.input_tokens_details?.cached_tokens) ?? num(u.prompt_tokens_details?.cached_tokens) ?? 0;
    if (input !== undefined) this.usage.inputTokens = input;
    if (output !== undefined) this.usage.outputTokens = output;
    this.usage.cachedTokens = cached;
  }

  private usageIn(data: Record<string, any>): Record<string, any> | undefined {
    if (this.protocol === 'anthropic') return data.message?.usage ?? data.usage;
    if (this.protocol === 'openai-responses')
      return data.response?.usage ?? (data.object === 'response' ? data.usage : undefined);
    return data.usage ?? undefined;
  }
}

/** An error in the protocol's own shape, so the CLI shows its message. */
function refuse(res: ServerResponse, protocol: ModelProtocol, status: number, message: string): void {
  const body =
    protocol === 'anthropic'
      ? { type: 'error', error: { type: status === 403 ? 'permission_error' : 'invalid_request_error', message } }
      : { error: { message, type: 'drydock_gateway', code: 'drydock_refused' } };
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

async function readBody(req: IncomingMessage, max: number): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > max) return undefined;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** The request body as JSON with what the gateway needs: the model, and (chat completions) usage in the stream. */
function prepareBody(protocol: ModelProtocol, raw: Buffer): { body: Buffer; model: string } | { error: string } {
  let data: Record<string, unknown>;
  try {
    data = JSON.parse(raw.toString());
    if (!data || typeof data !== 'object' || Array.isArray(data)) throw new Error('not an object');
  } catch {
    return { error: 'the request body is not a JSON object' };
  }
  if (typeof data.model !== 'string' || !data.model) return { error: 'the request names no model' };
  if (protocol === 'openai-chat' && data.stream === true) {
    // Chat completions report a stream's usage only when asked to.
    data.stream_options = { ...(data.stream_options as object), include_usage: true };
    return { body: Buffer.from(JSON.stringify(data)), model: data.model };
  }
  return { body: raw, model: data.model };
}

/**
 * Sends one model call to the configured endpoint with the worker's key (the
 * CLI's own credential headers dropped), streams the answer back as it comes,
 * and hands its usage to `record` once it has ended.
 */
function forward(
  opts: ModelGatewayOptions,
  upstream: URL,
  { req, res, url }: { req: IncomingMessage; res: ServerResponse; url: URL },
  prepared: { body: Buffer; model: string },
  record: (model: string, status: number, usage: GatewayUsage, started: number) => void,
): Promise<void> {
  const started = Date.now();
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !DROPPED.has(k)) headers[k] = v;
  if (opts.upstream.apiKey) {
    if (opts.protocol === 'anthropic') headers['x-api-key'] = opts.upstream.apiKey;
    else headers.authorization = `Bearer ${opts.upstream.apiKey}`;
  }
  headers['accept-encoding'] = 'identity';
  headers['content-length'] = String(prepared.body.length);
  const base = upstream.pathname.replace(/\/$/, '');
  const send = upstream.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise<void>((resolve) => {
    const out = send(
      {
        protocol: upstream.protocol,
        hostname: upstream.hostname.replace(/^\[(.*)\]$/, '$1'),
        port: upstream.port || undefined,
        method: 'POST',
        path: `${base}${url.pathname}${url.search}`,
        headers,
      },
      (answer) => {
        const streamed = String(answer.headers['content-type'] ?? '').includes('text/event-stream');
        const reader = new UsageReader(opts.protocol, streamed);
        const back = { ...answer.headers };
        for (const h of ['connection', 'keep-alive', 'transfer-encoding']) delete back[h];
        res.writeHead(answer.statusCode ?? 502, back);
        answer.on('data', (chunk: Buffer) => {
          reader.push(chunk);
          res.write(chunk);
        });
        answer.on('end', () => {
          res.end();
          record(prepared.model, answer.statusCode ?? 502, reader.end(), started);
          resolve();
        });
        answer.on('error', () => {
          res.destroy();
          record(prepared.model, answer.statusCode ?? 502, reader.end(), started);
          resolve();
        });
      },
    );
    out.on('error', (err) => {
      opts.log.warn({ sessionId: opts.sessionId, err: err.message }, 'model gateway: upstream failed');
      if (!res.headersSent) refuse(res, opts.protocol, 502, `drydock model gateway: upstream: ${err.message}`);
      else res.destroy();
      resolve();
    });
    out.end(prepared.body);
  });
}

/** Opens the gateway of one step on its unix socket. */
export async function openModelGateway(opts: ModelGatewayOptions): Promise<ModelGateway> {
  const upstream = checkUpstream(opts.upstream.baseUrl);
  const allowed = PROTOCOL_PATHS[opts.protocol];
  const maxBody = opts.maxBodyBytes ?? 32 << 20;
  const sockets = new Set<Socket>();
  const gateway: ModelGateway = {
    calls: [],
    refusals: [],
    used: { tokens: 0, costUsd: 0 },
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const s of sockets) s.destroy();
      await closed;
      await rm(opts.socketPath, { force: true });
    },
  };

  const refused = (req: IncomingMessage, res: ServerResponse, status: number, reason: string) => {
    const refusal = { method: req.method ?? '?', target: (req.url ?? '').slice(0, 200), reason };
    if (gateway.refusals.length < 1_000) gateway.refusals.push(refusal);
    opts.log.warn({ sessionId: opts.sessionId, ...refusal }, 'model gateway refused');
    req.resume();
    refuse(res, opts.protocol, status, `drydock model gateway: ${reason}`);
  };

  /** Which budget is spent, if one is. */
  const spent = (): ModelGateway['stopped'] => {
    const { maxCalls, maxTokens, maxCostUsd } = opts.budget;
    if (maxCalls !== undefined && gateway.calls.length >= maxCalls) return 'max_turns';
    if (maxTokens !== undefined && gateway.used.tokens >= maxTokens) return 'max_tokens';
    if (maxCostUsd !== undefined && gateway.used.costUsd >= maxCostUsd) return 'max_cost';
    return undefined;
  };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const target = req.url ?? '';
    // Origin-form only: "/v1/messages?beta=true". An absolute URL names another host.
    if (!target.startsWith('/')) return refused(req, res, 403, `only ${upstream.origin} is reachable, not ${target}`);
    const url = new URL(target, 'http://gateway');
    if (req.method !== 'POST' || !allowed.includes(url.pathname)) {
      return refused(req, res, 403, `${req.method} ${url.pathname} is not a model call (${allowed.join(', ')})`);
    }
    const stop = spent();
    if (stop) {
      gateway.stopped = stop;
      const what = {
        max_turns: `${opts.budget.maxCalls} model calls`,
        max_tokens: `${opts.budget.maxTokens} tokens`,
        max_cost: `$${opts.budget.maxCostUsd}`,
      }[stop];
      return refused(req, res, 403, `the session's budget (${what}) is spent`);
    }
    const raw = await readBody(req, maxBody);
    if (!raw) return refused(req, res, 413, `the request body is over ${maxBody} bytes`);
    const prepared = prepareBody(opts.protocol, raw);
    if ('error' in prepared) return refused(req, res, 400, prepared.error);
    if (opts.budget.maxCostUsd !== undefined && !opts.prices[prepared.model]) {
      return refused(
        req,
        res,
        403,
        `model ${prepared.model} has no price in DRYDOCK_MODEL_PRICES and the session has a cost budget`,
      );
    }
    await forward(opts, upstream, { req, res, url }, prepared, record);
  }

  function record(model: string, status: number, usage: GatewayUsage, started: number): void {
    const costUsd = priceOf(opts.prices, model, usage);
    const call: GatewayCall = { model, status, ...usage, costUsd, durationMs: Date.now() - started };
    gateway.calls.push(call);
    gateway.used.tokens += usage.inputTokens + usage.outputTokens;
    gateway.used.costUsd += costUsd ?? 0;
    opts.onCall?.(call);
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      opts.log.error({ err, sessionId: opts.sessionId }, 'model gateway request failed');
      if (!res.headersSent) refuse(res, opts.protocol, 502, 'drydock model gateway: internal error');
      else res.destroy();
    });
  });
  // A CONNECT is a tunnel to a host of the CLI's choosing: never.
  server.on('connect', (req: IncomingMessage, client: Socket) => {
    const refusal = {
      method: 'CONNECT',
      target: (req.url ?? '').slice(0, 200),
      reason: 'no tunnels: model calls only',
    };
    if (gateway.refusals.length < 1_000) gateway.refusals.push(refusal);
    opts.log.warn({ sessionId: opts.sessionId, ...refusal }, 'model gateway refused');
    client.end('HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\n\r\ndrydock model gateway: no tunnels\n');
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.requestTimeout = 0; // a model's answer may stream for minutes
  await listenForSandbox(server, opts.socketPath);
  return gateway;
}
