/**
 * The built-in agent loop's side of the worker: model calls (with the
 * worker's key, never the sandbox's) and tool calls (in the sandbox). The
 * conversation lives in the artifact store as one file per message
 * (`agent/messages/<index>.json`), so workflow history carries only indexes
 * and summaries, and a retried activity finds what an earlier attempt did.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType, type AgentCall } from '../workflows/api';
import { shellQuote } from '../workflows/rules/prompts';
import {
  chatCompletion,
  costOf,
  ModelApiError,
  resolveEndpoint,
  type ChatMessage,
  type Endpoint,
  type ModelPrice,
  type ChatResponse,
  type ToolCall,
  type ToolSpec,
} from '../models/llm';
import { compact, FIRST_COMPACTABLE, tighter } from '../models/compaction';
import { recordEvent } from '../store/audit';
import { permanent } from '../sandbox/activities/container';
import type { ActivityDeps } from './deps';
import { tail } from '../sandbox/activities/output';
import { parseRunOnce, runOnceCommand } from '../sandbox/activities/run-once';
import { sandboxOf, type ShellScript } from '../sandbox/handle';
import { takeCheckpoint } from '../sandbox/activities/steps';
import { toolExecutors } from '../sandbox/activities/tool-exec';
import { callMcpTool, mcpToolSpecs, type McpCallInput } from '../mcp/tools';

/** Characters of the repo's AGENTS.md that go into the system prompt. */
const MAX_INSTRUCTIONS = 20_000;

export const AGENT_TOOLS: ToolSpec[] = [
  tool('read_file', 'Read a file of the repository.', { path: { type: 'string' } }, ['path']),
  tool(
    'write_file',
    'Create or overwrite a file with the given content.',
    { path: { type: 'string' }, content: { type: 'string' } },
    ['path', 'content'],
  ),
  tool(
    'edit_file',
    'Replace exactly one occurrence of old_string in a file with new_string (give enough context to be unique).',
    { path: { type: 'string' }, old_string: { type: 'string' }, new_string: { type: 'string' } },
    ['path', 'old_string', 'new_string'],
  ),
  tool(
    'list_files',
    'List the files of the repository (tracked and new, not ignored), under a folder if given.',
    { path: { type: 'string' } },
    [],
  ),
  tool(
    'search',
    'Search file contents with a regular expression (grep -E), under a folder if given.',
    { pattern: { type: 'string' }, path: { type: 'string' } },
    ['pattern'],
  ),
  tool(
    'run',
    'Run a shell command in the repository (no network). Returns the exit code and output.',
    { command: { type: 'string' }, timeout_seconds: { type: 'number' } },
    ['command'],
  ),
];

function tool(name: string, description: string, properties: Record<string, unknown>, required: string[]): ToolSpec {
  return { type: 'function', function: { name, description, parameters: { type: 'object', properties, required } } };
}

/** The system prompt: the task's frame, the repo's own instructions, how the change will be checked. */
export function systemPrompt(opts: { instructions?: string; verifyCommand?: string }): string {
  return [
    'You are a coding agent working in a git repository at /workspace, in a sandbox without network.',
    'Use the tools to read and change files and to run commands. Make the smallest change that does the task.',
    'Do not commit, push or create branches: drydock commits your change and a person reviews it.',
    opts.verifyCommand
      ? `When you are done, the change is verified with: ${opts.verifyCommand}\nRun it yourself before you finish.`
      : 'There is no verification command; check your change yourself.',
    'When the task is done, answer with a short summary of what you changed and no tool call.',
    ...(opts.instructions
      ? ["The repository's instructions for agents (AGENTS.md):", '<agents-md>', opts.instructions, '</agents-md>']
      : []),
  ].join('\n\n');
}

export interface StartModelAgentInput {
  sandbox: string;
  sessionId: string;
  task: string;
  verifyCommand?: string;
}

