/**
 * The built-in loop's model client, on the AI SDK (`ai` with its Anthropic,
 * OpenAI and OpenAI-compatible providers): one non-streamed call per turn, the
 * tools offered, usage with cached tokens, errors classified for Temporal's
 * retries (a rate limit carries its Retry-After; a prompt too long for the
 * model is told apart). Runs on the worker: the key never leaves it.
 *
 * The conversation is stored in the chat-completions shape (ChatMessage, one
 * artifact per message) and converted to the SDK's messages for each call.
 */
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import {
  APICallError,
  generateText,
  InvalidArgumentError,
  InvalidDataContentError,
  InvalidMessageRoleError,
  InvalidPromptError,
  jsonSchema,
  MessageConversionError,
  MissingToolResultsError,
  tool,
  UnsupportedFunctionalityError,
  type LanguageModel,
  type ModelMessage,
  type ToolSet,
} from 'ai';

import type { MODEL_APIS } from '../platform/config';

export type ModelApi = (typeof MODEL_APIS)[number];

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
  /** The answer's limit (max_tokens / max_output_tokens): bounds what one call can spend. */
  maxOutputTokens: number;
}

export interface Usage {
  /** The whole prompt, cached part included. */
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  /** Of the prompt: read from the provider's cache, and written to it (Anthropic). */
  cachedTokens: number;
  cacheWriteTokens: number;
}

export interface ChatResponse {
  message: Extract<ChatMessage, { role: 'assistant' }>;
  finishReason: string;
  usage: Usage;
}

/** An error answer of the model API; `retryable` for rate limits, timeouts and server errors. */
export class ModelApiError extends Error {
  constructor(
    message: string,
    readonly status: number | undefined,
    readonly retryable: boolean,
    /** The provider said when to come back (Retry-After), in ms. */
    readonly retryAfterMs?: number,
    /** The prompt does not fit the model's context window. */
    readonly contextTooLong = false,
  ) {
    super(message);
    this.name = 'ModelApiError';
  }
}

/** USD per million tokens; cached reads and cache writes at their own rate when given (else `input`). */
export interface ModelPrice {
  input: number;
  output: number;
  cachedInput?: number;
  cacheWrite?: number;
}

export interface Endpoint {
  baseUrl: string;
  api: ModelApi;
  apiKey?: string;
}

/** The worker's model settings (platform/config.ts): where sessions may send requests, with which key. */
export interface ModelSettings {
  /** Used when a session names no baseUrl; the default key goes only here. */
  defaultBaseUrl: string;
  defaultApi: ModelApi;
  defaultApiKey?: string;
  /** Other allowed base URLs: their key ("" for none), or their API and key. */
  endpoints: Record<string, string | { api: ModelApi; key?: string }>;
  prices: Record<string, ModelPrice>;
}

const normalize = (url: string) => url.replace(/\/+$/, '');

/**
 * The endpoint a session asked for, with the worker's key for it; undefined
 * when the worker does not allow it (a session must not be able to send the
 * worker's key, or its requests, anywhere it likes).
 */
export function resolveEndpoint(settings: ModelSettings, baseUrl: string | undefined): Endpoint | undefined {
  const wanted = normalize(baseUrl ?? settings.defaultBaseUrl);
  if (wanted === normalize(settings.defaultBaseUrl)) {
    return { baseUrl: wanted, api: settings.defaultApi, apiKey: settings.defaultApiKey };
  }
  for (const [url, value] of Object.entries(settings.endpoints)) {
    if (normalize(url) !== wanted) continue;
    const { api, key } = typeof value === 'string' ? { api: 'compatible' as const, key: value } : value;
    return { baseUrl: wanted, api, apiKey: key || undefined };
  }
  return undefined;
}

