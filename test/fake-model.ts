/**
 * A local HTTP server speaking the OpenAI chat-completions protocol
 * (POST /v1/chat/completions): tool definitions and tool_calls, finish_reason,
 * usage. Like the real API it checks the bearer key and refuses a
 * conversation whose tool calls are not each answered by a tool message. Each
 * test scripts it (a list of replies, or a function of the request) and counts
 * the requests.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';

export interface ChatRequestBody {
  model: string;
  messages: { role: string; content: string | null; tool_calls?: any[]; tool_call_id?: string }[];
  tools?: { type: string; function: { name: string; parameters: unknown } }[];
  temperature?: number;
}

/** What the model says next: text, tool calls, or an HTTP error. */
export interface Reply {
  content?: string;
  toolCalls?: { name: string; arguments: Record<string, unknown> | string }[];
  /** Default: prompt = characters of the messages / 4, completion = 10. */
  usage?: { prompt: number; completion: number };
  status?: number;
  error?: string;
}

export type Script = Reply[] | ((request: ChatRequestBody, n: number) => Reply);

export interface FakeModel {
  /** e.g. http://127.0.0.1:1234/v1 */
  baseUrl: string;
  requests: { body: ChatRequestBody; authorization?: string }[];
  /** Replaces the script (a list is consumed in order; past its end the model says "done"). */
  script(script: Script): void;
  close(): Promise<void>;
}

/** The user message drydock sent last (the task, or verification feedback). */
export const lastUserMessage = (req: ChatRequestBody) =>
  [...req.messages].reverse().find((m) => m.role === 'user')?.content ?? '';

/** Tool results so far, in order. */
export const toolResults = (req: ChatRequestBody) =>
  req.messages.filter((m) => m.role === 'tool').map((m) => m.content ?? '');

export async function startFakeModel(opts: { apiKey?: string } = {}): Promise<FakeModel> {
  const requests: FakeModel['requests'] = [];
  let script: Script = [];
  let listed = 0;
  let calls = 0;

  const server: Server = createServer(async (req, res) => {
    const send = (status: number, data: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(data));
    };
    const error = (status: number, message: string, type = 'invalid_request_error') =>
      send(status, { error: { message, type, param: null, code: null } });
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions')
      return error(404, `Unknown request URL: ${req.url}`);
    if (opts.apiKey && req.headers.authorization !== `Bearer ${opts.apiKey}`) {
      return error(401, 'Incorrect API key provided', 'invalid_api_key');
    }
    let body: ChatRequestBody;
    try {
      body = JSON.parse(await readBody(req));
    } catch {
      return error(400, 'We could not parse the JSON body of your request.');
    }
    requests.push({ body, authorization: req.headers.authorization });
    const problem = invalid(body);
    if (problem) return error(400, problem);

    const reply: Reply = Array.isArray(script) ? (script[listed++] ?? { content: 'done' }) : script(body, calls);
    calls++;
    if (reply.status) return error(reply.status, reply.error ?? 'scripted failure', 'server_error');
    const usage = reply.usage ?? {
      prompt: Math.ceil(JSON.stringify(body.messages).length / 4),
      completion: 10,
    };
    const toolCalls = reply.toolCalls?.map((c, i) => ({
      id: `call_${calls}_${i}`,
      type: 'function',
      function: {
        name: c.name,
        arguments: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments),
      },
    }));
    send(200, {
      id: `chatcmpl-${calls}`,
      object: 'chat.completion',
      created: Math.floor(Date.now() / 1000),
      model: body.model,
      choices: [
        {
          index: 0,
          message: {
            role: 'assistant',
            content: reply.content ?? null,
            ...(toolCalls?.length ? { tool_calls: toolCalls } : {}),
            refusal: null,
          },
          logprobs: null,
          finish_reason: toolCalls?.length ? 'tool_calls' : 'stop',
        },
      ],
      usage: {
        prompt_tokens: usage.prompt,
        completion_tokens: usage.completion,
        total_tokens: usage.prompt + usage.completion,
      },
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    script(next) {
      script = next;
      listed = 0;
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** The checks the real API makes that a client can get wrong. */
function invalid(body: ChatRequestBody): string | undefined {
  if (typeof body.model !== 'string' || !body.model) return 'you must provide a model parameter';
  if (!Array.isArray(body.messages) || body.messages.length === 0) return "'messages' must be a non-empty array";
  for (const tool of body.tools ?? []) {
    if (tool.type !== 'function' || !tool.function?.name)
      return 'tools: each must be {type: "function", function: {name}}';
  }
  for (const [i, m] of body.messages.entries()) {
    if (!['system', 'user', 'assistant', 'tool'].includes(m.role)) return `messages[${i}].role: invalid`;
    if (m.role === 'assistant' && m.tool_calls?.length) {
      const answered = body.messages.slice(i + 1, i + 1 + m.tool_calls.length).map((t) => t.tool_call_id);
      for (const call of m.tool_calls) {
        if (!answered.includes(call.id)) {
          return `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${call.id}`;
        }
      }
    }
    if (
      m.role === 'tool' &&
      !body.messages.slice(0, i).some((a) => a.tool_calls?.some((c) => c.id === m.tool_call_id))
    ) {
      return `messages[${i}]: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.`;
    }
  }
  return undefined;
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString();
}
