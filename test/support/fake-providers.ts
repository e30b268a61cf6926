/**
 * One local HTTP server speaking three model APIs from one scripted list of
 * turns, so a test (or a real agent CLI) can talk to whichever it knows:
 *
 * - the Anthropic Messages API: POST /v1/messages (streaming SSE and not,
 *   tool_use blocks, cache usage), POST /v1/messages/count_tokens;
 * - the OpenAI Responses API: POST /v1/responses (streaming semantic events and
 *   not, function_call items, cached-token usage);
 * - OpenAI chat completions: POST /v1/chat/completions (streaming chunks and not).
 *
 * Like the real APIs it checks the key header, refuses a conversation whose
 * tool calls are not answered, honours the requested output limit (the answer
 * is cut at max_tokens and says so), and can answer with the provider's real
 * error shapes: a rate limit with Retry-After, a context-length error (also
 * raised by itself when a prompt exceeds `contextWindow`). Every request is
 * recorded, with a protocol-independent view of its conversation, so a test
 * can assert what was sent.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';

export type Protocol = 'anthropic' | 'responses' | 'chat';

/** What the model does next. */
export interface Turn {
  text?: string;
  /**
   * `namespace`: a function of a Responses `namespace` tool (Codex offers each MCP server's
   * tools as one): the call names it beside the function, as the Responses API does.
   */
  toolCalls?: { name: string; arguments: Record<string, unknown> | string; namespace?: string }[];
  /**
   * Tokens. `input` counts the whole prompt, cached part included (default: the
   * estimate of the request, see promptTokens); `output` defaults to 10.
   */
  usage?: { input?: number; output?: number; cachedInput?: number; cacheWrite?: number };
  /** An HTTP error in the provider's shape instead of an answer (e.g. 429 with retry-after). */
  error?: { status: number; message?: string; headers?: Record<string, string> };
  /** Answer with the provider's context-length error. */
  contextLengthExceeded?: boolean;
}

/** A message of any protocol, reduced to what tests ask about. */
export interface NormalMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  text: string;
  toolCalls?: { id: string; name: string; arguments: unknown }[];
  toolCallId?: string;
}

export interface RecordedRequest {
  protocol: Protocol;
  /** Path with query, as received (Claude Code adds ?beta=true). */
  path: string;
  headers: IncomingMessage['headers'];
  body: any;
  stream: boolean;
  model: string;
  messages: NormalMessage[];
  tools: string[];
  /** max_tokens / max_output_tokens / max_completion_tokens, as asked. */
  maxTokens?: number;
  /** The HTTP status answered. */
  status?: number;
}

export type Script = Turn[] | ((request: RecordedRequest, n: number) => Turn | Promise<Turn>);

export interface FakeProviders {
  /** e.g. http://127.0.0.1:1234 (what ANTHROPIC_BASE_URL expects) */
  url: string;
  /** url + /v1 (what OpenAI clients and the AI SDK expect) */
  baseUrl: string;
  requests: RecordedRequest[];
  /** Replaces the script; a list is consumed in order, past its end the model says "done". */
  script(script: Script): void;
  close(): Promise<void>;
}

export interface FakeProviderOptions {
  /** The key every request must carry (x-api-key or bearer for Anthropic, bearer for OpenAI). */
  apiKey?: string;
  /** Prompts estimated above this many tokens get the provider's context-length error. */
  contextWindow?: number;
}

/** The prompt size the fake bills by default: characters of the conversation / 4. */
export const promptTokens = (req: Pick<RecordedRequest, 'messages'>) =>
  Math.ceil(JSON.stringify(req.messages).length / 4);

/** The user message sent last (the task, or verification feedback). */
export const lastUserMessage = (req: RecordedRequest) =>
  [...req.messages].reverse().find((m) => m.role === 'user')?.text ?? '';

/** Tool results so far, in order. */
export const toolResults = (req: RecordedRequest) => req.messages.filter((m) => m.role === 'tool').map((m) => m.text);

