/** The built-in loop's context compaction (models/compaction.ts): when it starts, what it stubs, what it keeps. */
import { compact, compactedView, estimateTokens, FIRST_COMPACTABLE, tighter } from '../../models/compaction';
import type { ChatMessage } from '../../models/llm';

/** System, task, then `turns` turns of one tool call with a 2000-character output each. */
function conversation(turns: number): ChatMessage[] {
  const messages: ChatMessage[] = [
    { role: 'system', content: 'be brief' },
    { role: 'user', content: 'the task' },
  ];
  for (let t = 0; t < turns; t++) {
    const id = `call-${t}`;
    const args = t === 0 ? JSON.stringify({ path: 'a', content: 'x'.repeat(500) }) : '{"command":"ls"}';
    messages.push({
      role: 'assistant',
      content: null,
      tool_calls: [{ id, type: 'function', function: { name: 'run', arguments: args } }],
    });
    messages.push({ role: 'tool', tool_call_id: id, content: `${t}`.padEnd(2000, '.') });
  }
  return messages;
}

describe('compaction rule', () => {
  test('nothing is compacted while the prompt fits 3/4 of the window', () => {
    const messages = conversation(3);
    const result = compact(messages, 100_000, FIRST_COMPACTABLE);
    expect(result).toEqual({ compactedBefore: FIRST_COMPACTABLE, messages, tokens: estimateTokens(messages) });
  });

  test('over the window: older tool outputs and long arguments become stubs, the task and the last 8 messages stay whole', () => {
    const messages = conversation(10); // 22 messages, ~5500 tokens
    const result = compact(messages, 4000, FIRST_COMPACTABLE)!;
    expect(result.compactedBefore).toBe(messages.length - 8);
    expect(result.tokens).toBeLessThanOrEqual(3000);
    expect(result.messages.slice(0, 2)).toEqual(messages.slice(0, 2));
    expect(result.messages.slice(-8)).toEqual(messages.slice(-8));
    expect(result.messages[3]).toEqual({
      role: 'tool',
      tool_call_id: 'call-0',
      content: '[2000 characters of tool output removed to save context]',
    });
    const first = result.messages[2] as Extract<ChatMessage, { role: 'assistant' }>;
    expect(JSON.parse(first.tool_calls![0].function.arguments)).toEqual({ removed: 'to save context' });
    expect(first.tool_calls![0].id).toBe('call-0'); // the call and its result still pair up
    expect(result.messages).toHaveLength(messages.length);
    // The stored conversation itself is untouched.
    expect((messages[3] as { content: string }).content).toHaveLength(2000);
  });

  test('tighter windows keep fewer recent messages; a compaction never goes back', () => {
    const messages = conversation(10);
    expect(compact(messages, 2400, FIRST_COMPACTABLE)!.compactedBefore).toBe(messages.length - 4);
    expect(compact(messages, 1700, FIRST_COMPACTABLE)!.compactedBefore).toBe(messages.length - 1);
    // Once compacted before 15, it stays so even if less would fit.
    expect(compact(messages, 100_000, 15)!.compactedBefore).toBe(15);
    // After a provider's context-length error the caller asks for more than before.
    // After a provider's context-length error: the next candidate, then past the end (bounded).
    expect(tighter(messages, messages.length - 8)).toBe(messages.length - 4);
    expect(compact(messages, 4000, tighter(messages, messages.length - 8))!.compactedBefore).toBe(messages.length - 4);
    expect(tighter(messages, messages.length - 1)).toBe(messages.length + 1);
    expect(compact(messages, 100_000, tighter(messages, messages.length - 1))).toBeUndefined();
  });

  test('when even the most compact view does not fit, or nothing is left to compact: undefined', () => {
    const messages = conversation(10);
    expect(compact(messages, 500, FIRST_COMPACTABLE)).toBeUndefined();
    expect(compact(messages, 100_000, messages.length + 1)).toBeUndefined();
  });

  test('the view is deterministic and depends only on the boundary', () => {
    const messages = conversation(6);
    expect(compactedView(messages, 8)).toEqual(compactedView(messages, 8));
    expect(compactedView(messages, FIRST_COMPACTABLE)).toEqual(messages);
  });
});