/** Cost of a call in USD, or undefined without a price for the model. */
export function costOf(prices: Record<string, ModelPrice>, model: string, usage: Usage): number | undefined {
  const price = prices[model];
  if (!price) return undefined;
  const fresh = Math.max(0, usage.promptTokens - usage.cachedTokens - usage.cacheWriteTokens);
  return (
    (fresh * price.input +
      usage.cachedTokens * (price.cachedInput ?? price.input) +
      usage.cacheWriteTokens * (price.cacheWrite ?? price.input) +
      usage.completionTokens * price.output) /
    1_000_000
  );
}

/** The SDK's model for an endpoint. */
function languageModel(endpoint: Endpoint, model: string): LanguageModel {
  const common = { baseURL: endpoint.baseUrl, apiKey: endpoint.apiKey ?? '' };
  switch (endpoint.api) {
    case 'anthropic':
      return createAnthropic(common)(model);
    case 'openai':
      return createOpenAI(common).responses(model);
    case 'openai-chat':
      return createOpenAI(common).chat(model);
    case 'compatible':
      return createOpenAICompatible({
        name: 'compatible',
        baseURL: endpoint.baseUrl,
        ...(endpoint.apiKey ? { apiKey: endpoint.apiKey } : {}),
        fetch: lenientChatFetch,
      })(model);
  }
}

/**
 * Some compatible servers answer outside the OpenAI schema: content as an
 * array of parts, tool arguments as an object. Both are put in the schema's
 * shape instead of being dropped or refused.
 */
const lenientChatFetch: typeof fetch = async (input, init) => {
  const res = await fetch(input, init);
  if (!res.ok || !res.headers.get('content-type')?.includes('application/json')) return res;
  const body = await res.text();
  let fixed = body;
  try {
    fixed = JSON.stringify(normalizeChatAnswer(JSON.parse(body)));
  } catch {
    // not JSON after all: the SDK reports it
  }
  return new Response(fixed, { status: res.status, statusText: res.statusText, headers: res.headers });
};

/** See lenientChatFetch. */
export function normalizeChatAnswer(body: any): any {
  for (const choice of Array.isArray(body?.choices) ? body.choices : []) {
    const message = choice?.message;
    if (!message) continue;
    if (Array.isArray(message.content)) {
      message.content = message.content
        .map((p: any) => (typeof p === 'string' ? p : typeof p?.text === 'string' ? p.text : ''))
        .join('');
    }
    for (const call of Array.isArray(message.tool_calls) ? message.tool_calls : []) {
      if (call?.function && typeof call.function.arguments !== 'string') {
        call.function.arguments = JSON.stringify(call.function.arguments ?? {});
      }
    }
  }
  return body;
}

function parseArguments(text: string): unknown {
  try {
    return JSON.parse(text || '{}');
  } catch {
    return text;
  }
}

/** The stored conversation as the SDK's messages. */
export function toModelMessages(messages: ChatMessage[]): ModelMessage[] {
  const names = new Map<string, string>();
  return messages.map((m): ModelMessage => {
    if (m.role === 'system' || m.role === 'user') return { role: m.role, content: m.content };
    if (m.role === 'assistant') {
      for (const c of m.tool_calls ?? []) names.set(c.id, c.function.name);
      return {
        role: 'assistant',
        content: [
          ...(m.content ? [{ type: 'text' as const, text: m.content }] : []),
          ...(m.tool_calls ?? []).map((c) => ({
            type: 'tool-call' as const,
            toolCallId: c.id,
            toolName: c.function.name,
            input: parseArguments(c.function.arguments),
          })),
        ],
      };
    }
    const result = m as Extract<ChatMessage, { role: 'tool' }>;
    return {
      role: 'tool',
      content: [
        {
          type: 'tool-result',
          toolCallId: result.tool_call_id,
          toolName: names.get(result.tool_call_id) ?? 'unknown',
          output: { type: 'text', value: result.content },
        },
      ],
    };
  });
}

function toolSet(tools: ToolSpec[]): ToolSet {
  return Object.fromEntries(
    tools.map((t) => [
      t.function.name,
      tool({ description: t.function.description, inputSchema: jsonSchema(t.function.parameters as any) }),
    ]),
  );
}

