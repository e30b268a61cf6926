/**
 * The built-in loop's tools: what the model is offered (AGENT_TOOLS) and how
 * one of its tool calls runs in the sandbox, at most once per nonce, ending
 * with a checkpoint of the working tree and the result as the next message.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { shellQuote } from '../workflows/rules/prompts';
import { PLANNING_TOOLS } from '../workflows/rules/plan';
import { NOTES_FILE } from '../workflows/rules/repo-notes';
import { CHILD_TOOL } from '../workflows/rules/children';
import type { ChatMessage, ToolCall, ToolSpec } from '../models/llm';
import { recordEvent, type AuditTrail } from '../store/audit';
import type { ArtifactStore } from '../store/artifacts';
import type { Redactor } from '../platform/scrub';
import {
  permanent,
  tail,
  parseRunOnce,
  runOnceCommand,
  takeCheckpoint,
  toolExecutors,
  APP_LOG_NAME,
  linesAsked,
  readLog,
  type CheckpointStore,
  type SandboxProvider,
} from '../sandbox';
import { callMcpTool, type McpCallInput } from '../mcp/tools';
import type { ToolCallInput, ToolCallRecord } from './contract';
import { messageName, writeMessage } from './conversation';

/** What a tool call uses: the sandbox, the conversation's store, the audit trail, checkpoints, the redactor. */
interface ToolDeps {
  sandboxes: SandboxProvider;
  artifacts: ArtifactStore;
  audit: AuditTrail;
  checkpoints: CheckpointStore;
  redactor: Redactor;
  /** The worker's secrets: an MCP server's headers name some of them (mcp/tools.ts). */
  secrets: Record<string, string>;
}

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
  tool(
    'propose_note',
    "Propose a short note for this repository's later sessions (how to run its tests, a pitfall you met). A maintainer reviews it first.",
    { text: { type: 'string' } },
    ['text'],
  ),
  tool(
    CHILD_TOOL,
    'Start a child session: another agent with its own sandbox on this repo (at the commit you started from) works on the task you give it, ' +
      'and runs its verification. Several start_child calls in one answer run in parallel. You get its outcome, summary and diff, ' +
      'which you may take into your change with git apply. Give it a whole, self-contained task.',
    { task: { type: 'string' } },
    ['task'],
  ),
  tool(
    'service_logs',
    `Read the last lines of a log: of one of the sandbox's services (a database, a cache: by its name) or of the app drydock started ("${APP_LOG_NAME}").`,
    { service: { type: 'string' }, lines: { type: 'number' } },
    ['service'],
  ),
];

function tool(name: string, description: string, properties: Record<string, unknown>, required: string[]): ToolSpec {
  return { type: 'function', function: { name, description, parameters: { type: 'object', properties, required } } };
}

/** See runTool. */
export async function runToolCall(deps: ToolDeps, input: ToolCallInput): Promise<ToolCallRecord> {
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
  if (input.planning && !PLANNING_TOOLS.includes(call.function.name)) {
    return finish(
      `error: ${call.function.name} is not available while you write the plan; read only (${PLANNING_TOOLS.join(', ')}), then answer with the plan`,
      bad(),
    );
  }
  try {
    if (call.function.name === 'service_logs') return finish(...(await serviceLogs(deps, input, str, args.lines)));
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
  deps: ToolDeps,
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

/** service_logs: read by the worker from the engine (no exec for a service), redacted, its end kept within the output limit. */
async function serviceLogs(
  deps: ToolDeps,
  input: ToolCallInput,
  str: (name: string) => string | undefined,
  lines: unknown,
): Promise<[string, ToolOutcome]> {
  const read = await readLog(deps.sandboxes, input.sandbox, str('service')!, linesAsked(lines));
  if (!read.ok) return [`error: ${read.error}`, bad()];
  const text = deps.redactor.text(read.text);
  const truncated = text.length > input.outputLimit;
  const cut = truncated ? `[the log's first lines cut: its last ${input.outputLimit} characters are shown]\n` : '';
  const content = `${cut}${truncated ? text.slice(-input.outputLimit) : text || '(the log is empty)'}`;
  return [content, { ok: true, bytes: text.length, truncated }];
}

interface ToolOutcome {
  ok: boolean;
  exitCode?: number;
  bytes: number;
  truncated: boolean;
}

/** Checkpoints the tree, writes the result the model will see, and returns what the workflow keeps. */
async function finishToolCall(
  deps: ToolDeps,
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
  { sandboxes, redactor }: Pick<ToolDeps, 'sandboxes' | 'redactor'>,
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
    case 'propose_note':
      // Appended to the notes file every agent kind uses; collected after the round (activities/repo-notes.ts).
      return {
        ...quick,
        command: `{ cat ${staged}; printf '\\n---\\n'; } >> ${NOTES_FILE} && echo 'note proposed: a maintainer reviews it after the session'`,
        stdin: str('text')!,
      };
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
  const arg = [args.path, args.command, args.pattern, args.service].find((v) => typeof v === 'string') as
    string | undefined;
  const text = arg ? `${call.function.name} ${arg.replace(/\s+/g, ' ')}` : call.function.name;
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}