export async function startFakeProviders(opts: FakeProviderOptions = {}): Promise<FakeProviders> {
  const requests: RecordedRequest[] = [];
  let script: Script = [];
  let listed = 0;
  let calls = 0;

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: String(err), type: 'server_error' } }));
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse) {
    const path = (req.url ?? '/').split('?')[0].replace(/\/+$/, '');
    const protocol = protocolOf(req.method, path);
    const anthropicShape = protocol === 'anthropic' || (!protocol && !!req.headers['anthropic-version']);
    const fail = (status: number, message: string, headers: Record<string, string> = {}, code?: string) =>
      sendError(res, anthropicShape ? 'anthropic' : 'chat', status, message, headers, code);

    if (req.method === 'GET' && path === '/v1/models') {
      if (!keyOk(req, anthropicShape)) return fail(401, keyMessage(anthropicShape));
      return sendJson(res, 200, modelList(anthropicShape));
    }
    if (req.method === 'POST' && path === '/v1/messages/count_tokens') {
      if (!keyOk(req, true)) return sendError(res, 'anthropic', 401, keyMessage(true));
      const body = parse(await readBody(req));
      if (!body) return sendError(res, 'anthropic', 400, 'There was an issue with the JSON body of your request.');
      return sendJson(res, 200, { input_tokens: promptTokens({ messages: normalize('anthropic', body) }) });
    }
    if (!protocol) return fail(404, `Not found: ${req.method} ${req.url}`);

    const body = parse(await readBody(req));
    if (!body) return fail(400, 'We could not parse the JSON body of your request.');
    const record: RecordedRequest = {
      protocol,
      path: req.url ?? '',
      headers: req.headers,
      body,
      stream: body.stream === true,
      model: String(body.model ?? ''),
      messages: normalize(protocol, body),
      tools: toolNames(protocol, body),
      maxTokens: body.max_tokens ?? body.max_output_tokens ?? body.max_completion_tokens,
    };
    requests.push(record);
    const answer = (status: number) => (record.status = status);

    if (!keyOk(req, protocol === 'anthropic')) return answer(fail(401, keyMessage(protocol === 'anthropic')));
    if (protocol === 'anthropic' && !req.headers['anthropic-version'])
      return answer(fail(400, 'anthropic-version: header is required'));
    const problem = invalid(protocol, body, record.messages);
    if (problem) return answer(fail(400, problem));
    const estimate = promptTokens(record);
    if (opts.contextWindow && estimate > opts.contextWindow) {
      return answer(sendContextError(res, protocol, estimate, opts.contextWindow));
    }

    const turn: Turn = Array.isArray(script) ? (script[listed++] ?? { text: 'done' }) : await script(record, calls);
    calls++;
    if (turn.contextLengthExceeded) {
      return answer(sendContextError(res, protocol, estimate, opts.contextWindow ?? estimate - 1));
    }
    if (turn.error) {
      const { status, message, headers } = turn.error;
      return answer(sendError(res, protocol, status, message ?? 'scripted failure', headers));
    }
    const reply = shape(turn, estimate, record.maxTokens, calls);
    answer(200);
    if (protocol === 'anthropic') return anthropicReply(res, record, reply);
    if (protocol === 'responses') return responsesReply(res, record, reply);
    return chatReply(res, record, reply);
  }

  function keyOk(req: IncomingMessage, anthropic: boolean) {
    if (!opts.apiKey) return true;
    const bearer = req.headers.authorization === `Bearer ${opts.apiKey}`;
    return bearer || (anthropic && req.headers['x-api-key'] === opts.apiKey);
  }

  // The client closes idle connections, never the server: a server closing one as the client
  // reused it (its 5 s keep-alive timeout, on a busy machine) failed a request with ECONNRESET.
  server.keepAliveTimeout = 0;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    baseUrl: `${url}/v1`,
    requests,
    script(next) {
      script = next;
      listed = 0;
    },
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function protocolOf(method: string | undefined, path: string): Protocol | undefined {
  if (method !== 'POST') return undefined;
  if (path === '/v1/messages') return 'anthropic';
  if (path === '/v1/responses') return 'responses';
  if (path === '/v1/chat/completions') return 'chat';
  return undefined;
}

const keyMessage = (anthropic: boolean) => (anthropic ? 'invalid x-api-key' : 'Incorrect API key provided.');

function modelList(anthropic: boolean) {
  const created = '2025-01-01T00:00:00Z';
  if (anthropic) {
    const data = [{ type: 'model', id: 'fake-1', display_name: 'Fake 1', created_at: created }];
    return { data, has_more: false, first_id: 'fake-1', last_id: 'fake-1' };
  }
  return { object: 'list', data: [{ id: 'fake-1', object: 'model', created: 1735689600, owned_by: 'drydock-test' }] };
}

// --- what the model answers -------------------------------------------------

