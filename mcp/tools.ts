/**
 * The built-in loop's MCP tools, on the worker: at the conversation's start
 * the repo's declared servers are asked for their tools, and the allowlisted
 * ones become tool specs the model is offered (in the artifact store beside
 * the conversation, so history holds only their names); each call the model
 * makes is made here, bounded, scrubbed, fenced as untrusted text, and
 * audited by size (the arguments and the result themselves are not kept in
 * the audit trail). The workflow has already decided it may run
 * (workflows/rules/mcp.ts) and, for a writing tool, that it was approved.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import type { ToolSpec } from '../models/llm';
import type { ArtifactStore } from '../store/artifacts';
import type { AuditTrail } from '../store/audit';
import type { Redactor } from '../platform/scrub';
import { mcpToolName } from '../workflows/rules/mcp';
import type { AgentCall } from '../workflows/api';
import type { McpServer } from '../workflows/mcp-servers';
import { listTools, resultText, withMcpClient } from './client';

/** Where the offered tool specs are kept, per session. */
export const MCP_TOOLS_ARTIFACT = 'agent/mcp-tools.json';
/** A tool description longer than this is cut; a larger input schema leaves the tool out. */
const MAX_DESCRIPTION = 1_000;
const MAX_SCHEMA_CHARS = 8_000;

export interface McpDeps {
  artifacts: ArtifactStore;
  audit: AuditTrail;
  redactor: Redactor;
  /** The worker's secrets (DRYDOCK_SECRET_<NAME>): a server's headers name some of them. */
  secrets: Record<string, string>;
}

/** What the listing found: the tools offered (as the model names them), and what is missing and why. */
export interface McpToolListing {
  tools: string[];
  problems: string[];
}

/** The tools the model is offered in this session (none when the repo declares no server). */
export async function mcpToolSpecs(artifacts: ArtifactStore, sessionId: string): Promise<ToolSpec[]> {
  const stored = await artifacts.get(sessionId, MCP_TOOLS_ARTIFACT);
  return stored ? (JSON.parse(stored.toString()) as ToolSpec[]) : [];
}

export function createMcpActivities(deps: McpDeps) {
  return {
    /**
     * Asks each declared server for its tools and keeps the allowlisted ones as
     * the session's tool specs. A server that cannot be reached, or a tool it
     * does not list, is named in `problems` and left out: the session goes on
     * with the rest. A missing worker secret fails the session (the operator's to fix).
     */
    async listMcpTools(input: { sessionId: string; servers: McpServer[] }): Promise<McpToolListing> {
      const specs: ToolSpec[] = [];
      const problems: string[] = [];
      for (const server of input.servers) {
        try {
          const listed = await withMcpClient(server, deps.secrets, (c) => listTools(c, server, signal()), signal());
          specs.push(...offered(server, listed, problems));
        } catch (err) {
          if (err instanceof ApplicationFailure) throw err;
          problems.push(
            `MCP server ${server.name} did not answer its tool list: ${deps.redactor.text(messageOf(err))}`,
          );
        }
      }
      await deps.artifacts.put(input.sessionId, MCP_TOOLS_ARTIFACT, JSON.stringify(specs));
      return { tools: specs.map((s) => s.function.name), problems };
    },
  };
}

/** The allowlisted tools of a listing as tool specs; each allowlisted tool not offered is a problem. */
export function offered(
  server: McpServer,
  listed: Awaited<ReturnType<typeof listTools>>,
  problems: string[],
): ToolSpec[] {
  const specs: ToolSpec[] = [];
  for (const name of server.tools) {
    const tool = listed.find((t) => t.name === name);
    if (!tool) {
      problems.push(`MCP server ${server.name} does not list the allowlisted tool ${name}`);
      continue;
    }
    if (JSON.stringify(tool.inputSchema).length > MAX_SCHEMA_CHARS) {
      problems.push(`MCP server ${server.name}'s tool ${name} has an input schema over ${MAX_SCHEMA_CHARS} characters`);
      continue;
    }
    const said = (tool.description ?? '').slice(0, MAX_DESCRIPTION);
    specs.push({
      type: 'function',
      function: {
        name: mcpToolName(server.name, name),
        description: `Tool ${name} of the MCP server ${server.name}, outside the sandbox${server.writes.includes(name) ? '; it changes something there, so each call waits for a person to approve it' : ''}. Its server describes it as: ${said}`,
        parameters: tool.inputSchema,
      },
    });
  }
  return specs;
}

/** One call the model asked for, as the workflow settled it: made, or refused with its reason. */
export interface McpCallInput {
  sessionId: string;
  turn: number;
  /** The tool result becomes this message. */
  index: number;
  /** The model's function name (mcp__<server>__<tool>) and its arguments (JSON). */
  name: string;
  arguments: string;
  call: { server: McpServer; tool: string; writes: boolean } | { refused: string; server?: string; tool: string };
  /** Names the call's artifacts and audit event instead of `index` (an agent CLI's call through the gateway). */
  key?: string;
  /** The agent CLI's step that made the call through the gateway. */
  step?: string;
}

/** What the model reads and what the workflow keeps of one MCP call. */
export interface McpCallOutcome {
  content: string;
  record: Extract<AgentCall, { type: 'tool' }>;
}

interface StoredResult {
  content: string;
  ok: boolean;
  bytes: number;
  truncated: boolean;
  durationMs: number;
}

