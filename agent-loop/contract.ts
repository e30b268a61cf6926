/**
 * What the workflow and the built-in agent loop's activities pass each other:
 * the inputs and results of starting the loop, a model call and a tool call.
 * Workflows import these types only.
 */
import type { AgentCall } from '../workflows/api';
import type { McpCallInput } from '../mcp/tools';

export interface StartModelAgentInput {
  sandbox: string;
  sessionId: string;
  task: string;
  verifyCommand?: string;
  /** The repo's approved notes, fenced (workflows/rules/repo-notes.ts): they go into the system prompt. */
  notes?: string;
  /** The agent may propose notes (propose_note): the system prompt says how. */
  propose?: boolean;
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
  /** The session may start a child session now (workflows/rules/children.ts): start_child is offered. */
  children?: boolean;
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
  /** The agent is writing its plan (docs/agents.md, "A plan first"): only the tools that change nothing run. */
  planning?: boolean;
}

/** What the workflow keeps of one tool call. */
export type ToolCallRecord = Extract<AgentCall, { type: 'tool' }>;