export interface ModelCallInput {
  sandbox: string;
  sessionId: string;
  baseUrl?: string;
  model: string;
  temperature?: number;
  turn: number;
  /** Messages so far; the answer becomes message `messageCount`. */
  messageCount: number;
  /** The session has a cost budget: refuse to call a model without a price. */
  requirePrice: boolean;
  /** The answer's limit (max_tokens), lowered further to fit what is left of the budgets. */
  maxOutputTokens: number;
  /** What is left of the token and cost budgets, if the session has them. */
  remaining: { tokens?: number; costUsd?: number };
  /** Usage of the previous model call: the next prompt holds at least its prompt and answer. */
  previous?: { promptTokens: number; completionTokens: number };
  /** The model's context window in tokens (agent.contextWindow): older turns are compacted to fit it. */
  contextWindow: number;
  /** Messages before this index are already compacted (models/compaction.ts); 0 at first. */
  compactedBefore: number;
}

export type ModelCallResult = ModelAnswer | { stopped: 'max_tokens' | 'max_cost' };

export interface ModelAnswer {
  stopped?: undefined;
  call: Extract<AgentCall, { type: 'model' }>;
  /** The tool calls the model asked for, in order (their arguments stay in the artifact store). */
  toolCalls: { id: string; name: string; summary: string }[];
  /** The model's text, trimmed. */
  content: string;
  transcript: string;
  /** Messages before this index were compacted for the call (models/compaction.ts). */
  compactedBefore: number;
  /** Further than asked: a new compaction. */
  compacted: boolean;
}

export interface ToolCallInput {
  sandbox: string;
  sessionId: string;
  turn: number;
  /** The assistant message that asked for the call, and which of its calls. */
  assistantIndex: number;
  callIndex: number;
  /** The tool result becomes this message. */
  index: number;
  /** The call's nonce (32 hex digits, from the workflow): names its run-once record in the sandbox. */
  nonce: string;
  outputLimit: number;
  runTimeoutMs: number;
  /** When the call ends, the working tree against this base commit is the session's new checkpoint. */
  checkpointBase: string;
  /** An MCP tool's call, as the workflow settled it (workflows/rules/mcp.ts): made by the worker, not in the sandbox. */
  mcp?: McpCallInput['call'];
}

interface StoredAnswer {
  stopped?: undefined;
  response: ChatResponse;
  durationMs: number;
  model: string;
  compactedBefore: number;
}

type ToolCallRecord = Extract<AgentCall, { type: 'tool' }>;

/** The repo's AGENTS.md, at most $1 bytes of it; exit 1 when there is none. */
const READ_INSTRUCTIONS: ShellScript = { name: 'read', text: 'test -f AGENTS.md && head -c "$1" AGENTS.md' };

export const messageName = (index: number) => `agent/messages/${String(index).padStart(6, '0')}.json`;

/** What the built-in loop needs: the model settings, the sandbox for its tools, its stores. */
type AgentDeps = Pick<
  ActivityDeps,
  'sandboxes' | 'artifacts' | 'audit' | 'checkpoints' | 'models' | 'redactor' | 'secrets'
>;

export function createAgentActivities(deps: AgentDeps) {
  const { sandboxes, artifacts } = deps;
  return {
    /** Writes the first two messages (system prompt with the repo's AGENTS.md, the task). */
    async startModelAgent(input: StartModelAgentInput): Promise<{ messageCount: number; instructions: boolean }> {
      const found = await sandboxOf(sandboxes, input.sandbox)
        .commands.script(READ_INSTRUCTIONS, [String(MAX_INSTRUCTIONS)])
        .catch(permanent);
      const instructions = found.exitCode === 0 ? found.stdout.toString() : undefined;
      await writeMessage(artifacts, input.sessionId, 0, {
        role: 'system',
        content: systemPrompt({ instructions, verifyCommand: input.verifyCommand }),
      });
      await writeMessage(artifacts, input.sessionId, 1, { role: 'user', content: input.task });
      return { messageCount: 2, instructions: instructions !== undefined };
    },

    /** Adds a message from drydock (the failed verification) to the conversation. */
    async addAgentMessage(input: { sessionId: string; index: number; content: string }): Promise<void> {
      await writeMessage(artifacts, input.sessionId, input.index, { role: 'user', content: input.content });
    },

    /**
     * One model call with the conversation so far. The answer is recorded
     * before it is returned, so a retry after a crash reuses the paid call.
     */
    async modelCall(input: ModelCallInput): Promise<ModelCallResult> {
      return callModel(deps, input).catch(giveUpAfterAttempts);
    },

    /** Runs one tool call of the model in the sandbox, at most once; its result becomes message `index`. */
    async runTool(input: ToolCallInput): Promise<ToolCallRecord> {
      return runToolCall(deps, input);
    },
  };
}

