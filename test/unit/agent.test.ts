/** The agent's pure parts: budgets, CLI command lines, input rules, endpoints and prices, the model client. */
import { execFileSync } from 'node:child_process';
import { budgetStop } from '../../workflows/rules/budget';
import { cliCommand, cliPrompt, feedbackMessage, shellQuote } from '../../workflows/rules/prompts';
import { parseSessionInput } from '../../workflows/input';
import { chatCompletion, costOf, ModelApiError, resolveEndpoint } from '../../lib/llm';
import { startFakeModel } from '../fake-model';

const budget = { maxTurns: 10, maxTokens: 1000, maxCost: 0.5, maxWallTime: '10m', onExceeded: 'verify' } as const;
const used = { turns: 0, tokens: 0, costUsd: 0, elapsedMs: 0 };

test('budgets stop the agent before the next call once reached', () => {
  expect(budgetStop(budget, used)).toBeUndefined();
  expect(budgetStop(budget, { ...used, turns: 9, tokens: 999, costUsd: 0.49, elapsedMs: 599_999 })).toBeUndefined();
  expect(budgetStop(budget, { ...used, turns: 10 })).toBe('max_turns');
  expect(budgetStop(budget, { ...used, tokens: 1000 })).toBe('max_tokens');
  expect(budgetStop(budget, { ...used, costUsd: 0.5 })).toBe('max_cost');
  expect(budgetStop(budget, { ...used, elapsedMs: 600_000 })).toBe('max_wall_time');
  // Unset budgets never stop it.
  expect(
    budgetStop({ ...budget, maxTokens: undefined, maxCost: undefined }, { ...used, tokens: 1e9, costUsd: 1e9 }),
  ).toBe(undefined);
});

const nasty = `it's "q" $(touch /tmp/x) \`id\` ; rm -rf / && echo $HOME | cat > f \\ \n\t* ? [a] ~ !! %s`;

test('the prompt is one literal argument to the CLI, whatever it contains', () => {
  const command = cliCommand(['printf', '%s', '{prompt}'], nasty);
  expect(execFileSync('sh', ['-c', command], { encoding: 'utf8' })).toBe(nasty);
  expect(execFileSync('sh', ['-c', `printf %s ${shellQuote("'")}`], { encoding: 'utf8' })).toBe("'");
  expect(cliCommand(['codex', 'exec', '{prompt}'], 'p')).toBe(`'codex' 'exec' 'p'`);
  expect(cliCommand(['x', '{prompt}'], 'a\0b')).toBe(`'x' 'ab'`);
});

test('prompts and feedback carry the task, the check and the failure', () => {
  expect(cliPrompt('do it', 'npm test')).toMatch(/^do it\n\nThe change will be verified with: npm test/);
  const text = feedbackMessage(
    { passed: false, summary: 'tests failed: 2 of 5', outputTail: 'x'.repeat(10_000) },
    1,
    2,
  );
  expect(text).toMatch(/attempt 1 of 3[\s\S]*tests failed: 2 of 5/);
  expect(text.length).toBeLessThan(4_300);
});

test('agent input: each kind requires its fields and refuses the others', () => {
  const base = { repo: { url: 'file:///r' }, task: 't' };
  const problems = (agent: unknown) => {
    const parsed = parseSessionInput({ ...base, agent });
    return parsed.ok ? [] : parsed.problems;
  };
  expect(problems({ kind: 'openai', model: 'm' })).toEqual([]);
  expect(problems({ kind: 'openai' })).toEqual(['agent.model: required for agent.kind "openai"']);
  expect(problems({ kind: 'cli', command: 'claude' })).toEqual([]);
  expect(problems({ kind: 'cli' })).toEqual(['agent.command: required for agent.kind "cli"']);
  expect(problems({ kind: 'cli', command: ['my-agent', '--go'] })).toEqual([
    'agent.command: give "{prompt}" as one element',
  ]);
  expect(problems({ kind: 'openai', model: 'm', steps: [{ run: 'x' }], egress: [{ host: 'a.b' }] })).toEqual([
    'agent.steps: only for agent.kind "script"',
    'agent.egress: only for agent.kind "cli"',
  ]);
  expect(problems({ kind: 'cli', command: 'opencode', egress: [{ host: 'bad host!' }] })).toEqual([
    expect.stringMatching(/^agent\.egress\.0\.host: a host name/),
  ]);
  expect(problems({ kind: 'openai', model: 'm', budget: { maxTurns: 0 } })[0]).toMatch(/^agent\.budget\.maxTurns:/);
  expect(problems({ steps: [{ patch: '' }] })[0]).toMatch(/^agent\.steps\.0/);
});