interface Reply {
  id: string;
  text: string;
  /** arguments: JSON text, or the turn's raw string (the input of a custom tool). */
  toolCalls: { id: string; name: string; arguments: string; namespace?: string }[];
  /** Cut at the requested output limit. */
  truncated: boolean;
  input: number;
  output: number;
  cachedInput: number;
  cacheWrite: number;
}

/** The turn as the provider would send it: ids, usage, and the output limit applied. */
function shape(turn: Turn, estimate: number, maxTokens: number | undefined, n: number): Reply {
  const suffix = `${n}_${randomBytes(4).toString('hex')}`;
  let output = turn.usage?.output ?? 10;
  let text = turn.text ?? '';
  let toolCalls = (turn.toolCalls ?? []).map((c, i) => ({
    id: `call_${suffix}_${i}`,
    name: c.name,
    arguments: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments),
    ...(c.namespace ? { namespace: c.namespace } : {}),
  }));
  const truncated = typeof maxTokens === 'number' && output > maxTokens;
  if (truncated) {
    // A real model stops mid-sentence at the limit; a half-written tool call is no call at all.
    output = maxTokens;
    text = text.slice(0, maxTokens * 4);
    toolCalls = [];
  }
  return {
    id: suffix,
    text,
    toolCalls,
    truncated,
    input: turn.usage?.input ?? estimate,
    output,
    cachedInput: turn.usage?.cachedInput ?? 0,
    cacheWrite: turn.usage?.cacheWrite ?? 0,
  };
}

/** Splits a string into a few deltas, so clients must really accumulate them. */
function pieces(s: string, n = 3): string[] {
  if (!s) return [];
  const size = Math.max(1, Math.ceil(s.length / n));
  const out: string[] = [];
  for (let i = 0; i < s.length; i += size) out.push(s.slice(i, i + size));
  return out;
}

function sse(res: ServerResponse) {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  return {
    event(name: string | undefined, data: unknown) {
      res.write(`${name ? `event: ${name}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);
    },
    end: () => res.end(),
  };
}

// --- Anthropic Messages -----------------------------------------------------

