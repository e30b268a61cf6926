/** The model gateway's pure parts: usage from each protocol's answers, the endpoint rule, CLI events as progress. */
import { checkUpstream, priceOf, UsageReader } from '../../sandbox/model-gateway';
import { cliProgress } from '../../models/agent-cli-events';
import { agentCliRun, PLACEHOLDER_KEY } from '../../workflows/rules/agent-clis';

const sse = (events: unknown[]) => Buffer.from(events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join(''));

test('usage is read from streamed and whole answers of each protocol, split across chunks', () => {
  const anthropic = new UsageReader('anthropic', true);
  const stream = sse([
    { type: 'message_start', message: { usage: { input_tokens: 10, cache_read_input_tokens: 90, output_tokens: 1 } } },
    { type: 'message_delta', usage: { output_tokens: 25 } },
  ]);
  anthropic.push(stream.subarray(0, 17));
  anthropic.push(stream.subarray(17));
  expect(anthropic.end()).toEqual({ inputTokens: 100, outputTokens: 25, cachedTokens: 90 });

  const responses = new UsageReader('openai-responses', true);
  responses.push(sse([{ type: 'response.created', response: { usage: null } }]));
  responses.push(
    sse([
      {
        type: 'response.completed',
        response: { usage: { input_tokens: 7, output_tokens: 3, input_tokens_details: { cached_tokens: 2 } } },
      },
    ]),
  );
  expect(responses.end()).toEqual({ inputTokens: 7, outputTokens: 3, cachedTokens: 2 });

  const chat = new UsageReader('openai-chat', false);
  chat.push(Buffer.from(JSON.stringify({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 4 } })));
  expect(chat.end()).toEqual({ inputTokens: 5, outputTokens: 4, cachedTokens: 0 });
});

test('cached tokens are priced at their own rate', () => {
  const prices = { m: { input: 3, output: 15, cachedInput: 0.3 } };
  expect(priceOf(prices, 'm', { inputTokens: 1_000_000, cachedTokens: 500_000, outputTokens: 0 })).toBeCloseTo(1.65);
  expect(priceOf(prices, 'other', { inputTokens: 1, cachedTokens: 0, outputTokens: 1 })).toBeUndefined();
});

test('the upstream is https, or http only to loopback', () => {
  expect(checkUpstream('https://api.anthropic.com').host).toBe('api.anthropic.com');
  expect(checkUpstream('http://127.0.0.1:8080/v1').port).toBe('8080');
  expect(() => checkUpstream('http://api.example.com/v1')).toThrow(/must be https/);
  expect(() => checkUpstream('http://10.0.0.1/v1')).toThrow(/must be https/);
});

test('each CLI holds only the placeholder key and points at the gateway', () => {
  for (const name of ['claude', 'codex', 'opencode'] as const) {
    const { argv, env } = agentCliRun(name, '/bin/x', 'm', 'do it');
    expect(argv).toContain('do it');
    expect(JSON.stringify(env)).toContain(PLACEHOLDER_KEY);
    expect(JSON.stringify({ argv, env })).toContain('127.0.0.1:3129');
  }
  expect(agentCliRun('codex', '/bin/x', 'm', 'p').argv).not.toContain('--full-auto');
});

test('JSON events become progress lines, the last tool and the final answer', () => {
  const claude = [
    { type: 'assistant', message: { content: [{ type: 'tool_use', name: 'Edit', input: { file_path: 'a.ts' } }] } },
    { type: 'result', result: 'Fixed it.' },
  ];
  expect(cliProgress('claude', claude.map((e) => JSON.stringify(e)).join('\n'))).toEqual({
    lines: ['Edit a.ts', 'done: Fixed it.'],
    lastTool: 'Edit a.ts',
    final: 'Fixed it.',
  });
  const codex = { type: 'item.completed', item: { type: 'command_execution', command: 'npm test', exit_code: 0 } };
  expect(cliProgress('codex', `${JSON.stringify(codex)}\nnot json`).lines).toEqual([
    'shell npm test (exit 0)',
    'not json',
  ]);
});