test('the worker key goes only to its own endpoint; others must be listed', () => {
  const settings = {
    defaultBaseUrl: 'https://api.openai.com/v1',
    defaultApiKey: 'sk-main',
    endpoints: { 'http://localhost:11434/v1/': '', 'https://gw.example/v1': 'sk-gw' },
    prices: { m: { input: 2, output: 8 } },
  };
  expect(resolveEndpoint(settings, undefined)).toEqual({ baseUrl: 'https://api.openai.com/v1', apiKey: 'sk-main' });
  expect(resolveEndpoint(settings, 'https://api.openai.com/v1/')).toEqual({
    baseUrl: 'https://api.openai.com/v1',
    apiKey: 'sk-main',
  });
  expect(resolveEndpoint(settings, 'http://localhost:11434/v1')).toEqual({ baseUrl: 'http://localhost:11434/v1' });
  expect(resolveEndpoint(settings, 'https://gw.example/v1')).toEqual({
    baseUrl: 'https://gw.example/v1',
    apiKey: 'sk-gw',
  });
  expect(resolveEndpoint(settings, 'https://evil.example/v1')).toBeUndefined();
  expect(costOf(settings.prices, 'm', { promptTokens: 1_000_000, completionTokens: 500_000, totalTokens: 0 })).toBe(6);
  expect(costOf(settings.prices, 'unpriced', { promptTokens: 1, completionTokens: 1, totalTokens: 2 })).toBeUndefined();
});

test('the model client: tool calls and usage; 4xx is permanent, 429/5xx retryable', async () => {
  const server = await startFakeModel({ apiKey: 'k' });
  try {
    const endpoint = { baseUrl: server.baseUrl, apiKey: 'k' };
    const request = { model: 'm', messages: [{ role: 'user' as const, content: 'hi' }] };
    server.script([
      { toolCalls: [{ name: 'read_file', arguments: { path: 'a' } }], usage: { prompt: 7, completion: 3 } },
      { status: 429, error: 'slow down' },
      { status: 503 },
    ]);
    expect(await chatCompletion(endpoint, request)).toEqual({
      message: {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1_0', type: 'function', function: { name: 'read_file', arguments: '{"path":"a"}' } }],
      },
      finishReason: 'tool_calls',
      usage: { promptTokens: 7, completionTokens: 3, totalTokens: 10 },
    });
    await expect(chatCompletion(endpoint, request)).rejects.toMatchObject({ status: 429, retryable: true });
    await expect(chatCompletion(endpoint, request)).rejects.toMatchObject({ status: 503, retryable: true });
    const wrongKey = chatCompletion({ ...endpoint, apiKey: 'nope' }, request);
    await expect(wrongKey).rejects.toBeInstanceOf(ModelApiError);
    await expect(wrongKey).rejects.toMatchObject({ status: 401, retryable: false });
    // A conversation with an unanswered tool call is refused, like the real API does.
    const unanswered = chatCompletion(endpoint, {
      model: 'm',
      messages: [
        { role: 'user', content: 'hi' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'x', arguments: '{}' } }],
        },
      ],
    });
    await expect(unanswered).rejects.toMatchObject({ status: 400, retryable: false });
    await expect(chatCompletion({ baseUrl: 'http://127.0.0.1:1/v1' }, request)).rejects.toMatchObject({
      retryable: true,
    });
  } finally {
    await server.close();
  }
});