function anthropicReply(res: ServerResponse, req: RecordedRequest, r: Reply) {
  const id = `msg_${r.id}`;
  const stopReason = r.truncated ? 'max_tokens' : r.toolCalls.length ? 'tool_use' : 'end_turn';
  const usage = {
    input_tokens: Math.max(0, r.input - r.cachedInput - r.cacheWrite),
    cache_creation_input_tokens: r.cacheWrite,
    cache_read_input_tokens: r.cachedInput,
    output_tokens: r.output,
  };
  const blocks: any[] = [
    ...(r.text ? [{ type: 'text', text: r.text }] : []),
    ...r.toolCalls.map((c) => ({
      type: 'tool_use',
      id: `toolu_${c.id}`,
      name: c.name,
      input: JSON.parse(c.arguments),
    })),
  ];
  const message = { id, type: 'message', role: 'assistant', model: req.model, stop_sequence: null };
  if (!req.stream) {
    return sendJson(res, 200, { ...message, content: blocks, stop_reason: stopReason, usage });
  }
  const s = sse(res);
  s.event('message_start', {
    type: 'message_start',
    message: { ...message, content: [], stop_reason: null, usage: { ...usage, output_tokens: 1 } },
  });
  s.event('ping', { type: 'ping' });
  blocks.forEach((block, index) => {
    if (block.type === 'text') {
      s.event('content_block_start', { type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
      for (const text of pieces(block.text)) {
        s.event('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text } });
      }
    } else {
      const start = { ...block, input: {} };
      s.event('content_block_start', { type: 'content_block_start', index, content_block: start });
      for (const partial_json of pieces(JSON.stringify(block.input))) {
        const delta = { type: 'input_json_delta', partial_json };
        s.event('content_block_delta', { type: 'content_block_delta', index, delta });
      }
    }
    s.event('content_block_stop', { type: 'content_block_stop', index });
  });
  s.event('message_delta', {
    type: 'message_delta',
    delta: { stop_reason: stopReason, stop_sequence: null },
    usage: { output_tokens: r.output },
  });
  s.event('message_stop', { type: 'message_stop' });
  s.end();
}

// --- OpenAI Responses -------------------------------------------------------

function responsesReply(res: ServerResponse, req: RecordedRequest, r: Reply) {
  const customTools = new Set(
    (Array.isArray(req.body.tools) ? req.body.tools : [])
      .filter((t: any) => t.type === 'custom')
      .map((t: any) => t.name),
  );
  const msgId = `msg_${r.id}`;
  const items: any[] = [
    ...(r.text
      ? [
          {
            id: msgId,
            type: 'message',
            status: 'completed',
            role: 'assistant',
            content: [{ type: 'output_text', text: r.text, annotations: [], logprobs: [] }],
          },
        ]
      : []),
    ...r.toolCalls.map((c) =>
      // A tool the request declared as `custom` (freeform input, e.g. Codex's apply_patch) is called with raw text.
      customTools.has(c.name)
        ? {
            id: `ctc_${c.id}`,
            type: 'custom_tool_call',
            status: 'completed',
            call_id: c.id,
            name: c.name,
            input: c.arguments,
          }
        : {
            id: `fc_${c.id}`,
            type: 'function_call',
            status: 'completed',
            call_id: c.id,
            ...(c.namespace ? { namespace: c.namespace } : {}),
            name: c.name,
            arguments: c.arguments,
          },
    ),
  ];
  const response = (status: string, output: any[], usage: unknown) => ({
    id: `resp_${r.id}`,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status,
    error: null,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: req.body.instructions ?? null,
    max_output_tokens: req.maxTokens ?? null,
    model: req.model,
    output,
    parallel_tool_calls: true,
    previous_response_id: null,
    store: req.body.store ?? true,
    temperature: req.body.temperature ?? 1,
    tool_choice: req.body.tool_choice ?? 'auto',
    tools: req.body.tools ?? [],
    top_p: 1,
    truncation: 'disabled',
    usage,
    metadata: {},
  });
  const usage = {
    input_tokens: r.input,
    input_tokens_details: { cached_tokens: r.cachedInput },
    output_tokens: r.output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: r.input + r.output,
  };
  const final = r.truncated ? 'incomplete' : 'completed';
  if (!req.stream) return sendJson(res, 200, response(final, items, usage));

  const s = sse(res);
  let seq = 0;
  const event = (type: string, data: Record<string, unknown>) =>
    s.event(type, { type, sequence_number: seq++, ...data });
  event('response.created', { response: response('in_progress', [], null) });
  event('response.in_progress', { response: response('in_progress', [], null) });
  items.forEach((item, output_index) => {
    if (item.type === 'message') {
      const part = { type: 'output_text', text: '', annotations: [], logprobs: [] };
      event('response.output_item.added', { output_index, item: { ...item, status: 'in_progress', content: [] } });
      const at = { item_id: item.id, output_index, content_index: 0 };
      event('response.content_part.added', { ...at, part });
      for (const delta of pieces(r.text)) event('response.output_text.delta', { ...at, delta, logprobs: [] });
      event('response.output_text.done', { ...at, text: r.text, logprobs: [] });
      event('response.content_part.done', { ...at, part: item.content[0] });
    } else if (item.type === 'custom_tool_call') {
      event('response.output_item.added', { output_index, item: { ...item, status: 'in_progress', input: '' } });
      for (const delta of pieces(item.input)) {
        event('response.custom_tool_call_input.delta', { item_id: item.id, output_index, delta });
      }
      event('response.custom_tool_call_input.done', { item_id: item.id, output_index, input: item.input });
    } else {
      event('response.output_item.added', { output_index, item: { ...item, status: 'in_progress', arguments: '' } });
      for (const delta of pieces(item.arguments)) {
        event('response.function_call_arguments.delta', { item_id: item.id, output_index, delta });
      }
      event('response.function_call_arguments.done', { item_id: item.id, output_index, arguments: item.arguments });
    }
    event('response.output_item.done', { output_index, item });
  });
  event(`response.${final}`, { response: response(final, items, usage) });
  s.end();
}

// --- OpenAI chat completions ------------------------------------------------

function chatReply(res: ServerResponse, req: RecordedRequest, r: Reply) {
  const id = `chatcmpl-${r.id}`;
  const created = Math.floor(Date.now() / 1000);
  const finish = r.truncated ? 'length' : r.toolCalls.length ? 'tool_calls' : 'stop';
  const usage = {
    prompt_tokens: r.input,
    completion_tokens: r.output,
    total_tokens: r.input + r.output,
    prompt_tokens_details: { cached_tokens: r.cachedInput },
  };
  const toolCalls = r.toolCalls.map((c) => ({
    id: c.id,
    type: 'function',
    function: { name: c.name, arguments: c.arguments },
  }));
  if (!req.stream) {
    const message = {
      role: 'assistant',
      content: r.text || null,
      ...(toolCalls.length ? { tool_calls: toolCalls } : {}),
      refusal: null,
    };
    return sendJson(res, 200, {
      id,
      object: 'chat.completion',
      created,
      model: req.model,
      choices: [{ index: 0, message, logprobs: null, finish_reason: finish }],
      usage,
    });
  }
  const s = sse(res);
  const chunk = (delta: unknown, finish_reason: string | null = null) =>
    s.event(undefined, {
      id,
      object: 'chat.completion.chunk',
      created,
      model: req.model,
      choices: [{ index: 0, delta, logprobs: null, finish_reason }],
    });
  chunk({ role: 'assistant', content: '', refusal: null });
  for (const content of pieces(r.text)) chunk({ content });
  toolCalls.forEach((c, index) => {
    chunk({ tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.function.name, arguments: '' } }] });
    for (const args of pieces(c.function.arguments)) {
      chunk({ tool_calls: [{ index, function: { arguments: args } }] });
    }
  });
  chunk({}, finish);
  if (req.body.stream_options?.include_usage) {
    s.event(undefined, { id, object: 'chat.completion.chunk', created, model: req.model, choices: [], usage });
  }
  s.event(undefined, '[DONE]');
  s.end();
}