async function readMessages(artifacts: ActivityDeps['artifacts'], sessionId: string, count: number) {
  const messages: ChatMessage[] = [];
  for (let i = 0; i < count; i++) {
    const stored = await artifacts.get(sessionId, messageName(i));
    if (!stored) throw new Error(`message ${i} of the conversation is missing from the artifact store`);
    messages.push(JSON.parse(stored.toString()) as ChatMessage);
  }
  return messages;
}

async function writeMessage(
  artifacts: ActivityDeps['artifacts'],
  sessionId: string,
  index: number,
  message: ChatMessage,
): Promise<void> {
  await artifacts.put(sessionId, messageName(index), JSON.stringify(message));
}

/** The endpoint the session asked for, if this worker allows it and can price the model when it must. */
function allowedEndpoint(models: ActivityDeps['models'], input: ModelCallInput) {
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
async function callModel(deps: AgentDeps, input: ModelCallInput): Promise<ModelCallResult> {
  const { artifacts, models, audit } = deps;
  const endpoint = allowedEndpoint(models, input);
  const answerName = `agent/answers/${String(input.messageCount).padStart(6, '0')}.json`;
  const messages = await readMessages(artifacts, input.sessionId, input.messageCount);
  const earlier = await artifacts.get(input.sessionId, answerName);
  // The repo's MCP tools (mcp/tools.ts), when it declares servers, after drydock's own.
  const tools = [...AGENT_TOOLS, ...(await mcpToolSpecs(artifacts, input.sessionId))];
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
function giveUpAfterAttempts(err: unknown): never {
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

/** See runTool. */
async function runToolCall(deps: AgentDeps, input: ToolCallInput): Promise<ToolCallRecord> {
  const stored = await deps.artifacts.get(input.sessionId, messageName(input.assistantIndex));
  if (!stored) throw new Error(`message ${input.assistantIndex} of the conversation is missing`);
  const assistant = JSON.parse(stored.toString()) as ChatMessage;
  const call = assistant.role === 'assistant' ? assistant.tool_calls?.[input.callIndex] : undefined;
  if (!call)
    throw ApplicationFailure.nonRetryable(`no tool call ${input.callIndex} in message ${input.assistantIndex}`);
  if (input.mcp) return runMcpToolCall(deps, input, call, input.mcp);
  const started = Date.now();
  const key = `agent-${String(input.index).padStart(6, '0')}`;
  const finish = (content: string, result: ToolOutcome) =>
    finishToolCall(deps, input, { call, key, started }, content, result);
  let args: Record<string, unknown>;
  try {
    args = JSON.parse(call.function.arguments || '{}');
    if (typeof args !== 'object' || args === null) throw new Error('not an object');
  } catch (err) {
    return finish(`error: the arguments are not a JSON object (${(err as Error).message})`, bad());
  }
  const str = (name: string, required = true): string | undefined => {
    const v = args[name];
    if (typeof v === 'string') return v;
    if (required) throw new ToolInputError(`error: "${name}" (a string) is required`);
    return undefined;
  };
  try {
    const shell = toolCommand(call.function.name, str, args, input);
    if (!shell) return finish(`error: unknown tool "${call.function.name}"`, bad());
    const run = await runOnce(deps, input.sandbox, input.nonce, shell.command, {
      timeoutMs: shell.timeoutMs,
      limit: input.outputLimit,
      stdin: shell.stdin,
    });
    const ok = shell.okCodes.includes(run.exitCode);
    const cut = run.truncated
      ? `\n[output truncated: the first ${input.outputLimit} of ${run.bytes} bytes are shown]`
      : '';
    const content =
      call.function.name === 'run'
        ? `exit code ${run.exitCode}${run.exitCode === 124 ? ' (timed out)' : ''}\n${run.output}${cut}`
        : `${ok ? '' : `error (exit code ${run.exitCode}): `}${run.output || (ok ? shell.empty : '')}${cut}`;
    return finish(content, { ok, exitCode: run.exitCode, bytes: run.bytes, truncated: run.truncated });
  } catch (err) {
    if (err instanceof ToolInputError) return finish(err.message, bad());
    return permanent(err);
  }
}

/** An MCP tool's call (mcp/tools.ts): made by the worker; its result becomes the tool message. */
async function runMcpToolCall(
  deps: AgentDeps,
  input: ToolCallInput,
  call: ToolCall,
  settled: McpCallInput['call'],
): Promise<ToolCallRecord> {
  const done = await callMcpTool(deps, {
    sessionId: input.sessionId,
    turn: input.turn,
    index: input.index,
    name: call.function.name,
    arguments: call.function.arguments ?? '',
    call: settled,
  });
  await writeMessage(deps.artifacts, input.sessionId, input.index, {
    role: 'tool',
    tool_call_id: call.id,
    content: done.content,
  });
  return done.record;
}

interface ToolOutcome {
  ok: boolean;
  exitCode?: number;
  bytes: number;
  truncated: boolean;
}

/** Checkpoints the tree, writes the result the model will see, and returns what the workflow keeps. */
async function finishToolCall(
  deps: AgentDeps,
  input: ToolCallInput,
  at: { call: ToolCall; key: string; started: number },
  content: string,
  result: ToolOutcome,
): Promise<ToolCallRecord> {
  const { call } = at;
  // Through the executor too: a tool call and its checkpoint together cost no docker exec.
  await takeCheckpoint(deps, toolExecutors(deps.sandboxes).sandbox(input.sandbox), {
    sandbox: input.sandbox,
    sessionId: input.sessionId,
    step: at.key,
    baseCommit: input.checkpointBase,
  });
  await writeMessage(deps.artifacts, input.sessionId, input.index, { role: 'tool', tool_call_id: call.id, content });
  await recordEvent(deps.audit, {
    sessionId: input.sessionId,
    key: `tool-${input.index}`,
    kind: 'tool_call',
    actor: 'agent',
    data: {
      turn: input.turn,
      tool: call.function.name,
      arguments: tail(call.function.arguments ?? '', 2_000),
      ok: result.ok,
      exitCode: result.exitCode,
      durationMs: Date.now() - at.started,
      outputBytes: result.bytes,
      truncated: result.truncated,
    },
  });
  return {
    type: 'tool',
    turn: input.turn,
    tool: call.function.name,
    summary: describeToolCall(call),
    ok: result.ok,
    exitCode: result.exitCode,
    durationMs: Date.now() - at.started,
    outputBytes: result.bytes,
    truncated: result.truncated,
  };
}

/**
 * Runs a shell command once per nonce (drydock-run) through the sandbox's
 * tool executor, with `stdin` as its input ($DRYDOCK_INPUT); output cut to
 * `limit` and scrubbed (it goes to the model and the history).
 */
async function runOnce(
  { sandboxes, redactor }: Pick<ActivityDeps, 'sandboxes' | 'redactor'>,
  sandbox: string,
  nonce: string,
  command: string,
  opts: { timeoutMs: number; limit: number; stdin?: string },
): Promise<{ exitCode: number; output: string; bytes: number; truncated: boolean }> {
  const once = runOnceCommand(nonce, command, opts);
  const run = await toolExecutors(sandboxes).exec(sandbox, once.argv, {
    env: once.env,
    stdin: once.stdin,
    signal: Context.current().cancellationSignal,
  });
  const answer = parseRunOnce(run, nonce);
  if (!answer) throw new Error(`drydock-run failed: ${tail(`${run.stderr}${run.stdout}`.trim(), 500)}`);
  return {
    exitCode: answer.exitCode,
    output: redactor.text(answer.output.toString()),
    bytes: answer.bytes,
    truncated: answer.bytes > opts.limit,
  };
}

const bad = () => ({ ok: false, bytes: 0, truncated: false });

class ToolInputError extends Error {}

/** The shell command of a tool call (arguments quoted, never interpreted), or undefined for an unknown tool. */
function toolCommand(
  name: string,
  str: (name: string, required?: boolean) => string | undefined,
  args: Record<string, unknown>,
  input: ToolCallInput,
): { command: string; timeoutMs: number; okCodes: number[]; empty: string; stdin?: string } | undefined {
  const quick = { timeoutMs: 60_000, okCodes: [0], empty: '' };
  const staged = '"$DRYDOCK_INPUT"';
  switch (name) {
    case 'read_file':
      return { ...quick, command: `cat -- ${shellQuote(str('path')!)}`, empty: '(empty file)' };
    case 'write_file': {
      const path = shellQuote(str('path')!);
      return {
        ...quick,
        command: `mkdir -p "$(dirname -- ${path})" && cp ${staged} ${path} && echo "wrote $(wc -c < ${path}) bytes"`,
        stdin: str('content')!,
      };
    }
    case 'edit_file':
      return {
        ...quick,
        command: `node -e ${shellQuote(EDIT_SCRIPT)} ${staged}`,
        stdin: JSON.stringify({ path: str('path')!, old: str('old_string')!, new: str('new_string')! }),
      };
    case 'list_files': {
      const under = str('path', false) ?? '.';
      return {
        ...quick,
        command: `git ls-files --cached --others --exclude-standard -- ${shellQuote(under)}`,
        empty: '(no files)',
      };
    }
    case 'search': {
      const under = str('path', false) ?? '.';
      return {
        ...quick,
        command: `grep -rnIE --exclude-dir=.git -e ${shellQuote(str('pattern')!)} -- ${shellQuote(under)}`,
        // grep: 1 = nothing found, which is an answer, not a failure.
        okCodes: [0, 1],
        empty: '(no matches)',
      };
    }
    case 'run': {
      const asked = typeof args.timeout_seconds === 'number' ? args.timeout_seconds * 1000 : input.runTimeoutMs;
      return {
        command: str('command')!,
        timeoutMs: Math.max(1000, Math.min(asked, input.runTimeoutMs)),
        okCodes: [0],
        empty: '',
      };
    }
    default:
      return undefined;
  }
}

/** edit_file in the sandbox: exactly one occurrence of `old` becomes `new`. */
const EDIT_SCRIPT = `
const fs = require('fs');
const { path, old, new: replacement } = JSON.parse(fs.readFileSync(process.argv[1], 'utf8'));
let text;
try { text = fs.readFileSync(path, 'utf8'); } catch (e) { console.log('cannot read ' + path + ': ' + e.code); process.exit(1); }
const count = old === '' ? 0 : text.split(old).length - 1;
if (count !== 1) {
  console.log(count === 0 ? 'old_string not found in ' + path : 'old_string found ' + count + ' times in ' + path + ': give more context');
  process.exit(1);
}
const at = text.indexOf(old);
fs.writeFileSync(path, text.slice(0, at) + replacement + text.slice(at + old.length));
console.log('edited ' + path);
`;

/** "edit_file src/app.ts", "run npm test": for status and the timeline. */
export function describeToolCall(call: ToolCall): string {
  let args: Record<string, unknown> = {};
  try {
    args = JSON.parse(call.function.arguments || '{}') ?? {};
  } catch {
    // shown without arguments
  }
  const arg = [args.path, args.command, args.pattern].find((v) => typeof v === 'string') as string | undefined;
  const text = arg ? `${call.function.name} ${arg.replace(/\s+/g, ' ')}` : call.function.name;
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}
