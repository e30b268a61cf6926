/**
 * The model gateway's MCP endpoint: how an agent CLI in the sandbox uses the
 * repo's MCP tools. The gateway (sandbox/model-gateway.ts) hands it the
 * requests to /mcp/<server>; each declared server is one streamable-HTTP MCP
 * server here (the SDK's server side, stateless), reachable only with the
 * step's token, that lists exactly the server's allowlisted reading tools and
 * forwards each call through the worker's client (tools.ts) under the rules of
 * the built-in loop (workflows/rules/mcp.ts): allowlist, the server's maxCalls
 * counted across the session, the result cut, scrubbed and fenced, each call
 * audited as `mcp_call`. A writing tool is refused here: its approval gate is
 * the workflow's, which a CLI's request cannot wait on, so writing tools are
 * offered to the built-in loop only.
 */
import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { CLI_CHILD_SERVER, GATEWAY_MCP_PATH } from '../workflows/rules/agent-clis';
import { decideMcpCall, mcpToolName } from '../workflows/rules/mcp';
import { childEndpoint, type StartChild } from './child-tool';
import type { McpServer } from '../workflows/mcp-servers';
import { listTools, withMcpClient, type ListedTool } from './client';
import { callMcpTool, offered, type McpCallActivity, type McpDeps } from './tools';

/** Bytes of one JSON-RPC request a CLI may send. */
const MAX_REQUEST_BYTES = 1 << 20;

export interface GatewayMcpOptions {
  servers: McpServer[];
  /** Calls the session made so far, by server (the workflow's count): maxCalls holds across steps. */
  used: Record<string, number>;
  /** The step's token: every request carries `Authorization: Bearer <token>`. */
  token: string;
  sessionId: string;
  /** The agent CLI's step (its audit events are keyed by it and the activity's attempt). */
  step: string;
  deps: McpDeps;
  /** The step's activity: its cancellation ends the calls under way; the audit events name it. */
  activity: McpCallActivity;
  /** drydock's start_child, served at /mcp/drydock (mcp/child-tool.ts); absent: that path is not served. */
  startChild?: StartChild;
}

export interface GatewayMcp {
  /** Calls made on this step, by server (added to the session's count), and every call asked for, refused ones included. */
  calls: Record<string, number>;
  asked: number;
  /** Requests refused before MCP: no or a wrong token, an undeclared server, a body too large. */
  refused: { target: string; reason: string }[];
  handle(req: IncomingMessage, res: ServerResponse): Promise<void>;
}

/** Whether the gateway's request is for the MCP endpoint. */
export const isMcpRequest = (url: string | undefined) => (url ?? '').startsWith(GATEWAY_MCP_PATH);

export function openGatewayMcp(opts: GatewayMcpOptions): GatewayMcp {
  const listings = new Map<string, Promise<ListedTool[]>>();
  const mcp: GatewayMcp = {
    calls: {},
    asked: 0,
    refused: [],
    handle: async (req, res) => {
      const server = opts.servers.find((s) => `${GATEWAY_MCP_PATH}${s.name}` === (req.url ?? '').split('?')[0]);
      if (!tokenMatches(req.headers.authorization, opts.token)) {
        return refuse(
          mcp,
          req,
          res,
          401,
          'no or a wrong token: this endpoint takes the step token as Authorization: Bearer',
        );
      }
      const own = opts.startChild && (req.url ?? '').split('?')[0] === `${GATEWAY_MCP_PATH}${CLI_CHILD_SERVER}`;
      if (!server && !own) return refuse(mcp, req, res, 404, `no MCP server of this repo is served at ${req.url}`);
      const body = await readJson(req);
      if (body === TOO_LARGE) return refuse(mcp, req, res, 413, `the request is over ${MAX_REQUEST_BYTES} bytes`);
      if (!server) return serve(childEndpoint(opts.startChild!), req, res, body, { lasting: true });
      // Listed once per step; a listing that failed is asked again at the next request.
      const listing = () => {
        if (!listings.has(server.name)) {
          const listed = readableTools(opts, server);
          listed.catch(() => listings.delete(server.name));
          listings.set(server.name, listed);
        }
        return listings.get(server.name)!;
      };
      await serve(endpointFor(opts, mcp, server, listing), req, res, body);
    },
  };
  return mcp;
}

const TOO_LARGE = Symbol('too large');