// --- errors in each provider's shape -----------------------------------------

function sendError(
  res: ServerResponse,
  protocol: Protocol,
  status: number,
  message: string,
  headers: Record<string, string> = {},
  code?: string,
): number {
  if (protocol === 'anthropic') {
    const type =
      status === 401
        ? 'authentication_error'
        : status === 404
          ? 'not_found_error'
          : status === 429
            ? 'rate_limit_error'
            : status === 529
              ? 'overloaded_error'
              : status >= 500
                ? 'api_error'
                : 'invalid_request_error';
    const requestId = `req_${randomBytes(12).toString('hex')}`;
    return sendJson(
      res,
      status,
      { type: 'error', error: { type, message }, request_id: requestId },
      { 'request-id': requestId, ...headers },
    );
  }
  const type = status === 429 ? 'requests' : status >= 500 ? 'server_error' : 'invalid_request_error';
  const defaultCode = status === 401 ? 'invalid_api_key' : status === 429 ? 'rate_limit_exceeded' : null;
  return sendJson(res, status, { error: { message, type, param: null, code: code ?? defaultCode } }, headers);
}

/** The error each provider answers when the prompt does not fit the model's window. */
function sendContextError(res: ServerResponse, protocol: Protocol, tokens: number, window: number): number {
  if (protocol === 'anthropic') {
    return sendError(res, protocol, 400, `prompt is too long: ${tokens} tokens > ${window} maximum`);
  }
  const message =
    protocol === 'responses'
      ? 'Your input exceeds the context window of this model. Please adjust your input and try again.'
      : `This model's maximum context length is ${window} tokens. However, your messages resulted in ${tokens} tokens. Please reduce the length of the messages.`;
  const param = protocol === 'responses' ? 'input' : 'messages';
  return sendJson(res, 400, {
    error: { message, type: 'invalid_request_error', param, code: 'context_length_exceeded' },
  });
}

function sendJson(res: ServerResponse, status: number, data: unknown, headers: Record<string, string> = {}): number {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(data));
  return status;
}

// --- reading requests --------------------------------------------------------

/** Text of a content field in any of the protocols' shapes (string, or parts with text). */
function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((p) => (typeof p === 'string' ? p : typeof p?.text === 'string' ? p.text : textOf(p?.content)))
    .join('');
}

