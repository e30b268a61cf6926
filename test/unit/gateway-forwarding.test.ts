/**
 * The model gateway on its real unix socket, in front of a local upstream
 * that records what reaches it: only the fields, content, tools and headers
 * a model call needs are forwarded (nothing that has the provider fetch a
 * URL or bill someone else), and each call's share of the budget is
 * reserved before it is forwarded, so concurrent calls, background answers,
 * answers too big to read and floods of connections cannot pass it.
 */
import { mkdtemp } from 'node:fs/promises';
import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { MAX_CONNECTIONS, MAX_IN_FLIGHT, openModelGateway, type ModelGateway } from '../../sandbox/model-gateway';
import type { ModelGatewayOptions } from '../../sandbox/model-gateway';

interface Seen {
  path: string;
  headers: IncomingHttpHeaders;
  body: Record<string, any>;
}

/** An upstream that records each request and answers with `answer` (held until `release` when `hold` is set). */
class Upstream {
  seen: Seen[] = [];
  hold = false;
  answer: (seen: Seen) => { type?: string; text: string } = () => ({
    text: JSON.stringify({ type: 'message', usage: { input_tokens: 10, output_tokens: 5 } }),
  });
  private waiting: (() => void)[] = [];
  server!: Server;
  url = '';

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const seen = { path: req.url!, headers: req.headers, body: JSON.parse(Buffer.concat(chunks).toString()) };
        this.seen.push(seen);
        const send = () => {
          const { type, text } = this.answer(seen);
          res.writeHead(200, { 'content-type': type ?? 'application/json' }).end(text);
        };
        if (this.hold) this.waiting.push(send);
        else send();
      });
    });
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as { port: number }).port}`;
  }

  release(): void {
    this.hold = false;
    for (const send of this.waiting.splice(0)) send();
  }
}

let upstream: Upstream;
let gateway: ModelGateway | undefined;
let socketPath: string;

beforeEach(async () => {
  upstream = new Upstream();
  await upstream.start();
  socketPath = path.join(await mkdtemp(path.join(tmpdir(), 'drydock-gw-')), 'model.sock');
});
afterEach(async () => {
  await gateway?.close();
  gateway = undefined;
  upstream.release();
  upstream.server.closeAllConnections();
  await new Promise((resolve) => upstream.server.close(resolve));
});

async function open(protocol: ModelGatewayOptions['protocol'], budget: ModelGatewayOptions['budget'] = {}) {
  gateway = await openModelGateway({
    socketPath,
    protocol,
    upstream: {
      baseUrl: protocol === 'anthropic' ? upstream.url : `${upstream.url}/v1`,
      apiKey: 'sk-worker-key-123456',
    },
    budget,
    prices: { m: { input: 1, output: 2 } },
    log: pino({ level: 'silent' }),
    sessionId: 'gw-test',
  });
  return gateway;
}

/** One call through the gateway's socket, as a CLI in the sandbox would send it. */
function call(
  target: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { socketPath, path: target, method: 'POST', headers: { 'content-type': 'application/json', ...headers } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, text: Buffer.concat(chunks).toString() }));
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

const user = (content: unknown) => [{ role: 'user', content }];

describe('only what a model call needs reaches the provider', () => {
  test('Anthropic: no MCP servers, server-side tools or URL-fetching betas; client tools and known betas pass', async () => {
    await open('anthropic');
    const answer = await call(
      '/v1/messages?beta=true&fetch=http://evil',
      {
        model: 'm',
        max_tokens: 100,
        messages: user('hi'),
        mcp_servers: [{ type: 'url', url: 'https://evil.example/mcp', name: 'x' }],
        container: 'c1',
        service_tier: 'priority',
        tools: [
          { name: 'Bash', description: 'd', input_schema: { type: 'object' } },
          { type: 'web_search_20250305', name: 'web_search' },
          { type: 'web_fetch_20250910', name: 'web_fetch' },
          { type: 'mcp_toolset', mcp_server_name: 'x' },
          { type: 'code_execution_20250825', name: 'code_execution' },
          { type: 'bash_20250124', name: 'bash' },
        ],
      },
      {
        'anthropic-version': '2023-06-01',
        'anthropic-beta':
          'mcp-client-2025-04-04, web-fetch-2025-09-10,interleaved-thinking-2025-05-14,files-api-2025-04-14',
        'x-api-key': 'drydock-placeholder-key',
        'x-forwarded-for': '10.0.0.1',
        'anthropic-dangerous-direct-browser-access': 'true',
      },
    );
    expect(answer.status).toBe(200);
    const [seen] = upstream.seen;
    expect(seen.path).toBe('/v1/messages?beta=true');
    expect(Object.keys(seen.body).sort()).toEqual(['max_tokens', 'messages', 'model', 'tools']);
    expect(seen.body.tools.map((t: any) => t.name)).toEqual(['Bash', 'bash']);
    expect(seen.headers['anthropic-beta']).toBe('interleaved-thinking-2025-05-14');
    expect(seen.headers['x-api-key']).toBe('sk-worker-key-123456');
    expect(seen.headers['x-forwarded-for']).toBeUndefined();
    expect(seen.headers['anthropic-dangerous-direct-browser-access']).toBeUndefined();
  });

  test.each([
    ['an image by URL', { type: 'image', source: { type: 'url', url: 'https://evil.example/?d=secret' } }],
    ['a document by URL', { type: 'document', source: { type: 'url', url: 'https://evil.example/doc.pdf' } }],
    ['a stored file', { type: 'document', source: { type: 'file', file_id: 'file_1' } }],
    [
      'an image by URL inside a tool result',
      {
        type: 'tool_result',
        tool_use_id: 't1',
        content: [{ type: 'image', source: { type: 'url', url: 'https://evil.example/x.png' } }],
      },
    ],
    ['a server tool result', { type: 'web_fetch_tool_result', tool_use_id: 't', content: {} }],
  ])('Anthropic: %s is refused before anything is sent', async (_what, block) => {
    await open('anthropic');
    const answer = await call('/v1/messages', { model: 'm', max_tokens: 10, messages: user([block]) });
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.text)).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    expect(upstream.seen).toHaveLength(0);
    expect(gateway!.refusals).toHaveLength(1);
  });

  test('an inline (base64) image passes', async () => {
    await open('anthropic');
    const image = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } };
    expect((await call('/v1/messages', { model: 'm', max_tokens: 10, messages: user([image]) })).status).toBe(200);
    expect(upstream.seen[0].body.messages[0].content[0]).toEqual(image);
  });

  test('Responses: no MCP, web search or background; no organization or project header; function tools pass', async () => {
    await open('openai-responses');
    upstream.answer = () => ({
      text: JSON.stringify({ object: 'response', usage: { input_tokens: 3, output_tokens: 2 } }),
    });
    const answer = await call(
      '/responses',
      {
        model: 'm',
        input: 'hi',
        background: true,
        previous_response_id: 'resp_other_session',
        conversation: 'conv_1',
        include: ['reasoning.encrypted_content', 'web_search_call.action.sources'],
        client_metadata: { workspace: '/data/mirrors/x.git' },
        tools: [
          { type: 'function', name: 'exec_command', parameters: {} },
          { type: 'web_search', external_web_access: true },
          { type: 'mcp', server_label: 'x', server_url: 'https://evil.example/mcp' },
          { type: 'namespace', name: 'ns', tools: [{ type: 'function', name: 'f' }, { type: 'web_search' }] },
        ],
      },
      { 'openai-organization': 'org-other', 'openai-project': 'proj-other', authorization: 'Bearer placeholder' },
    );
    expect(answer.status).toBe(200);
    const [seen] = upstream.seen;
    expect(seen.path).toBe('/v1/responses');
    expect(Object.keys(seen.body).sort()).toEqual(['include', 'input', 'model', 'tools']);
    expect(seen.body.include).toEqual(['reasoning.encrypted_content']);
    expect(seen.body.tools).toEqual([
      { type: 'function', name: 'exec_command', parameters: {} },
      { type: 'namespace', name: 'ns', tools: [{ type: 'function', name: 'f' }] },
    ]);
    expect(seen.headers['openai-organization']).toBeUndefined();
    expect(seen.headers['openai-project']).toBeUndefined();
    expect(seen.headers.authorization).toBe('Bearer sk-worker-key-123456');
    expect(gateway!.used.tokens).toBe(5);
  });

  test.each([
    [
      'an input_image by URL',
      { type: 'message', role: 'user', content: [{ type: 'input_image', image_url: 'https://evil.example/i.png' }] },
    ],
    [
      'an input_file by URL',
      { type: 'message', role: 'user', content: [{ type: 'input_file', file_url: 'https://evil.example/f' }] },
    ],
    ['a stored item', { type: 'item_reference', id: 'msg_other_session' }],
    ['a web search call', { type: 'web_search_call', id: 'ws_1', status: 'completed' }],
  ])('Responses: %s is refused', async (_what, item) => {
    await open('openai-responses');
    expect((await call('/responses', { model: 'm', input: [item] })).status).toBe(400);
    expect(upstream.seen).toHaveLength(0);
  });

  test('chat completions: an image by URL is refused, an inline one passes, web search options are dropped', async () => {
    await open('openai-chat');
    upstream.answer = () => ({ text: JSON.stringify({ usage: { prompt_tokens: 1, completion_tokens: 1 } }) });
    const image = (url: string) => user([{ type: 'image_url', image_url: { url } }]);
    expect((await call('/chat/completions', { model: 'm', messages: image('http://evil.example/i.png') })).status).toBe(
      400,
    );
    const inline = 'data:image/png;base64,iVBORw0KGgo=';
    const sent = { model: 'm', messages: image(inline), web_search_options: {}, audio: { voice: 'x' }, n: 8 };
    expect((await call('/chat/completions', sent)).status).toBe(200);
    expect(upstream.seen).toHaveLength(1);
    expect(Object.keys(upstream.seen[0].body).sort()).toEqual(['messages', 'model']);
  });
});

describe('each call reserves its share of the budget before it is forwarded', () => {
  /** Sends `n` calls at once while the upstream holds its answers, then releases them once all are in. */
  async function atOnce(n: number, body: unknown, target = '/v1/messages') {
    upstream.hold = true;
    const calls = Array.from({ length: n }, () => call(target, body));
    while (upstream.seen.length + gateway!.refusals.length < n) await new Promise((r) => setTimeout(r, 10));
    upstream.release();
    return Promise.all(calls);
  }

  test('20 calls at once at maxCalls 1: one is forwarded', async () => {
    await open('anthropic', { maxCalls: 1 });
    const answers = await atOnce(20, { model: 'm', max_tokens: 10, messages: user('hi') });
    expect(answers.filter((a) => a.status === 200)).toHaveLength(1);
    expect(upstream.seen).toHaveLength(1);
    expect(gateway!.calls).toHaveLength(1);
  });

  test('calls at once under a token budget: each holds its input and output, and its output is capped to what is left', async () => {
    await open('anthropic', { maxTokens: 1_000 });
    // ~400 bytes (≈100 tokens of input) and 10 000 tokens of output asked: capped to what the budget leaves.
    const body = { model: 'm', max_tokens: 10_000, messages: user('x'.repeat(300)) };
    const answers = await atOnce(5, body);
    expect(answers.filter((a) => a.status === 200)).toHaveLength(1);
    expect(upstream.seen).toHaveLength(1);
    expect(upstream.seen[0].body.max_tokens).toBeLessThan(1_000);
    expect(upstream.seen[0].body.max_tokens).toBeGreaterThan(800);
  });

  test('an answer whose usage cannot be read (past 8 MiB) is charged all it reserved', async () => {
    await open('anthropic', { maxTokens: 100_000 });
    const huge = {
      type: 'message',
      content: [{ type: 'text', text: 'y'.repeat(9 << 20) }],
      usage: { input_tokens: 1, output_tokens: 1 },
    };
    upstream.answer = () => ({ text: JSON.stringify(huge) });
    expect((await call('/v1/messages', { model: 'm', max_tokens: 60_000, messages: user('hi') })).status).toBe(200);
    expect(gateway!.calls[0]).toMatchObject({ unread: true, outputTokens: 60_000 });
    expect(gateway!.used.tokens).toBeGreaterThan(60_000);
    // What is left cannot hold the next call's asked output: it is capped, not passed.
    await call('/v1/messages', { model: 'm', max_tokens: 60_000, messages: user('hi') });
    expect(upstream.seen[1].body.max_tokens).toBeLessThan(40_000);
  });

  test('a streamed Responses answer cut before response.completed is charged its reservation', async () => {
    await open('openai-responses', { maxTokens: 50_000 });
    upstream.answer = () => ({ type: 'text/event-stream', text: 'data: {"type":"response.created"}\n\n' });
    await call('/responses', { model: 'm', input: 'hi', max_output_tokens: 20_000, stream: true });
    expect(gateway!.calls[0]).toMatchObject({ unread: true, outputTokens: 20_000 });
  });

  test(`at most ${MAX_IN_FLIGHT} calls at once, over at most ${MAX_CONNECTIONS} connections`, async () => {
    await open('anthropic');
    const answers = await atOnce(MAX_IN_FLIGHT + 3, { model: 'm', max_tokens: 10, messages: user('hi') });
    expect(answers.filter((a) => a.status === 200)).toHaveLength(MAX_IN_FLIGHT);
    expect(answers.filter((a) => a.status === 429)).toHaveLength(3);
    // The server closes each connection past its limit as it accepts it. Wait for those 8
    // closes, not a fixed time: a busy machine's event loop took more than 500 ms for 40 accepts.
    const sockets = Array.from({ length: MAX_CONNECTIONS + 8 }, () => connect(socketPath));
    const closed = new Set<number>();
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${closed.size} of 8 connections closed in 30 s`)), 30_000);
      sockets.forEach((s, i) => {
        const close = () => {
          closed.add(i);
          if (closed.size === 8) resolve(clearTimeout(timer));
        };
        s.on('close', close).on('error', close);
      });
    });
    expect(sockets.length - closed.size).toBe(MAX_CONNECTIONS);
    sockets.forEach((s) => s.destroy());
  });
});