/** One model call (no retries here: Temporal retries the activity). */
export async function chatCompletion(
  endpoint: Endpoint,
  request: ChatRequest,
  opts: { signal?: AbortSignal } = {},
): Promise<ChatResponse> {
  let result: Awaited<ReturnType<typeof generateText>>;
  try {
    result = await generateText({
      model: languageModel(endpoint, request.model),
      messages: toModelMessages(request.messages),
      // Message 0 is drydock's own system prompt (activities/agent.ts), never outside input.
      allowSystemInMessages: true,
      ...(request.tools?.length ? { tools: toolSet(request.tools) } : {}),
      temperature: request.temperature,
      maxOutputTokens: request.maxOutputTokens,
      maxRetries: 0,
      abortSignal: opts.signal,
    });
  } catch (err) {
    if (opts.signal?.aborted) throw err;
    throw classify(err, endpoint);
  }
  const toolCalls: ToolCall[] = result.toolCalls.map((c) => ({
    id: c.toolCallId,
    type: 'function',
    function: {
      name: c.toolName,
      arguments: typeof c.input === 'string' ? c.input : JSON.stringify(c.input ?? {}),
    },
  }));
  const prompt = result.usage.inputTokens ?? 0;
  const completion = result.usage.outputTokens ?? 0;
  return {
    message: {
      role: 'assistant',
      content: result.text || null,
      ...(toolCalls.length ? { tool_calls: toolCalls } : {}),
    },
    finishReason: result.finishReason,
    usage: {
      promptTokens: prompt,
      completionTokens: completion,
      totalTokens: prompt + completion,
      cachedTokens: result.usage.inputTokenDetails?.cacheReadTokens ?? 0,
      cacheWriteTokens: result.usage.inputTokenDetails?.cacheWriteTokens ?? 0,
    },
  };
}

/**
 * The SDK's refusals of the request itself, before anything is sent (a
 * conversation it cannot convert, an argument out of range): the same request
 * fails the same way on every retry.
 */
const REFUSED_REQUEST = [
  InvalidPromptError,
  InvalidArgumentError,
  InvalidMessageRoleError,
  InvalidDataContentError,
  MessageConversionError,
  MissingToolResultsError,
  UnsupportedFunctionalityError,
];

/** A failed call as a ModelApiError: retryable or not, with Retry-After and the context-length case. */
export function classify(err: unknown, endpoint: Endpoint): ModelApiError {
  if (!APICallError.isInstance(err)) {
    const message = err instanceof Error ? err.message : String(err);
    const refused = REFUSED_REQUEST.some((type) => type.isInstance(err));
    return new ModelApiError(
      refused
        ? `the request to ${endpoint.baseUrl} is invalid: ${message}`
        : `model API at ${endpoint.baseUrl}: ${message}`,
      undefined,
      !refused,
    );
  }
  const status = err.statusCode;
  const body = err.responseBody ?? '';
  const why = err.message || body.slice(0, 300);
  const contextTooLong =
    status === 400 && /context_length_exceeded|prompt is too long|maximum context length|context window/i.test(body);
  const retryable = status === undefined || [408, 409, 429].includes(status) || status >= 500;
  return new ModelApiError(
    `model API answered ${status ?? 'nothing'}: ${why}`,
    status,
    retryable,
    retryAfterMs(err.responseHeaders ?? {}),
    contextTooLong,
  );
}

/** Retry-After (seconds or an HTTP date) or retry-after-ms, in ms. */
export function retryAfterMs(headers: Record<string, string>, now = Date.now()): number | undefined {
  const ms = Number(headers['retry-after-ms']);
  if (Number.isFinite(ms) && ms >= 0 && headers['retry-after-ms'] !== undefined) return ms;
  const value = headers['retry-after'];
  if (value === undefined) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}
