/**
 * Context management of the built-in loop: older tool outputs (and long tool
 * arguments) are replaced by short stubs once the prompt nears the model's
 * window. Chosen over a summarising model call because it is deterministic,
 * costs nothing, cannot be paid twice after a crash, and keeps every message
 * in place (a tool call keeps its result, as every provider requires). The
 * stored conversation is never changed: compaction is a view of it, given by
 * one index (`compactedBefore`) that only grows, so earlier prompts stay a
 * stable prefix for the provider's cache between compactions.
 */
import type { ChatMessage } from './llm';

/** The system prompt and the task are never compacted. */
export const FIRST_COMPACTABLE = 2;
/** Messages at the end kept whole by the first compaction (then 4, then only the last). */
export const KEEP_RECENT = [8, 4, 1] as const;
/** Share of the window the prompt may fill: the rest is for the answer and the estimate's error. */
const PROMPT_SHARE = 0.75;
/** Tool arguments longer than this are stubbed too (a whole file written, for example). */
const LONG_ARGUMENTS = 200;

/** Tokens of a prompt, estimated (4 characters a token, as a rule of thumb that holds for code and English). */
export const estimateTokens = (messages: ChatMessage[], extraChars = 0) =>
  Math.ceil((JSON.stringify(messages).length + extraChars) / 4);

/** The conversation as the model sees it with messages before `before` compacted. */
export function compactedView(messages: ChatMessage[], before: number): ChatMessage[] {
  return messages.map((m, i) => {
    if (i < FIRST_COMPACTABLE || i >= before) return m;
    if (m.role === 'tool') {
      return { ...m, content: `[${m.content.length} characters of tool output removed to save context]` };
    }
    if (m.role === 'assistant' && m.tool_calls?.some((c) => c.function.arguments.length > LONG_ARGUMENTS)) {
      const tool_calls = m.tool_calls.map((c) =>
        c.function.arguments.length > LONG_ARGUMENTS
          ? { ...c, function: { ...c.function, arguments: JSON.stringify({ removed: 'to save context' }) } }
          : c,
      );
      return { ...m, tool_calls };
    }
    return m;
  });
}

export interface Compaction {
  /** Messages before this index are compacted (FIRST_COMPACTABLE: none). */
  compactedBefore: number;
  messages: ChatMessage[];
  tokens: number;
}

/**
 * The least compaction, at or beyond `atLeast`, whose prompt fits `window`
 * (with `extraChars` of tool definitions); undefined when even the most
 * compact view does not fit. Candidates: no more than before, then all but
 * the last 8, 4 and 1 messages.
 */
export function compact(
  messages: ChatMessage[],
  window: number,
  atLeast: number,
  extraChars = 0,
): Compaction | undefined {
  const from = Math.max(atLeast, FIRST_COMPACTABLE);
  if (from > messages.length) return undefined;
  const limit = Math.floor(window * PROMPT_SHARE);
  const candidates = [from, ...KEEP_RECENT.map((keep) => messages.length - keep)].filter((before) => before >= from);
  for (const before of [...new Set(candidates)].sort((a, b) => a - b)) {
    const view = compactedView(messages, before);
    const tokens = estimateTokens(view, extraChars);
    if (tokens <= limit) return { compactedBefore: before, messages: view, tokens };
  }
  return undefined;
}

/**
 * Where to compact from after the provider refused a prompt compacted before
 * `before`: the next of the candidates beyond it (so at most three more
 * attempts), past the end when there is none (compact then gives up).
 */
export function tighter(messages: ChatMessage[], before: number): number {
  const next = KEEP_RECENT.map((keep) => messages.length - keep).find((b) => b > before);
  return next ?? messages.length + 1;
}
