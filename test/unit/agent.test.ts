/** The agent's pure parts: budgets, CLI command lines, input rules, endpoints and prices, the model client and its retries. */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { budgetStop } from '../../workflows/rules/budget';
import { cliCommand, cliPrompt, feedbackMessage, shellQuote } from '../../workflows/rules/prompts';
import { parseSessionInput } from '../../workflows/input';
import {
  chatCompletion,
  costOf,
  ModelApiError,
  type ChatMessage,
  normalizeChatAnswer,
  resolveEndpoint,
  retryAfterMs,
} from '../../models/llm';
import { createAgentLoopActivities } from '../../agent-loop/activities';
import type { ModelCallInput } from '../../agent-loop/contract';
import { outputLimit } from '../../agent-loop/model-calls';
import { ArtifactStore } from '../../store/artifacts';
import { startFakeProviders } from '../support/fake-providers';

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

test('the worker key goes only to its own endpoint; others must be listed, with their API', () => {
  const settings = {
    defaultBaseUrl: 'https://api.openai.com/v1',
    defaultApi: 'openai' as const,
    defaultApiKey: 'sk-main',
    endpoints: {
      'http://localhost:11434/v1/': '',
      'https://gw.example/v1': { api: 'anthropic' as const, key: 'sk-gw' },
    },
    prices: { m: { input: 2, output: 8, cachedInput: 0.5 } },
  };
  const main = { baseUrl: 'https://api.openai.com/v1', api: 'openai', apiKey: 'sk-main' };
  expect(resolveEndpoint(settings, undefined)).toEqual(main);
  expect(resolveEndpoint(settings, 'https://api.openai.com/v1/')).toEqual(main);
  expect(resolveEndpoint(settings, 'http://localhost:11434/v1')).toEqual({
    baseUrl: 'http://localhost:11434/v1',
    api: 'compatible',
  });
  expect(resolveEndpoint(settings, 'https://gw.example/v1')).toEqual({
    baseUrl: 'https://gw.example/v1',
    api: 'anthropic',
    apiKey: 'sk-gw',
  });
  expect(resolveEndpoint(settings, 'https://evil.example/v1')).toBeUndefined();
  const usage = {
    promptTokens: 1_000_000,
    completionTokens: 500_000,
    totalTokens: 0,
    cachedTokens: 0,
    cacheWriteTokens: 0,
  };
  expect(costOf(settings.prices, 'm', usage)).toBe(6);
  // Cached prompt tokens at their own rate: 600k fresh at $2, 400k cached at $0.5, 500k out at $8.
  expect(costOf(settings.prices, 'm', { ...usage, cachedTokens: 400_000 })).toBeCloseTo(1.2 + 0.2 + 4, 10);
  expect(costOf(settings.prices, 'unpriced', usage)).toBeUndefined();
});

test('the answer limit keeps a call within the token and cost budgets', () => {
  const base = { maxOutputTokens: 4096, remaining: {} };
  expect(outputLimit(base, 4000, undefined)).toBe(4096);
  // 2500 tokens left, a prompt of at least 1000 (previous prompt + answer): 1500 for the answer.
  const previous = { promptTokens: 900, completionTokens: 100 };
  expect(outputLimit({ ...base, remaining: { tokens: 2500 }, previous }, 400, undefined)).toBe(1500);
  expect(outputLimit({ ...base, remaining: { tokens: 500 }, previous }, 400, undefined)).toBe('max_tokens');
  // $0.01 left at $1/M in and $2/M out, 1000 prompt tokens: (10000 - 1000) / 2 = 4500 → 4096.
  const price = { input: 1, output: 2 };
  expect(outputLimit({ ...base, remaining: { costUsd: 0.01 }, previous }, 0, price)).toBe(4096);
  expect(outputLimit({ ...base, remaining: { costUsd: 0.003 }, previous }, 0, price)).toBe(1000);
  expect(outputLimit({ ...base, remaining: { costUsd: 0.001 }, previous }, 0, price)).toBe('max_cost');
});

