/**
 * The fake model servers against a maintained client of each protocol (the AI
 * SDK's providers, which follow the real APIs): a tool call and an answer,
 * streamed and not, usage with cached tokens, the key check, and the error
 * shapes the providers really send.
 */
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { APICallError, generateText, jsonSchema, streamText, tool, type LanguageModel } from 'ai';
import { startFakeProviders, toolResults, type FakeProviders, type Protocol } from '../support/fake-providers';

let fake: FakeProviders;
beforeAll(async () => {
  fake = await startFakeProviders({ apiKey: 'sk-test', contextWindow: 2000 });
});
afterAll(() => fake.close());

function modelFor(protocol: Protocol, apiKey = 'sk-test'): LanguageModel {
  if (protocol === 'anthropic') return createAnthropic({ baseURL: fake.baseUrl, apiKey })('fake-1');
  if (protocol === 'responses') return createOpenAI({ baseURL: fake.baseUrl, apiKey }).responses('fake-1');
  return createOpenAICompatible({ name: 'fake', baseURL: fake.baseUrl, apiKey, includeUsage: true })('fake-1');
}

const tools = {
  edit: tool({
    description: 'edit a file',
    inputSchema: jsonSchema<{ path: string; lines: number[] }>({
      type: 'object',
      properties: { path: { type: 'string' }, lines: { type: 'array', items: { type: 'number' } } },
      required: ['path', 'lines'],
    }),
  }),
};

describe.each<Protocol>(['anthropic', 'responses', 'chat'])('%s', (protocol) => {
  test.each([false, true])('a tool call, its result, then text (streamed: %s)', async (streamed) => {
    const before = fake.requests.length;
    fake.script([
      { toolCalls: [{ name: 'edit', arguments: { path: 'a.txt', lines: [1, 2] } }], usage: { input: 50, output: 7 } },
      { text: 'all done here', usage: { input: 80, output: 4, cachedInput: 30 } },
    ]);
    const call = async (messages: any[]) => {
      const opts = { model: modelFor(protocol), system: 'be brief', messages, tools, maxOutputTokens: 100 };
      if (!streamed) return generateText(opts);
      const s = streamText(opts);
      return { toolCalls: await s.toolCalls, text: await s.text, usage: await s.usage, response: await s.response };
    };
    const first = await call([{ role: 'user', content: 'change a.txt' }]);
    expect(first.toolCalls).toHaveLength(1);
    expect(first.toolCalls[0]).toMatchObject({ toolName: 'edit', input: { path: 'a.txt', lines: [1, 2] } });
    expect(first.usage).toMatchObject({ inputTokens: 50, outputTokens: 7 });

    const second = await call([
      { role: 'user', content: 'change a.txt' },
      ...first.response.messages,
      {
        role: 'tool',
        content: [
          {
            type: 'tool-result',
            toolCallId: first.toolCalls[0].toolCallId,
            toolName: 'edit',
            output: { type: 'text', value: 'edited' },
          },
        ],
      },
    ]);
    expect(second.text).toBe('all done here');
    expect(second.usage).toMatchObject({ inputTokens: 80, outputTokens: 4 });
    expect(second.usage.inputTokenDetails?.cacheReadTokens).toBe(30);

    const sent = fake.requests.slice(before);
    expect(sent.map((r) => [r.protocol, r.stream, r.status, r.maxTokens])).toEqual([
      [protocol, streamed, 200, 100],
      [protocol, streamed, 200, 100],
    ]);
    expect(sent[0].tools).toEqual(['edit']);
    expect(sent[0].messages.map((m) => m.role)).toEqual(['system', 'user']);
    expect(toolResults(sent[1])).toEqual(['edited']);
    expect(sent[1].messages.find((m) => m.toolCalls)?.toolCalls?.[0].arguments).toEqual({
      path: 'a.txt',
      lines: [1, 2],
    });
  });

  test('the output limit cuts the answer, and the client is told', async () => {
    fake.script([{ text: 'x'.repeat(400), usage: { output: 100 } }]);
    const r = await generateText({ model: modelFor(protocol), prompt: 'talk', maxOutputTokens: 20 });
    expect(r.finishReason).toBe('length');
    expect(r.usage.outputTokens).toBe(20);
  });

  test('a wrong key, a 429 with retry-after, a context-length error: in the provider shape', async () => {
    const errorOf = async (model: LanguageModel, prompt = 'hi') => {
      try {
        await generateText({ model, prompt, maxRetries: 0 });
      } catch (err) {
        return err as APICallError;
      }
      throw new Error('expected an error');
    };
    fake.script([]);
    const wrongKey = await errorOf(modelFor(protocol, 'sk-wrong'));
    expect(wrongKey.statusCode).toBe(401);

    fake.script([{ error: { status: 429, message: 'slow down', headers: { 'retry-after': '7' } } }]);
    const limited = await errorOf(modelFor(protocol));
    expect(limited).toMatchObject({ statusCode: 429, isRetryable: true });
    expect(limited.responseHeaders?.['retry-after']).toBe('7');
    expect(limited.message).toContain('slow down');

    const tooLong = await errorOf(modelFor(protocol), 'word '.repeat(3000));
    expect(tooLong.statusCode).toBe(400);
    const body = JSON.parse(tooLong.responseBody!);
    if (protocol === 'anthropic') expect(body.error.message).toMatch(/^prompt is too long: \d+ tokens > 2000 maximum$/);
    else expect(body.error.code).toBe('context_length_exceeded');
  });
});

test('a tool call without its result is refused, like the real APIs do', async () => {
  fake.script([]);
  const res = await fetch(`${fake.baseUrl}/messages`, {
    method: 'POST',
    headers: { 'x-api-key': 'sk-test', 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'fake-1',
      max_tokens: 10,
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'x', input: {} }] },
        { role: 'user', content: 'go on' },
      ],
    }),
  });
  expect(res.status).toBe(400);
  expect(await res.json()).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
});

test('Responses: a tool declared `custom` (as Codex declares apply_patch) is called with its raw input', async () => {
  const patch = '*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n';
  fake.script([{ toolCalls: [{ name: 'apply_patch', arguments: patch }] }]);
  const res = await fetch(`${fake.baseUrl}/responses`, {
    method: 'POST',
    headers: { authorization: 'Bearer sk-test', 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'fake-1',
      stream: true,
      store: false,
      input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'add a.txt' }] }],
      tools: [{ type: 'custom', name: 'apply_patch', description: 'patch files' }],
    }),
  });
  const events = (await res.text())
    .split('\n\n')
    .filter((e) => e.startsWith('event: '))
    .map((e) => JSON.parse(e.split('\ndata: ')[1]));
  expect([...new Set(events.map((e) => e.type))]).toEqual([
    'response.created',
    'response.in_progress',
    'response.output_item.added',
    'response.custom_tool_call_input.delta',
    'response.custom_tool_call_input.done',
    'response.output_item.done',
    'response.completed',
  ]);
  expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
  const done = events.find((e) => e.type === 'response.output_item.done');
  expect(done.item).toMatchObject({ type: 'custom_tool_call', name: 'apply_patch', input: patch });
});
