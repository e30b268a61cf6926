/**
 * The model gateway's MCP endpoint, as an agent CLI in the sandbox uses it:
 * the gateway on its real unix socket, reached through a loopback relay like
 * the sandbox's forwarder, called with the SDK's client as Claude Code or
 * Codex would, in front of a real MCP server (the SDK's, demanding its own
 * bearer token). The step's token, the allowlist, writing tools kept to the
 * built-in loop, the server's maxCalls across the session, the bounded and
 * scrubbed result, and the audit trail's `mcp_call` events.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer as createTcpServer, connect, type Server as TcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { StartChild } from '../../mcp/child-tool';
import { openGatewayMcp, type GatewayMcp } from '../../mcp/gateway';
import type { McpDeps } from '../../mcp/tools';
import { Redactor } from '../../platform/scrub';
import { openModelGateway, type ModelGateway } from '../../sandbox/model-gateway';
import { ArtifactStore } from '../../store/artifacts';
import type { AuditInput } from '../../store/audit';
import { parseMcpDeclaration, type McpServer } from '../../workflows/mcp-servers';
import { agentCliRun, MCP_TOKEN_ENV, MCP_TOKEN_PLACEHOLDER } from '../../workflows/rules/agent-clis';
import { cliCommand } from '../../workflows/rules/prompts';
import { startTestMcpServer, type TestMcpServer } from '../support/mcp-server';

const SERVER_TOKEN = 'mcp-token-5f2e9a71c3';
const STEP_TOKEN = 'step-token-0b8d4c2e97a1';

function declared(url: string, extra: Record<string, unknown> = {}): McpServer {
  const parsed = parseMcpDeclaration([
    {
      name: 'tracker',
      url,
      headers: { Authorization: { secret: 'TRACKER_TOKEN', prefix: 'Bearer ' } },
      tools: ['search_issues', 'create_issue', 'echo_token', 'big'],
      writes: ['create_issue'],
      maxResultBytes: 1024,
      maxCalls: 3,
      ...extra,
    },
  ]);
  if (!parsed.ok) throw new Error(parsed.problems.join('; '));
  return parsed.servers[0];
}

let upstream: TestMcpServer;
let dir: string;
let gateway: ModelGateway | undefined;
let relay: TcpServer | undefined;
let audit: AuditInput[];

beforeAll(async () => {
  upstream = await startTestMcpServer(SERVER_TOKEN);
});
afterAll(() => upstream.close());
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'drydock-gw-mcp-'));
  audit = [];
});
afterEach(async () => {
  await gateway?.close();
  gateway = undefined;
  await new Promise((resolve) => (relay ? relay.close(resolve) : resolve(undefined)));
  relay = undefined;
  await rm(dir, { recursive: true, force: true });
});

/** The gateway of one CLI step with the repo's server (or a script step's, `model: false`), and the loopback address the CLI would use. */
async function openGateway(
  used: Record<string, number> = {},
  startChild?: StartChild,
  { model = true } = {},
): Promise<{ url: string; mcp: GatewayMcp }> {
  const deps = {
    artifacts: new ArtifactStore(path.join(dir, 'artifacts')),
    // The audit trail's own tests use Postgres (test/e2e/audit.test.ts); here its input is what matters.
    audit: { append: async (event: AuditInput) => audit.push(event) },
    redactor: new Redactor([SERVER_TOKEN]),
    secrets: { TRACKER_TOKEN: SERVER_TOKEN },
  } as unknown as McpDeps;
  const mcp = openGatewayMcp({
    servers: model ? [declared(upstream.url)] : [],
    used,
    token: STEP_TOKEN,
    sessionId: 'gw-mcp',
    step: 'agent-cli-1',
    deps,
    ...(startChild ? { startChild } : {}),
    activity: { signal: new AbortController().signal, activityId: 'runStep-7', attempt: 1 },
  });
  const socketPath = path.join(dir, 'model.sock');
  gateway = await openModelGateway({
    socketPath,
    ...(model ? { protocol: 'anthropic' as const, upstream: { baseUrl: 'http://127.0.0.1:1' } } : {}),
    budget: {},
    prices: {},
    log: pino({ level: 'silent' }),
    sessionId: 'gw-mcp',
    mcp,
  });
  // The sandbox's forwarder: a loopback port relayed to the gateway's socket.
  relay = createTcpServer((client) => {
    const to = connect(socketPath);
    client.pipe(to).pipe(client);
    client.on('error', () => to.destroy());
    to.on('error', () => client.destroy());
  });
  await new Promise<void>((resolve) => relay!.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(relay.address() as { port: number }).port}`, mcp };
}

/** The SDK's client at the gateway's endpoint of `server`, as a CLI configured by agentCliRun connects. */
async function cliClient(url: string, token: string | undefined, server = 'tracker'): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp/${server}`), {
    requestInit: { headers: token === undefined ? {} : { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'cli', version: '1' });
  await client.connect(transport);
  return client;
}