test('Retry-After in seconds, as a date, or in ms', () => {
  expect(retryAfterMs({ 'retry-after': '7' })).toBe(7000);
  expect(retryAfterMs({ 'retry-after-ms': '250', 'retry-after': '7' })).toBe(250);
  expect(retryAfterMs({ 'retry-after': 'Tue, 01 Dec 2026 00:00:30 GMT' }, Date.parse('2026-12-01T00:00:00Z'))).toBe(
    30_000,
  );
  expect(retryAfterMs({})).toBeUndefined();
});

test('a compatible server answering outside the schema: content parts joined, object arguments kept as JSON', () => {
  const body = normalizeChatAnswer({
    choices: [
      {
        message: {
          role: 'assistant',
          content: [
            { type: 'text', text: 'part one, ' },
            { type: 'text', text: 'part two' },
          ],
          tool_calls: [{ id: 'c', type: 'function', function: { name: 'run', arguments: { command: 'ls', n: 2 } } }],
        },
      },
    ],
  });
  expect(body.choices[0].message.content).toBe('part one, part two');
  expect(JSON.parse(body.choices[0].message.tool_calls[0].function.arguments)).toEqual({ command: 'ls', n: 2 });
});

describe.each(['anthropic', 'openai', 'openai-chat', 'compatible'] as const)('the model client on %s', (api) => {
  test('tool calls (object arguments kept) and usage with cached tokens; 4xx permanent, 429 with its Retry-After', async () => {
    const server = await startFakeProviders({ apiKey: 'k', contextWindow: 5000 });
    try {
      const endpoint = { baseUrl: server.baseUrl, api, apiKey: 'k' };
      const request = { model: 'm', messages: [{ role: 'user' as const, content: 'hi' }], maxOutputTokens: 100 };
      const tools = [
        { type: 'function' as const, function: { name: 'run', description: 'run', parameters: { type: 'object' } } },
      ];
      server.script([
        {
          toolCalls: [{ name: 'run', arguments: { command: 'ls', options: { all: true } } }],
          usage: { input: 70, output: 3, cachedInput: 40 },
        },
        { error: { status: 429, message: 'slow down', headers: { 'retry-after': '9' } } },
        { error: { status: 503 } },
      ]);
      const answer = await chatCompletion(endpoint, { ...request, tools });
      expect(answer.message.tool_calls).toHaveLength(1);
      expect(answer.message.tool_calls![0].function.name).toBe('run');
      expect(JSON.parse(answer.message.tool_calls![0].function.arguments)).toEqual({
        command: 'ls',
        options: { all: true },
      });
      expect(answer.finishReason).toBe('tool-calls');
      expect(answer.usage).toMatchObject({ promptTokens: 70, completionTokens: 3, totalTokens: 73 });
      if (api !== 'compatible') expect(answer.usage.cachedTokens).toBe(40);
      expect(server.requests[0].maxTokens).toBe(100);
      await expect(chatCompletion(endpoint, request)).rejects.toMatchObject({
        status: 429,
        retryable: true,
        retryAfterMs: 9000,
      });
      await expect(chatCompletion(endpoint, request)).rejects.toMatchObject({ status: 503, retryable: true });
      const wrongKey = chatCompletion({ ...endpoint, apiKey: 'nope' }, request);
      await expect(wrongKey).rejects.toBeInstanceOf(ModelApiError);
      await expect(wrongKey).rejects.toMatchObject({ status: 401, retryable: false });
      const tooLong = chatCompletion(endpoint, {
        ...request,
        messages: [{ role: 'user', content: 'x '.repeat(20_000) }],
      });
      await expect(tooLong).rejects.toMatchObject({ status: 400, retryable: false, contextTooLong: true });
      await expect(chatCompletion({ ...endpoint, baseUrl: 'http://127.0.0.1:1/v1' }, request)).rejects.toMatchObject({
        retryable: true,
      });
    } finally {
      await server.close();
    }
  });
});