const callName = (input: McpCallInput) => input.key ?? String(input.index).padStart(6, '0');
const resultName = (input: McpCallInput) => `agent/mcp/${callName(input)}.json`;
const startedName = (input: McpCallInput) => `agent/mcp/${callName(input)}.started`;

/**
 * Makes (or refuses) one MCP call of the model. The result is recorded before
 * it is returned, so a retry reuses it; a writing tool is called at most once:
 * a retry that finds it started without a result says so instead of calling again.
 */
export async function callMcpTool(
  deps: McpDeps,
  input: McpCallInput,
  activity: McpCallActivity = currentActivity(),
): Promise<McpCallOutcome> {
  const abort = activity.signal;
  const started = Date.now();
  const stored = await deps.artifacts.get(input.sessionId, resultName(input));
  const result: StoredResult = stored
    ? (JSON.parse(stored.toString()) as StoredResult)
    : await makeCall(deps, input, started, abort);
  if (!stored) await deps.artifacts.put(input.sessionId, resultName(input), JSON.stringify(result));
  const call = input.call;
  await deps.audit.append(
    {
      activityId: activity.activityId,
      attempt: activity.attempt,
      sessionId: input.sessionId,
      key: input.key ? `mcp-${input.key}` : `mcp-${input.index}`,
      kind: 'mcp_call',
      actor: 'agent',
      data: {
        ...(input.step ? { step: input.step, via: 'gateway' } : { turn: input.turn }),
        server: 'refused' in call ? call.server : call.server.name,
        tool: call.tool,
        ...('refused' in call ? { refused: call.refused } : { writes: call.writes }),
        argumentsBytes: Buffer.byteLength(input.arguments ?? ''),
        resultBytes: result.bytes,
        truncated: result.truncated,
        ok: result.ok,
        durationMs: result.durationMs,
      },
    },
    abort,
  );
  return {
    content: result.content,
    record: {
      type: 'tool',
      turn: input.turn,
      tool: input.name,
      summary: input.name.length > 80 ? `${input.name.slice(0, 77)}...` : input.name,
      ok: result.ok,
      durationMs: result.durationMs,
      outputBytes: result.bytes,
      truncated: result.truncated,
    },
  };
}

async function makeCall(
  deps: McpDeps,
  input: McpCallInput,
  started: number,
  abort: AbortSignal,
): Promise<StoredResult> {
  const { call } = input;
  const failed = (content: string): StoredResult => ({
    content: `error: ${content}`,
    ok: false,
    bytes: 0,
    truncated: false,
    durationMs: Date.now() - started,
  });
  if ('refused' in call) return failed(call.refused);
  let args: unknown;
  try {
    args = JSON.parse(input.arguments || '{}');
  } catch (err) {
    return failed(`the arguments are not JSON (${messageOf(err)})`);
  }
  if (typeof args !== 'object' || args === null || Array.isArray(args))
    return failed('the arguments are not a JSON object');
  if (call.writes && (await deps.artifacts.get(input.sessionId, startedName(input)))) {
    return failed(
      `the earlier attempt of this call stopped before its result came back, so whether ${call.tool} changed anything is unknown; it is not called again: check before calling it anew`,
    );
  }
  try {
    const answer = await withMcpClient(
      call.server,
      deps.secrets,
      async (client) => {
        if (call.writes) await deps.artifacts.put(input.sessionId, startedName(input), '');
        return client.callTool({ name: call.tool, arguments: args as Record<string, unknown> }, undefined, {
          timeout: call.server.timeoutSeconds * 1000,
          signal: abort,
        });
      },
      abort,
    );
    return bounded(deps, input, resultText(answer), answer.isError !== true, started);
  } catch (err) {
    // The server's own answer (an unknown tool, invalid arguments) is the model's to read; a network failure is retried.
    if (err instanceof McpError) return failed(deps.redactor.text(err.message));
    throw err;
  }
}

/** The result cut to the server's maxResultBytes, scrubbed of the worker's secrets, fenced as untrusted text. */
function bounded(deps: McpDeps, input: McpCallInput, text: string, ok: boolean, started: number): StoredResult {
  const { server, tool } = input.call as { server: McpServer; tool: string };
  const bytes = Buffer.byteLength(text);
  const limit = server.maxResultBytes;
  const kept = bytes > limit ? Buffer.from(text).subarray(0, limit).toString() : text;
  const cut = bytes > limit ? `\n[result truncated: the first ${limit} of ${bytes} bytes are shown]` : '';
  const body = deps.redactor.text(kept).replaceAll('</mcp-result', '<\\/mcp-result');
  return {
    content: `<mcp-result server="${server.name}" tool="${tool}">\n${body}${cut}\n</mcp-result>`,
    ok,
    bytes,
    truncated: bytes > limit,
    durationMs: Date.now() - started,
  };
}

const signal = () => Context.current().cancellationSignal;

/**
 * The activity a call is made in: its audit event is tagged with it, and its
 * cancellation ends the call. Given by the model gateway, whose requests are
 * not in the activity's async context.
 */
export interface McpCallActivity {
  signal: AbortSignal;
  activityId: string;
  attempt: number;
}

function currentActivity(): McpCallActivity {
  const { info, cancellationSignal } = Context.current();
  return { signal: cancellationSignal, activityId: info.activityId, attempt: info.attempt };
}
const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));
