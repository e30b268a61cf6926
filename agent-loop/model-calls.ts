/**
 * The built-in loop's model calls, made by the worker with its own key (never
 * the sandbox's): the endpoint the session may use, the answer's limit within
 * the token and cost budgets, the conversation compacted to the context
 * window, and failures sorted into permanent, rate-limited and retried. Each
 * answer is stored before it is returned, so a retry reuses the paid call.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/api';
import {
  chatCompletion,
  costOf,
  ModelApiError,
  resolveEndpoint,
  type ChatMessage,
  type Endpoint,
  type ModelPrice,
  type ChatResponse,
  type ModelSettings,
} from '../models/llm';
import { compact, FIRST_COMPACTABLE, tighter } from '../models/compaction';
import { recordEvent, type AuditTrail } from '../store/audit';
import type { ArtifactStore } from '../store/artifacts';
import { tail } from '../sandbox';
import type { ModelCallInput, ModelCallResult } from './contract';
import { readMessages, writeMessage } from './conversation';
import { CHILD_TOOL } from '../workflows/rules/children';
import { AGENT_TOOLS, describeToolCall } from './tools';
import { mcpToolSpecs } from '../mcp/tools';
import type { ToolSpec } from '../models/llm';

interface StoredAnswer {
  stopped?: undefined;
  response: ChatResponse;
  durationMs: number;
  model: string;
  compactedBefore: number;
}

/** The endpoint the session asked for, if this worker allows it and can price the model when it must. */
function allowedEndpoint(models: ModelSettings, input: ModelCallInput) {
  const endpoint = resolveEndpoint(models, input.baseUrl);
  if (!endpoint) {
    throw ApplicationFailure.nonRetryable(
      `agent.baseUrl ${input.baseUrl} is not an endpoint this worker allows (DRYDOCK_MODEL_BASE_URL, DRYDOCK_MODEL_ENDPOINTS)`,
      ErrorType.ModelNotAllowed,
    );
  }
  if (input.requirePrice && !models.prices[input.model]) {
    throw ApplicationFailure.nonRetryable(
      `agent.budget.maxCost needs a price for model ${input.model} in the worker's DRYDOCK_MODEL_PRICES`,
      ErrorType.ModelNotAllowed,
    );
  }
  return endpoint;
}

/** Answers below this many tokens are not worth a call: the budget is spent. */
const MIN_OUTPUT_TOKENS = 16;

/**
 * The answer's limit so that the call stays within the token and cost budgets,
 * or which budget it cannot fit. The prompt is estimated from below: at least
 * the previous prompt and its answer, or a character count / 4.
 */
export function outputLimit(
  input: Pick<ModelCallInput, 'maxOutputTokens' | 'remaining' | 'previous'>,
  promptChars: number,
  price: ModelPrice | undefined,
): number | 'max_tokens' | 'max_cost' {
  const prompt = Math.max(
    Math.ceil(promptChars / 4),
    (input.previous?.promptTokens ?? 0) + (input.previous?.completionTokens ?? 0),
  );
  let limit = input.maxOutputTokens;
  if (input.remaining.tokens !== undefined) {
    limit = Math.min(limit, input.remaining.tokens - prompt);
    if (limit < MIN_OUTPUT_TOKENS) return 'max_tokens';
  }
  if (input.remaining.costUsd !== undefined && price) {
    const left = input.remaining.costUsd * 1_000_000 - prompt * price.input;
    if (price.output > 0) limit = Math.min(limit, Math.floor(left / price.output));
    if (limit < MIN_OUTPUT_TOKENS || left <= 0) return 'max_cost';
  }
  return limit;
}

/** See modelCall. */
export async function callModel(
  deps: { artifacts: ArtifactStore; models: ModelSettings; audit: AuditTrail },
  input: ModelCallInput,
): Promise<ModelCallResult> {
  const { artifacts, models, audit } = deps;
  const endpoint = allowedEndpoint(models, input);
  const answerName = `agent/answers/${String(input.messageCount).padStart(6, '0')}.json`;
  const messages = await readMessages(artifacts, input.sessionId, input.messageCount);
  const earlier = await artifacts.get(input.sessionId, answerName);
  // The repo's MCP tools (mcp/tools.ts), when it declares servers, after drydock's own.
  const own = input.children ? AGENT_TOOLS : AGENT_TOOLS.filter((t) => t.function.name !== CHILD_TOOL);
  const tools = [...own, ...(await mcpToolSpecs(artifacts, input.sessionId))];
  const answer: StoredAnswer | { stopped: 'max_tokens' | 'max_cost' } = earlier
    ? (JSON.parse(earlier.toString()) as StoredAnswer)
    : await askWithinWindow(endpoint, input, messages, models.prices[input.model], tools);
  if (answer.stopped) return answer;
  if (!earlier) await artifacts.put(input.sessionId, answerName, JSON.stringify(answer));
  const { message, finishReason, usage } = answer.response;
  await writeMessage(artifacts, input.sessionId, input.messageCount, message);
  const transcript = await artifacts.put(
    input.sessionId,
    'agent/transcript.json',
    JSON.stringify([...messages, message], null, 1),
  );
  const call = {
    type: 'model' as const,
    turn: input.turn,
    model: input.model,
    finishReason,
    durationMs: answer.durationMs,
    costUsd: costOf(models.prices, input.model, usage),
    reused: !!earlier,
    ...usage,
  };
  await recordEvent(audit, {
    sessionId: input.sessionId,
    key: `model-${input.messageCount}`,
    kind: 'model_call',
    actor: 'drydock',
    data: {
      turn: call.turn,
      model: call.model,
      endpoint: input.baseUrl,
      finishReason,
      promptTokens: usage.promptTokens,
      completionTokens: usage.completionTokens,
      cachedTokens: usage.cachedTokens,
      costUsd: call.costUsd,
      durationMs: call.durationMs,
      toolCalls: (message.tool_calls ?? []).map((c) => c.function.name),
    },
  });
  return {
    call,
    toolCalls: (message.tool_calls ?? []).map((c) => ({
      id: c.id,
      name: c.function.name,
      summary: describeToolCall(c),
    })),
    content: tail((message.content ?? '').trim(), 1000),
    transcript,
    compactedBefore: answer.compactedBefore,
    compacted: answer.compactedBefore > Math.max(input.compactedBefore, FIRST_COMPACTABLE),
  };
}