test("a request the SDK refuses is not retried, and drydock's own system prompt raises no warning", async () => {
  const server = await startFakeProviders({ apiKey: 'k' });
  const warn = jest.spyOn(console, 'warn');
  try {
    const endpoint = { baseUrl: server.baseUrl, api: 'openai' as const, apiKey: 'k' };
    const call = (messages: ChatMessage[]) => chatCompletion(endpoint, { model: 'm', messages, maxOutputTokens: 100 });
    await expect(call([])).rejects.toMatchObject({ retryable: false, message: expect.stringMatching(/invalid/) });
    // A tool call without its result: the SDK refuses the conversation.
    const asked = { id: 'c1', type: 'function' as const, function: { name: 'run', arguments: '{}' } };
    await expect(
      call([
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: null, tool_calls: [asked] },
        { role: 'user', content: 'and?' },
      ]),
    ).rejects.toMatchObject({ retryable: false });
    expect(server.requests).toHaveLength(0);
    server.script([{ text: 'hello' }]);
    const answer = await call([
      { role: 'system', content: 'You are a coding agent.' },
      { role: 'user', content: 'hi' },
    ]);
    expect(answer.message.content).toBe('hello');
    expect(warn).not.toHaveBeenCalled();
  } finally {
    warn.mockRestore();
    await server.close();
  }
});

test('a model call gives up any failure but a rate limit after 5 attempts, its own (a missing message) included', async () => {
  const server = await startFakeProviders({ apiKey: 'k' });
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-model-call-'));
  try {
    const models = {
      defaultBaseUrl: server.baseUrl,
      defaultApi: 'compatible' as const,
      defaultApiKey: 'k',
      endpoints: {},
      prices: {},
    };
    // The failures below end before the sandbox, the audit trail or the checkpoints are used.
    const activities = createAgentLoopActivities({ artifacts: new ArtifactStore(dir), models } as unknown as Parameters<
      typeof createAgentLoopActivities
    >[0]);
    const sessionId = 'retries';
    for (const index of [0, 1]) await activities.addAgentMessage({ sessionId, index, content: `message ${index}` });
    const input: ModelCallInput = {
      sandbox: 'unused',
      sessionId,
      model: 'm',
      turn: 1,
      messageCount: 2,
      requirePrice: false,
      maxOutputTokens: 100,
      remaining: {},
      contextWindow: 128_000,
      compactedBefore: 0,
    };
    const attempt = (n: number, call: ModelCallInput) =>
      new MockActivityEnvironment({ attempt: n }, { logger: new DefaultLogger('ERROR') })
        .run(activities.modelCall, call)
        .then(
          () => undefined,
          (err: unknown) => err,
        );
    const missing = { ...input, messageCount: 3 };
    const first = await attempt(1, missing);
    expect(first).toBeInstanceOf(Error);
    expect(first).not.toBeInstanceOf(ApplicationFailure); // retried
    const given = await attempt(5, missing);
    expect(given).toBeInstanceOf(ApplicationFailure);
    expect(given).toMatchObject({ nonRetryable: true, type: 'ModelRequest', message: /message 2 .* missing/ });
    server.script([
      { error: { status: 503 } },
      { error: { status: 503 } },
      { error: { status: 429, headers: { 'retry-after': '3' } } },
    ]);
    expect(await attempt(4, input)).toMatchObject({ retryable: true, status: 503 });
    expect(await attempt(5, input)).toMatchObject({ nonRetryable: true, type: 'ModelRequest' });
    // A rate limit is waited out past 5 attempts: the wall time bounds it.
    expect(await attempt(9, input)).toMatchObject({ nonRetryable: false, type: 'ModelRateLimited' });
  } finally {
    await server.close();
    await rm(dir, { recursive: true, force: true });
  }
});
