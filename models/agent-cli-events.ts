/**
 * Progress lines from the JSON event streams of the agent CLIs (Claude Code's
 * stream-json, `codex exec --json`, `opencode run --format json`): one short
 * line per tool call, message or error, for the step's heartbeat and status.
 * Anything that is not a known event passes as it is (a CLI's own error text).
 */
import type { AgentCliName } from '../workflows/rules/agent-clis';

const MAX_LINE = 160;

function short(text: unknown): string {
  const flat = String(text ?? '')
    .replace(/\s+/g, ' ')
    .trim();
  return flat.length > MAX_LINE ? `${flat.slice(0, MAX_LINE - 3)}...` : flat;
}

/** The first string argument that says what a tool call does. */
function toolArg(input: unknown): string {
  if (!input || typeof input !== 'object') return '';
  const i = input as Record<string, unknown>;
  const arg = [i.command, i.file_path, i.filePath, i.path, i.pattern, i.url].find((v) => typeof v === 'string');
  return arg ? ` ${short(arg)}` : '';
}

export interface CliEvent {
  /** A line for people. */
  line?: string;
  /** The CLI's final answer, when this event carries it. */
  final?: string;
  /** A tool call, for status.agent.lastTool. */
  tool?: string;
}

/** One line of a CLI's output as progress (undefined: nothing to show). */
export function cliEvent(name: AgentCliName, raw: string): CliEvent | undefined {
  const text = raw.trim();
  if (!text) return undefined;
  let e: Record<string, any>;
  try {
    e = JSON.parse(text);
  } catch {
    return { line: short(text) };
  }
  if (!e || typeof e !== 'object') return { line: short(text) };
  switch (name) {
    case 'claude':
      return claudeEvent(e);
    case 'codex':
      return codexEvent(e);
    case 'opencode':
      return opencodeEvent(e);
  }
}

function claudeEvent(e: Record<string, any>): CliEvent | undefined {
  if (e.type === 'result') {
    const final = typeof e.result === 'string' ? e.result : undefined;
    return { line: short(`${e.is_error ? 'failed' : 'done'}: ${final ?? e.subtype ?? ''}`), final };
  }
  if (e.type !== 'assistant' || !Array.isArray(e.message?.content)) return undefined;
  for (const block of e.message.content) {
    if (block?.type === 'tool_use') {
      const tool = `${block.name}${toolArg(block.input)}`;
      return { line: short(tool), tool: short(tool) };
    }
    if (block?.type === 'text' && block.text) return { line: short(block.text) };
  }
  return undefined;
}

function codexEvent(e: Record<string, any>): CliEvent | undefined {
  const item = e.item as Record<string, any> | undefined;
  if (e.type === 'item.completed' && item) {
    if (item.type === 'agent_message') return { line: short(item.text), final: String(item.text ?? '') };
    if (item.type === 'command_execution') {
      const tool = `shell ${short(item.command)}`;
      return { line: short(`${tool} (exit ${item.exit_code ?? '?'})`), tool };
    }
    if (item.type === 'file_change' && Array.isArray(item.changes)) {
      const tool = `edit ${item.changes.map((c: any) => `${c.kind ?? ''} ${c.path ?? ''}`.trim()).join(', ')}`;
      return { line: short(tool), tool: short(tool) };
    }
    if (item.type === 'error') return { line: short(`error: ${item.message}`) };
    return undefined;
  }
  if (e.type === 'turn.failed' || e.type === 'error') return { line: short(`error: ${e.error?.message ?? e.message}`) };
  return undefined;
}

function opencodeEvent(e: Record<string, any>): CliEvent | undefined {
  const part = e.part as Record<string, any> | undefined;
  if (e.type === 'tool_use' && part) {
    const tool = `${part.tool}${toolArg(part.state?.input)}`;
    return { line: short(`${tool}${part.state?.status === 'error' ? ' (error)' : ''}`), tool: short(tool) };
  }
  if (e.type === 'text' && part?.text) return { line: short(part.text), final: String(part.text) };
  if (e.type === 'error') return { line: short(`error: ${e.error?.data?.message ?? e.error?.name ?? 'unknown'}`) };
  return undefined;
}

/** The progress of a whole output so far: its lines, last tool and final answer. */
export function cliProgress(
  name: AgentCliName,
  output: string,
): { lines: string[]; lastTool?: string; final?: string } {
  const lines: string[] = [];
  let lastTool: string | undefined;
  let final: string | undefined;
  for (const raw of output.split('\n')) {
    const event = cliEvent(name, raw);
    if (!event) continue;
    if (event.line) lines.push(event.line);
    if (event.tool) lastTool = event.tool;
    if (event.final !== undefined) final = event.final;
  }
  return { lines, lastTool, final };
}
