/**
 * A small client of the OpenAI-compatible chat-completions API (OpenAI, vLLM,
 * Ollama, llama.cpp's server, gateways): one POST per call, tool calling,
 * usage. fetch only, no SDK. Runs on the worker: the key never leaves it.
 */

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export type ChatMessage =
  | { role: 'system' | 'user'; content: string }
  | { role: 'assistant'; content: string | null; tool_calls?: ToolCall[] }
  | { role: 'tool'; tool_call_id: string; content: string };

export interface ToolSpec {
  type: 'function';
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  tools?: ToolSpec[];
  temperature?: number;
}

export interface ChatResponse {
  message: Extract<ChatMessage, { role: 'assistant' }>;
  finishReason: string;
  usage: { promptTokens: number; completionTokens: number; totalTokens: number };
}

/** An error answer of the model API; `retryable` for rate limits, timeouts and server errors. */
export class ModelApiError extends Error {
  constructor(
    message: string,
    readonly status: number | undefined,
    readonly retryable: boolean,
  ) {
    super(message);
    this.name = 'ModelApiError';
  }
}

/** USD per million tokens. */
export interface ModelPrice {
  input: number;
  output: number;
}

/** The worker's model settings (lib/config.ts): where sessions may send requests, with which key. */
export interface ModelSettings {
  /** Used when a session names no baseUrl; the default key goes only here. */
  defaultBaseUrl: string;
  defaultApiKey?: string;
  /** Other allowed base URLs and their keys ("" for none). */
  endpoints: Record<string, string>;
  prices: Record<string, ModelPrice>;
}

const normalize = (url: string) => url.replace(/\/+$/, '');

/**
 * The endpoint a session asked for, with the worker's key for it; undefined
 * when the worker does not allow it (a session must not be able to send the
 * worker's key, or its requests, anywhere it likes).
 */
export function resolveEndpoint(
  settings: ModelSettings,
  baseUrl: string | undefined,
): { baseUrl: string; apiKey?: string } | undefined {
  const wanted = normalize(baseUrl ?? settings.defaultBaseUrl);
  if (wanted === normalize(settings.defaultBaseUrl)) return { baseUrl: wanted, apiKey: settings.defaultApiKey };
  for (const [url, key] of Object.entries(settings.endpoints)) {
    if (normalize(url) === wanted) return { baseUrl: wanted, apiKey: key || undefined };
  }
  return undefined;
}

/** Cost of a call in USD, or undefined without a price for the model. */
export function costOf(
  prices: Record<string, ModelPrice>,
  model: string,
  usage: ChatResponse['usage'],
): number | undefined {
  const price = prices[model];
  if (!price) return undefined;
  return (usage.promptTokens * price.input + usage.completionTokens * price.output) / 1_000_000;
}

/** One chat-completions call. */
export async function chatCompletion(
  endpoint: { baseUrl: string; apiKey?: string },
  request: ChatRequest,
  opts: { signal?: AbortSignal } = {},
): Promise<ChatResponse> {
  let res: Response;
  try {
    res = await fetch(`${endpoint.baseUrl}/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(endpoint.apiKey ? { authorization: `Bearer ${endpoint.apiKey}` } : {}),
      },
      body: JSON.stringify(request),
      signal: opts.signal,
    });
  } catch (err) {
    if (opts.signal?.aborted) throw err;
    throw new ModelApiError(`model API unreachable at ${endpoint.baseUrl}: ${(err as Error).message}`, undefined, true);
  }
  const text = await res.text();
  let body: any;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  if (!res.ok) {
    const why = body?.error?.message ?? (text.slice(0, 300) || res.statusText);
    const retryable = res.status === 408 || res.status === 409 || res.status === 429 || res.status >= 500;
    throw new ModelApiError(`model API answered ${res.status}: ${why}`, res.status, retryable);
  }
  const choice = body?.choices?.[0];
  if (!choice?.message) {
    throw new ModelApiError(`model API answered without choices[0].message: ${text.slice(0, 300)}`, res.status, true);
  }
  const toolCalls: ToolCall[] | undefined = Array.isArray(choice.message.tool_calls)
    ? choice.message.tool_calls.map((c: any, i: number) => ({
        // Some servers leave ids out; the conversation needs one per call.
        id: typeof c.id === 'string' && c.id ? c.id : `call_${i}`,
        type: 'function',
        function: { name: String(c.function?.name ?? ''), arguments: String(c.function?.arguments ?? '{}') },
      }))
    : undefined;
  const promptTokens = Number(body.usage?.prompt_tokens ?? 0);
  const completionTokens = Number(body.usage?.completion_tokens ?? 0);
  return {
    message: {
      role: 'assistant',
      content: typeof choice.message.content === 'string' ? choice.message.content : null,
      ...(toolCalls?.length ? { tool_calls: toolCalls } : {}),
    },
    finishReason: String(choice.finish_reason ?? 'stop'),
    usage: {
      promptTokens,
      completionTokens,
      totalTokens: Number(body.usage?.total_tokens ?? promptTokens + completionTokens),
    },
  };
}