const textOf = (result: Awaited<ReturnType<Client['callTool']>>) =>
  (result.content as { type: string; text: string }[]).map((c) => c.text).join('\n');

test('the CLI sees exactly the allowlisted reading tools, and an allowed call reaches the server, bounded and audited', async () => {
  const { url, mcp } = await openGateway();
  const client = await cliClient(url, STEP_TOKEN);
  try {
    const { tools } = await client.listTools();
    // create_issue writes (built-in loop only); `unlisted` and the server's others are not allowlisted.
    expect(tools.map((t) => t.name).sort()).toEqual(['big', 'echo_token', 'search_issues']);
    expect(tools.find((t) => t.name === 'search_issues')!.description).toMatch(
      /^Tool search_issues of the MCP server tracker, outside the sandbox/,
    );

    const found = await client.callTool({ name: 'search_issues', arguments: { query: 'flaky' } });
    expect(found.isError).toBeFalsy();
    expect(textOf(found)).toBe(
      '<mcp-result server="tracker" tool="search_issues">\n2 issues match "flaky": #12 flaky login test, #40 slow build\n</mcp-result>',
    );
    // The server's credential was the worker's, and its echo is scrubbed before the CLI reads it.
    expect(upstream.authorizations.at(-1)).toBe(`Bearer ${SERVER_TOKEN}`);
    const echoed = textOf(await client.callTool({ name: 'echo_token', arguments: {} }));
    expect(echoed).not.toContain(SERVER_TOKEN);
    const big = textOf(await client.callTool({ name: 'big', arguments: {} }));
    expect(big).toContain('[result truncated: the first 1024 of');
  } finally {
    await client.close();
  }
  expect(mcp.calls).toEqual({ tracker: 3 });
  // Tagged with the step's activity, as the trail's other events of the step.
  expect(audit.map((e) => [e.activityId, e.attempt])).toEqual(Array(3).fill(['runStep-7', 1]));
  expect(audit.map((e) => [e.kind, e.key, e.data])).toEqual([
    [
      'mcp_call',
      'mcp-agent-cli-1-1-0',
      expect.objectContaining({
        step: 'agent-cli-1',
        via: 'gateway',
        server: 'tracker',
        tool: 'search_issues',
        writes: false,
        ok: true,
        argumentsBytes: 17,
      }),
    ],
    ['mcp_call', 'mcp-agent-cli-1-1-1', expect.objectContaining({ tool: 'echo_token', ok: true })],
    ['mcp_call', 'mcp-agent-cli-1-1-2', expect.objectContaining({ tool: 'big', truncated: true, resultBytes: 5030 })],
  ]);
});

test('a tool not allowlisted and a writing tool are refused, naming why, and never reach the server', async () => {
  const { url, mcp } = await openGateway();
  const client = await cliClient(url, STEP_TOKEN);
  const served = upstream.calls.length;
  try {
    const unlisted = await client.callTool({ name: 'delete_all', arguments: {} });
    expect(unlisted.isError).toBe(true);
    expect(textOf(unlisted)).toBe('error: the tool delete_all of MCP server tracker is not allowed for this repo');
    const write = await client.callTool({ name: 'create_issue', arguments: { title: 'x' } });
    expect(write.isError).toBe(true);
    expect(textOf(write)).toMatch(
      /^error: create_issue of MCP server tracker changes something outside the sandbox: writing tools are offered to the built-in loop only/,
    );
  } finally {
    await client.close();
  }
  expect(upstream.calls.length).toBe(served);
  expect(mcp.calls).toEqual({});
  expect(mcp.asked).toBe(2);
  expect(audit.map((e) => e.data)).toEqual([
    expect.objectContaining({ tool: 'delete_all', refused: expect.stringMatching(/not allowed/), ok: false }),
    expect.objectContaining({ tool: 'create_issue', refused: expect.stringMatching(/built-in loop only/), ok: false }),
  ]);
});

test("the server's maxCalls hold across the session: calls of earlier steps count, and a spent budget is refused", async () => {
  const { url, mcp } = await openGateway({ tracker: 2 });
  const client = await cliClient(url, STEP_TOKEN);
  try {
    expect((await client.callTool({ name: 'search_issues', arguments: { query: 'a' } })).isError).toBeFalsy();
    const spent = await client.callTool({ name: 'search_issues', arguments: { query: 'b' } });
    expect(spent.isError).toBe(true);
    expect(textOf(spent)).toBe('error: budget: this session has used its 3 calls of MCP server tracker');
  } finally {
    await client.close();
  }
  expect(mcp.calls).toEqual({ tracker: 1 });
  expect(audit.at(-1)!.data).toMatchObject({ refused: expect.stringMatching(/^budget:/) });
});

