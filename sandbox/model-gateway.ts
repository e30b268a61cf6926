/**
 * The model gateway: how an agent CLI in a sandbox reaches its model without
 * the key. The CLI's base URL is the sandbox's 127.0.0.1:GATEWAY_PORT, where
 * drydock-egress relays to this server on a unix socket in the sandbox's
 * /run/drydock folder. The gateway
 * - forwards only to the one endpoint the worker configured for the CLI's
 *   protocol, and only its model paths (a CONNECT, an absolute URL, another
 *   path or method is refused and recorded);
 * - forwards only the fields, content, tools and headers a model call of
 *   that protocol needs (sandbox/gateway-requests.ts): nothing that has the
 *   provider fetch a URL, run a server-side tool or bill someone else;
 * - drops whatever credential the CLI sent (a placeholder) and adds the
 *   worker's key;
 * - forwards over HTTPS (plain HTTP only to a loopback endpoint: the tests'
 *   fake providers);
 * - reserves each call's share of the budget before forwarding it
 *   (sandbox/gateway-budget.ts), caps its output to what is left, reads the
 *   usage of every answer, streamed (SSE) or not, for the budgets and the
 *   audit trail, and refuses calls once a budget is spent; at most
 *   MAX_IN_FLIGHT calls at once over at most MAX_CONNECTIONS connections.
 * A script step's gateway has no model (no protocol, no endpoint, no key): it
 * serves only its MCP endpoint, drydock-child's start_child, and refuses the rest.
 */
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { rm } from 'node:fs/promises';
import type { Socket } from 'node:net';
import type { Config } from '../platform/config';
import { listenForSandbox } from './egress';
import type { Logger } from '../platform/log';
import { PROTOCOL_PATHS, type ModelProtocol } from '../workflows/rules/agent-clis';
import { GatewayBudget, priceOf, type BudgetStop, type GatewayUsage, type Reservation } from './gateway-budget';
import { capOutput, requestedOutput, screenCall } from './gateway-requests';
import { isMcpRequest, type GatewayMcp } from '../mcp/gateway';

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

export interface GatewayCall extends GatewayUsage {
  model: string;
  status: number;
  costUsd?: number;
  durationMs: number;
  /** The answer's usage could not be read: the tokens are what the call reserved, and were charged so. */
  unread?: boolean;
}

export interface ModelGatewayOptions {
  socketPath: string;
  /**
   * The CLI's model protocol and the endpoint it reaches. Absent: a gateway
   * without a model (a script step's, for drydock-child), which serves only
   * its MCP endpoint and refuses every model call.
   */
  protocol?: ModelProtocol;
  upstream?: GatewayUpstream;
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
  /** The repo's MCP tools for the CLI at /mcp/<server> (mcp/gateway.ts); absent: that path is refused like any other. */
  mcp?: GatewayMcp;
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

/** Characters of an answer (whole) or of one event (streamed) the usage reader holds at most. */
const MAX_READ = 8 << 20;

/**
 * Reads usage from an answer's bytes as they pass, streamed or whole:
 * Anthropic (message_start / message_delta, or `usage` of a message), the
 * Responses API (response.completed) and chat completions (a chunk's or the
 * answer's `usage`). `end` says undefined when the final usage never came
 * (or came past what it reads): the gateway then charges the call all it reserved.
 */
export class UsageReader {
  readonly usage: GatewayUsage = { inputTokens: 0, outputTokens: 0, cachedTokens: 0 };
  /** The answer's final usage was read (Anthropic's message_delta or whole message; OpenAI's usage). */
  private complete = false;
  private buffer = '';
  private whole = '';
  constructor(
    private readonly protocol: ModelProtocol,
    private readonly streamed: boolean,
  ) {}

  push(chunk: Buffer): void {
    if (!this.streamed) {
      // Bounded: an answer past MAX_READ is not parsed (and its call is charged its reservation).
      if (this.whole.length <= MAX_READ) this.whole += chunk.toString();
      return;
    }
    this.buffer += chunk.toString();
    let newline: number;
    while ((newline = this.buffer.indexOf('\n')) >= 0) {
      const line = this.buffer.slice(0, newline).trim();
      this.buffer = this.buffer.slice(newline + 1);
      if (line.startsWith('data:')) this.event(line.slice(5).trim());
    }
    if (this.buffer.length > MAX_READ) this.buffer = '';
  }