function refuse(mcp: GatewayMcp, req: IncomingMessage, res: ServerResponse, status: number, reason: string): void {
  if (mcp.refused.length < 1_000) mcp.refused.push({ target: (req.url ?? '').slice(0, 200), reason });
  req.resume();
  const error = { jsonrpc: '2.0', error: { code: -32001, message: `drydock model gateway: ${reason}` }, id: null };
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(error));
}

function tokenMatches(header: string | undefined, token: string): boolean {
  const sent = Buffer.from(header ?? '');
  const wanted = Buffer.from(`Bearer ${token}`);
  return sent.length === wanted.length && timingSafeEqual(sent, wanted);
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  if (req.method !== 'POST') return undefined;
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_REQUEST_BYTES) return TOO_LARGE;
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString();
  try {
    return text ? JSON.parse(text) : undefined;
  } catch {
    return text; // the transport answers a parse error in JSON-RPC's words
  }
}

/** The server's allowlisted tools as it lists them, bounded like the built-in loop's, writing tools left out. */
async function readableTools(opts: GatewayMcpOptions, server: McpServer): Promise<ListedTool[]> {
  const listed = await withMcpClient(
    server,
    opts.deps.secrets,
    (c) => listTools(c, server, opts.activity.signal),
    opts.activity.signal,
  );
  const reading = { ...server, tools: server.tools.filter((t) => !server.writes.includes(t)) };
  return offered(reading, listed, []).map((spec) => ({
    name: spec.function.name.slice(mcpToolName(server.name, '').length),
    description: spec.function.description,
    inputSchema: spec.function.parameters as ListedTool['inputSchema'],
  }));
}

/** One request's MCP server: the tool list, and each call decided, made and audited as the built-in loop's. */
function endpointFor(
  opts: GatewayMcpOptions,
  mcp: GatewayMcp,
  server: McpServer,
  listing: () => Promise<ListedTool[]>,
): Server {
  const endpoint = new Server({ name: `drydock-${server.name}`, version: '1' }, { capabilities: { tools: {} } });
  endpoint.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: (await listing()).map((t) => ({ ...t, inputSchema: { type: 'object' as const, ...t.inputSchema } })),
  }));
  endpoint.setRequestHandler(CallToolRequestSchema, async (request) => {
    const name = mcpToolName(server.name, request.params.name);
    const used = { ...opts.used };
    for (const [s, n] of Object.entries(mcp.calls)) used[s] = (used[s] ?? 0) + n;
    const decided = decideMcpCall(opts.servers, name, used);
    const n = mcp.asked++;
    let call: Parameters<typeof callMcpTool>[1]['call'];
    if (decided.kind === 'refuse') call = { refused: decided.reason, server: decided.server, tool: decided.tool };
    else if (decided.writes) {
      call = {
        refused: `${decided.tool} of MCP server ${server.name} changes something outside the sandbox: writing tools are offered to the built-in loop only (agent.kind "openai"), where each call waits for approval`,
        server: server.name,
        tool: decided.tool,
      };
    } else {
      call = decided;
      mcp.calls[server.name] = (mcp.calls[server.name] ?? 0) + 1; // counted before the call, so calls at once cannot pass maxCalls
    }
    const done = await callMcpTool(
      opts.deps,
      {
        sessionId: opts.sessionId,
        turn: 0,
        index: n,
        key: `${opts.step}-${opts.activity.attempt}-${n}`,
        step: opts.step,
        name,
        arguments: JSON.stringify(request.params.arguments ?? {}),
        call,
      },
      opts.activity,
    );
    return { content: [{ type: 'text' as const, text: done.content }], isError: !done.record.ok };
  });
  return endpoint;
}

/**
 * Answers one request with a fresh stateless transport: JSON answers, or, for
 * a call that lasts (start_child waits for a whole child session), an SSE
 * stream whose headers go at once and which carries the SDK's keep-alive
 * comments until the answer, so the CLI's HTTP client does not give up.
 */
async function serve(
  endpoint: Server,
  req: IncomingMessage,
  res: ServerResponse,
  body: unknown,
  { lasting = false } = {},
): Promise<void> {
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: !lasting });
  res.on('close', () => {
    void transport.close();
    void endpoint.close();
  });
  await endpoint.connect(transport);
  await transport.handleRequest(req, res, body);
}