test('no token, a wrong token or an undeclared server is refused before any MCP', async () => {
  const { url, mcp } = await openGateway();
  await expect(cliClient(url, undefined)).rejects.toThrow(/401|wrong token/);
  await expect(cliClient(url, 'step-token-guessed-000000')).rejects.toThrow(/401|wrong token/);
  await expect(cliClient(url, STEP_TOKEN, 'other')).rejects.toThrow(/404|no MCP server/);
  expect(mcp.refused.map((r) => r.reason)).toEqual([
    expect.stringMatching(/^no or a wrong token/),
    expect.stringMatching(/^no or a wrong token/),
    'no MCP server of this repo is served at /mcp/other',
  ]);
  expect(audit).toEqual([]);
  // The model paths stay as they were: an MCP path is not forwarded to the model's endpoint.
  expect(gateway!.calls).toEqual([]);
});

test("each CLI's configuration names the endpoint with the step's token only when the repo declares servers", () => {
  for (const name of ['claude', 'codex', 'opencode'] as const) {
    const plain = agentCliRun(name, '/bin/x', 'm', 'do it');
    expect(agentCliRun(name, '/bin/x', 'm', 'do it', [])).toEqual(plain);
    expect(JSON.stringify(plain)).not.toContain('/mcp/');
  }
  const claude = agentCliRun('claude', '/bin/x', 'm', 'do it', ['tracker']);
  expect(claude.argv.slice(1, 4)).toEqual(['--mcp-config', '{env:DRYDOCK_MCP_CONFIG}', '--strict-mcp-config']);
  expect(claude.env.ENABLE_TOOL_SEARCH).toBe('false');
  expect(JSON.parse(claude.env.DRYDOCK_MCP_CONFIG)).toEqual({
    mcpServers: {
      tracker: {
        type: 'http',
        url: 'http://127.0.0.1:3129/mcp/tracker',
        headers: { Authorization: `Bearer ${MCP_TOKEN_PLACEHOLDER}` },
      },
    },
  });
  // The shell reads the config from the step's environment, where the worker put the token.
  expect(cliCommand(claude.argv, 'do it')).toContain(`'--mcp-config' "$DRYDOCK_MCP_CONFIG" '--strict-mcp-config'`);
  // Only drydock's own variables: any other "{env:...}" of a session's argv stays literal.
  expect(cliCommand(['my-agent', '{env:HOME}', '{prompt}'], 'p')).toBe(`'my-agent' '{env:HOME}' 'p'`);
  const codex = agentCliRun('codex', '/bin/x', 'm', 'do it', ['tracker']);
  expect(codex.argv).toContain(
    `mcp_servers.tracker={url="http://127.0.0.1:3129/mcp/tracker",bearer_token_env_var="${MCP_TOKEN_ENV}"}`,
  );
  const opencode = JSON.parse(agentCliRun('opencode', '/bin/x', 'm', 'do it', ['tracker']).env.OPENCODE_CONFIG_CONTENT);
  expect(opencode.mcp).toEqual({
    tracker: {
      type: 'remote',
      url: 'http://127.0.0.1:3129/mcp/tracker',
      headers: { Authorization: `Bearer ${MCP_TOKEN_PLACEHOLDER}` },
      enabled: true,
    },
  });
  expect(opencode.provider.drydock.options.baseURL).toBe('http://127.0.0.1:3129');
  // start_child waits for a whole child session: each CLI's time limit for that call is a day (opencode's default is 5 s).
  const kids = (name: 'claude' | 'codex' | 'opencode') => agentCliRun(name, '/bin/x', 'm', 'do it', ['drydock']);
  expect(kids('claude').env.MCP_TOOL_TIMEOUT).toBe('86400000');
  expect(kids('codex').argv.join(' ')).toContain('tool_timeout_sec=86400');
  expect(JSON.parse(kids('opencode').env.OPENCODE_CONFIG_CONTENT).mcp.drydock.timeout).toBe(86_400_000);
});