  end(): GatewayUsage | undefined {
    if (!this.streamed) this.event(this.whole);
    else if (this.buffer.trim().startsWith('data:')) this.event(this.buffer.trim().slice(5).trim());
    return this.complete ? this.usage : undefined;
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
    this.complete ||= this.protocol !== 'anthropic' || !this.streamed || data.type === 'message_delta';
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
function refuse(res: ServerResponse, protocol: ModelProtocol | undefined, status: number, message: string): void {
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

/** A call as the gateway forwards it (screened, its output capped) and what it reserved. */
interface Forwarded {
  body: Buffer;
  headers: Record<string, string>;
  path: string;
  model: string;
}

/**
 * Sends one model call to the configured endpoint with the worker's key and
 * only the headers the protocol needs, streams the answer back as it comes,
 * and hands its status and usage (undefined when it could not be read) to
 * `ended` once it has ended.
 */
function forward(
  opts: ModelGatewayOptions & { protocol: ModelProtocol; upstream: GatewayUpstream },
  upstream: URL,
  res: ServerResponse,
  call: Forwarded,
  ended: (status: number, usage: GatewayUsage | undefined) => void,
): Promise<void> {
  const headers: Record<string, string> = { ...call.headers };
  if (opts.upstream.apiKey) {
    if (opts.protocol === 'anthropic') headers['x-api-key'] = opts.upstream.apiKey;
    else headers.authorization = `Bearer ${opts.upstream.apiKey}`;
  }
  headers['accept-encoding'] = 'identity';
  headers['content-length'] = String(call.body.length);
  const base = upstream.pathname.replace(/\/$/, '');
  const send = upstream.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise<void>((resolve) => {
    const out = send(
      {
        protocol: upstream.protocol,
        hostname: upstream.hostname.replace(/^\[(.*)\]$/, '$1'),
        port: upstream.port || undefined,
        method: 'POST',
        path: `${base}${call.path}`,
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
        const done = () => {
          ended(answer.statusCode ?? 502, reader.end());
          resolve();
        };
        answer.on('end', () => {
          res.end();
          done();
        });
        answer.on('error', () => {
          res.destroy();
          done();
        });
      },
    );
    out.on('error', (err) => {
      opts.log.warn({ sessionId: opts.sessionId, err: err.message }, 'model gateway: upstream failed');
      if (!res.headersSent) refuse(res, opts.protocol, 502, `drydock model gateway: upstream: ${err.message}`);
      else res.destroy();
      ended(502, NO_USAGE);
      resolve();
    });
    out.end(call.body);
  });
}

/** Model calls forwarded at once by one step's gateway; more are refused (429) until one ends. */
export const MAX_IN_FLIGHT = 8;
/** Connections one step's gateway holds open; more are closed as they arrive. */
export const MAX_CONNECTIONS = 32;

const NO_USAGE: GatewayUsage = { inputTokens: 0, outputTokens: 0, cachedTokens: 0 };

/** One step's gateway while it is open. */
interface GatewayState {
  opts: ModelGatewayOptions;
  /** Absent: the gateway has no model. */
  upstream?: URL;
  budget: GatewayBudget;
  gateway: ModelGateway;
  inFlight: number;
}

type Admitted = { call: Forwarded; reservation: Reservation } | { status: number; reason: string };

/** What the budget says when it leaves no room for a call. */
function spentReason(state: GatewayState, stop: BudgetStop): Admitted {
  const { budget } = state.opts;
  state.gateway.stopped = stop;
  const what = {
    max_turns: `${budget.maxCalls} model calls`,
    max_tokens: `${budget.maxTokens} tokens`,
    max_cost: `$${budget.maxCostUsd}`,
  }[stop];
  return { status: 403, reason: `the session's budget (${what}) is spent, or too little of it is left for this call` };
}

/** Whether a model call may go on: its path, the calls under way, its body screened, its share of the budget reserved. */
async function admit(state: GatewayState, req: IncomingMessage): Promise<Admitted> {
  const { opts, upstream, budget } = state;
  if (!upstream || !opts.protocol) return { status: 403, reason: 'this step has no model: no model call is forwarded' };
  const target = req.url ?? '';
  // Origin-form only: "/v1/messages?beta=true". An absolute URL names another host.
  if (!target.startsWith('/')) return { status: 403, reason: `only ${upstream.origin} is reachable, not ${target}` };
  const url = new URL(target, 'http://gateway');
  const allowed = PROTOCOL_PATHS[opts.protocol];
  if (req.method !== 'POST' || !allowed.includes(url.pathname)) {
    return { status: 403, reason: `${req.method} ${url.pathname} is not a model call (${allowed.join(', ')})` };
  }
  if (state.inFlight >= MAX_IN_FLIGHT) return { status: 429, reason: `more than ${MAX_IN_FLIGHT} model calls at once` };
  const stop = budget.spent();
  if (stop) return spentReason(state, stop);
  const maxBody = opts.maxBodyBytes ?? 32 << 20;
  const raw = await readBody(req, maxBody);
  if (!raw) return { status: 413, reason: `the request body is over ${maxBody} bytes` };
  const screened = screenCall(opts.protocol, raw, req.headers, url.search);
  if ('refused' in screened) return { status: 400, reason: screened.refused };
  const { model } = screened;
  if (opts.budget.maxCostUsd !== undefined && !opts.prices[model]) {
    return {
      status: 403,
      reason: `model ${model} has no price in DRYDOCK_MODEL_PRICES and the session has a cost budget`,
    };
  }
  const held = budget.reserve(model, raw.length, requestedOutput(opts.protocol, screened.body));
  if ('stop' in held) return spentReason(state, held.stop);
  if (held.outputCap !== undefined) capOutput(opts.protocol, screened.body, held.outputCap);
  const body = Buffer.from(JSON.stringify(screened.body));
  const call = { body, headers: screened.headers, path: `${url.pathname}${screened.search}`, model };
  return { call, reservation: held.reservation };
}

/** Handles one request: refused and recorded, or forwarded and its usage counted. */
async function handle(state: GatewayState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const { opts, gateway, budget } = state;
  if (opts.mcp && isMcpRequest(req.url)) return opts.mcp.handle(req, res);
  const admitted = await admit(state, req);
  if ('reason' in admitted) {
    const refusal = { method: req.method ?? '?', target: (req.url ?? '').slice(0, 200), reason: admitted.reason };
    if (gateway.refusals.length < 1_000) gateway.refusals.push(refusal);
    opts.log.warn({ sessionId: opts.sessionId, ...refusal }, 'model gateway refused');
    req.resume();
    return refuse(res, opts.protocol, admitted.status, `drydock model gateway: ${admitted.reason}`);
  }
  const { call, reservation } = admitted;
  const started = Date.now();
  state.inFlight++;
  try {
    const modelled = opts as Parameters<typeof forward>[0]; // admitted: the gateway has a model
    await forward(modelled, state.upstream!, res, call, (status, read) => {
      // An answer that is not a success used nothing; a success whose usage was not read is charged its reservation.
      const usage = read ?? (status >= 400 ? NO_USAGE : undefined);
      budget.settle(reservation, usage);
      const tokens = usage ?? {
        inputTokens: reservation.inputTokens,
        outputTokens: reservation.outputTokens,
        cachedTokens: 0,
      };
      const costUsd = priceOf(opts.prices, call.model, tokens);
      const done: GatewayCall = { model: call.model, status, ...tokens, costUsd, durationMs: Date.now() - started };
      if (!usage) done.unread = true;
      gateway.calls.push(done);
      Object.assign(gateway.used, { tokens: budget.used.tokens, costUsd: budget.used.costUsd });
      opts.onCall?.(done);
    });
  } finally {
    state.inFlight--;
  }
}

/** Opens the gateway of one step on its unix socket. */
export async function openModelGateway(opts: ModelGatewayOptions): Promise<ModelGateway> {
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
  const state: GatewayState = {
    opts,
    ...(opts.upstream ? { upstream: checkUpstream(opts.upstream.baseUrl) } : {}),
    budget: new GatewayBudget(opts.budget, opts.prices),
    gateway,
    inFlight: 0,
  };
  const server = createServer((req, res) => {
    handle(state, req, res).catch((err: unknown) => {
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
  server.maxConnections = MAX_CONNECTIONS;
  server.requestTimeout = 0; // a model's answer may stream for minutes
  await listenForSandbox(server, opts.socketPath);
  return gateway;
}