function normalize(protocol: Protocol, body: any): NormalMessage[] {
  const out: NormalMessage[] = [];
  if (protocol === 'chat') {
    for (const m of Array.isArray(body.messages) ? body.messages : []) {
      const role = m.role === 'developer' ? 'system' : m.role;
      out.push({
        role,
        text: textOf(m.content),
        ...(m.tool_calls?.length
          ? {
              toolCalls: m.tool_calls.map((c: any) => ({
                id: c.id,
                name: c.function?.name,
                arguments: parseArgs(c.function?.arguments),
              })),
            }
          : {}),
        ...(m.tool_call_id ? { toolCallId: m.tool_call_id } : {}),
      });
    }
    return out;
  }
  if (protocol === 'anthropic') {
    if (body.system) out.push({ role: 'system', text: textOf(body.system) });
    for (const m of Array.isArray(body.messages) ? body.messages : []) {
      const blocks = typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : (m.content ?? []);
      for (const b of blocks.filter((b: any) => b.type === 'tool_result')) {
        out.push({ role: 'tool', text: textOf(b.content), toolCallId: b.tool_use_id });
      }
      const text = textOf(blocks.filter((b: any) => b.type === 'text'));
      const uses = blocks.filter((b: any) => b.type === 'tool_use');
      if (text || uses.length || m.role === 'assistant') {
        out.push({
          role: m.role,
          text,
          ...(uses.length ? { toolCalls: uses.map((u: any) => ({ id: u.id, name: u.name, arguments: u.input })) } : {}),
        });
      }
    }
    return out;
  }
  if (body.instructions) out.push({ role: 'system', text: String(body.instructions) });
  const input = typeof body.input === 'string' ? [{ role: 'user', content: body.input }] : (body.input ?? []);
  for (const item of input) {
    if (item.type === 'function_call' || item.type === 'custom_tool_call') {
      const args = item.type === 'function_call' ? parseArgs(item.arguments) : item.input;
      const call = { id: item.call_id, name: item.name, arguments: args };
      const last = out[out.length - 1];
      if (last?.role === 'assistant') last.toolCalls = [...(last.toolCalls ?? []), call];
      else out.push({ role: 'assistant', text: '', toolCalls: [call] });
    } else if (item.type === 'function_call_output' || item.type === 'custom_tool_call_output') {
      out.push({ role: 'tool', text: textOf(item.output), toolCallId: item.call_id });
    } else if (item.role) {
      const role = item.role === 'developer' ? 'system' : item.role;
      out.push({ role, text: textOf(item.content) });
    }
  }
  return out;
}

function toolNames(protocol: Protocol, body: any): string[] {
  const tools: any[] = Array.isArray(body.tools) ? body.tools : [];
  return tools.map((t) => (protocol === 'chat' ? t.function?.name : t.name)).filter(Boolean);
}

/** The checks each real API makes that a client can get wrong. */
function invalid(protocol: Protocol, body: any, messages: NormalMessage[]): string | undefined {
  if (typeof body.model !== 'string' || !body.model) {
    return protocol === 'anthropic' ? 'model: Field required' : 'you must provide a model parameter';
  }
  if (protocol === 'anthropic') {
    if (typeof body.max_tokens !== 'number') return 'max_tokens: Field required';
    if (!Array.isArray(body.messages) || body.messages.length === 0) return 'messages: Field required';
    for (const [i, m] of body.messages.entries()) {
      if (!['user', 'assistant'].includes(m.role)) return `messages.${i}.role: Input should be 'user' or 'assistant'`;
    }
    for (const t of body.tools ?? []) {
      if (!t.name || (t.type === undefined && !t.input_schema))
        return 'tools: each custom tool needs name and input_schema';
    }
  } else if (protocol === 'responses') {
    if (body.previous_response_id) return `Previous response with id '${body.previous_response_id}' not found.`;
    for (const t of body.tools ?? []) {
      if (t.type === 'function' && !t.name) return "Missing required parameter: 'tools[0].name'.";
    }
  } else {
    if (!Array.isArray(body.messages) || body.messages.length === 0) return "'messages' must be a non-empty array";
    for (const t of body.tools ?? []) {
      if (t.type !== 'function' || !t.function?.name) return 'tools: each must be {type: "function", function: {name}}';
    }
  }
  return unansweredCall(messages);
}

/** Every tool call must be answered before the conversation goes on, and every answer must have a call. */
function unansweredCall(messages: NormalMessage[]): string | undefined {
  for (const [i, m] of messages.entries()) {
    for (const call of m.toolCalls ?? []) {
      const answered = messages.slice(i + 1).some((t) => t.role === 'tool' && t.toolCallId === call.id);
      if (!answered) return `tool call ${call.id} has no result: each tool call must be answered by a tool result`;
    }
    if (m.role === 'tool' && !messages.slice(0, i).some((a) => a.toolCalls?.some((c) => c.id === m.toolCallId))) {
      return `messages[${i}]: a tool result must answer a preceding tool call (${m.toolCallId})`;
    }
  }
  return undefined;
}

function parseArgs(args: unknown): unknown {
  if (typeof args !== 'string') return args;
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}

function parse(text: string): any {
  try {
    const body = JSON.parse(text);
    return body && typeof body === 'object' ? body : undefined;
  } catch {
    return undefined;
  }
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString();
}