test("drydock's start_child at /mcp/drydock: listed, its task checked, the session's answer returned when the child ends", async () => {
  const asked: string[] = [];
  const startChild: StartChild = async (task) => {
    asked.push(task);
    // A child takes a while: the answer comes on the call's open SSE stream.
    await new Promise((resolve) => setTimeout(resolve, 300));
    return { content: `child session s.child-1 ended: completed\n<child-words session="s.child-1">\n...`, ok: true };
  };
  const { url } = await openGateway({}, startChild);
  const client = await cliClient(url, STEP_TOKEN, 'drydock');
  const { tools } = await client.listTools();
  expect(tools.map((t) => [t.name, t.inputSchema.required])).toEqual([['start_child', ['task']]]);
  const answer = await client.callTool({ name: 'start_child', arguments: { task: '  write the docs \n' } });
  expect(answer.isError).toBe(false);
  expect(textOf(answer)).toContain('child session s.child-1 ended: completed');
  // Checked here, before anything reaches the session.
  const empty = await client.callTool({ name: 'start_child', arguments: {} });
  const long = await client.callTool({ name: 'start_child', arguments: { task: 'x'.repeat(4_001) } });
  const other = await client.callTool({ name: 'push', arguments: {} });
  expect([empty, long, other].map((r) => [r.isError, textOf(r)])).toEqual([
    [true, 'error: "task" (a string) is required'],
    [true, 'error: "task" has 4001 characters; at most 4000'],
    [true, 'error: drydock serves no tool push'],
  ]);
  expect(asked).toEqual(['write the docs']);
  await client.close();
  // The step's token, as for the repo's servers.
  await expect(cliClient(url, undefined, 'drydock')).rejects.toThrow(/401|wrong token/);
});

test("the session's refusal, or its update refused, is the call's error text", async () => {
  const { url } = await openGateway({}, async (task) =>
    task === 'refused'
      ? { content: 'error: this session has started 4 child sessions, as many as children.max (4) allows', ok: false }
      : Promise.reject(new Error('start_child is taken from the step under way only')),
  );
  const client = await cliClient(url, STEP_TOKEN, 'drydock');
  const refused = await client.callTool({ name: 'start_child', arguments: { task: 'refused' } });
  const rejected = await client.callTool({ name: 'start_child', arguments: { task: 'late' } });
  expect([refused.isError, textOf(refused)]).toEqual([true, expect.stringContaining('children.max (4)')]);
  expect(textOf(rejected)).toBe(
    'error: the session did not take the call: start_child is taken from the step under way only',
  );
  await client.close();
});

/** The real drydock-child helper (sandbox-images/base), run with Node against the gateway at `url`. */
function drydockChild(url: string | undefined, task: string, token = STEP_TOKEN) {
  const helper = path.join(__dirname, '..', '..', 'sandbox-images', 'base', 'drydock-child');
  const env = {
    PATH: process.env.PATH,
    ...(token ? { DRYDOCK_MCP_TOKEN: token } : {}),
    // No gateway: a port nothing listens on.
    DRYDOCK_GATEWAY_PORT: url ? new URL(url).port : '1',
  };
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    execFile(process.execPath, [helper, task], { env }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stdout, stderr }),
    );
  });
}

test("a script step's drydock-child at its gateway without a model: the child's answer and exit code, a refusal, no model", async () => {
  const { url } = await openGateway(
    {},
    async (task) =>
      task === 'refused'
        ? { content: 'error: this session has started 4 child sessions, as many as children.max (4) allows', ok: false }
        : {
            content: `child session s.child-1 ended: ${task === 'fail' ? 'failed' : 'completed'}\n<child-words session="s.child-1">\nok\n</child-words>\nthe whole diff is at /tmp/drydock-children/s.child-1.diff: take it`,
            ok: task !== 'fail',
          },
    { model: false },
  );
  const done = await drydockChild(url, 'write the docs');
  expect(done).toMatchObject({ code: 0, stderr: '' });
  expect(done.stdout).toContain('child session s.child-1 ended: completed');
  expect(done.stdout).toContain('/tmp/drydock-children/s.child-1.diff');
  expect((await drydockChild(url, 'fail')).code).toBe(1);
  const refused = await drydockChild(url, 'refused');
  expect([refused.code, refused.stdout]).toEqual([2, expect.stringContaining('children.max (4)')]);
  // Checked at the gateway; the wrong token; no gateway in the step at all.
  expect(await drydockChild(url, 'x'.repeat(4_001))).toMatchObject({
    code: 2,
    stdout: expect.stringContaining('at most 4000'),
  });
  expect(await drydockChild(url, 'write the docs', 'wrong')).toMatchObject({
    code: 2,
    stderr: expect.stringContaining('wrong token'),
  });
  expect(await drydockChild(undefined, 'write the docs')).toMatchObject({
    code: 2,
    stderr: expect.stringContaining('may start no child'),
  });
  // The gateway has no model: a model call is refused, not forwarded.
  const call = await fetch(`${url}/v1/messages`, { method: 'POST', body: '{}' });
  expect(call.status).toBe(403);
  expect(await call.text()).toContain('this step has no model');
});

test('a step not offered start_child does not serve /mcp/drydock', async () => {
  const { url } = await openGateway();
  await expect(cliClient(url, STEP_TOKEN, 'drydock')).rejects.toThrow(/404|no MCP server/);
});