/**
 * The call on the conversation compacted to fit the context window. A
 * context-length error from the provider (its count is the one that matters)
 * compacts further and asks again; when nothing more can be compacted the
 * session fails, saying so. Compaction needs no model call: nothing is paid
 * for it, and a retry after a crash compacts the same way again.
 */
async function askWithinWindow(
  endpoint: Endpoint,
  input: ModelCallInput,
  messages: ChatMessage[],
  price: ModelPrice | undefined,
  tools: ToolSpec[],
): Promise<StoredAnswer | { stopped: 'max_tokens' | 'max_cost' }> {
  const TOOLS_CHARS = JSON.stringify(tools).length;
  for (let atLeast = input.compactedBefore; ;) {
    const fitted = compact(messages, input.contextWindow, atLeast, TOOLS_CHARS);
    if (!fitted) {
      throw ApplicationFailure.nonRetryable(
        `the conversation (${messages.length} messages) does not fit agent.contextWindow ${input.contextWindow} tokens even with older tool outputs compacted: raise agent.contextWindow if the model allows, or split the task`,
        ErrorType.ModelContextTooLong,
      );
    }
    const limit = outputLimit(input, JSON.stringify(fitted.messages).length + TOOLS_CHARS, price);
    if (typeof limit === 'string') return { stopped: limit };
    try {
      const asked = await askModel(endpoint, input, fitted.messages, limit, tools);
      return { ...asked, compactedBefore: fitted.compactedBefore };
    } catch (err) {
      if (!(err instanceof ModelApiError && err.contextTooLong)) throw err;
      Context.current().log.info('context too long for the provider: compacting further', {
        compactedBefore: fitted.compactedBefore,
        estimatedTokens: fitted.tokens,
      });
      atLeast = tighter(messages, fitted.compactedBefore);
    }
  }
}

/** Attempts of a model call that failed for another reason than a rate limit, before it is given up. */
const MODEL_CALL_ATTEMPTS = 5;

/**
 * The model call's activity has no attempt limit (a rate limit is waited out
 * for as long as the wall time lasts), so any other failure (the provider's,
 * or the worker's own: a full disk, a message missing from the store) ends it
 * after MODEL_CALL_ATTEMPTS, with its message, instead of being retried, and
 * maybe paid again, for the rest of the wall time.
 */
export function giveUpAfterAttempts(err: unknown): never {
  const { info, cancellationSignal } = Context.current();
  if (err instanceof ApplicationFailure || cancellationSignal.aborted || info.attempt < MODEL_CALL_ATTEMPTS) throw err;
  throw ApplicationFailure.nonRetryable(
    `${err instanceof Error ? err.message : String(err)} (attempt ${info.attempt} of the model call: given up)`,
    ErrorType.ModelRequest,
  );
}

/**
 * One model call. An answer a retry cannot change (a 4xx, a request the SDK
 * refuses) is permanent; a rate limit is retried when the provider says
 * (Retry-After), for as long as the session's wall time lasts (the workflow
 * bounds the activity by it); other failures a few times (giveUpAfterAttempts).
 */
async function askModel(
  endpoint: Endpoint,
  input: ModelCallInput,
  messages: ChatMessage[],
  maxOutputTokens: number,
  tools: ToolSpec[],
): Promise<Omit<StoredAnswer, 'compactedBefore'>> {
  const started = Date.now();
  try {
    const response = await chatCompletion(
      endpoint,
      { model: input.model, messages, tools, temperature: input.temperature, maxOutputTokens },
      { signal: Context.current().cancellationSignal },
    );
    return { response, durationMs: Date.now() - started, model: input.model };
  } catch (err) {
    if (!(err instanceof ModelApiError) || err.contextTooLong) throw err; // askWithinWindow compacts
    if (!err.retryable) throw ApplicationFailure.nonRetryable(err.message, ErrorType.ModelRequest);
    if (err.status === 429) {
      throw ApplicationFailure.create({
        message: err.message,
        type: ErrorType.ModelRateLimited,
        ...(err.retryAfterMs !== undefined ? { nextRetryDelay: Math.max(1000, err.retryAfterMs) } : {}),
      });
    }
    throw err;
  }
}
