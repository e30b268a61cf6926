/**
 * The agent backends end to end on real Temporal, Docker and git, with local
 * servers speaking the model APIs in place of the models (Anthropic Messages
 * by default, the OpenAI Responses API and a chat-completions server as
 * listed endpoints): the tool loop, budgets, continue-as-new, feedback
 * rounds, an agent CLI and the patch step.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { cliPrompt } from '../../workflows/rules/prompts';
import { status, type SessionStatus } from '../../workflows/api';
import {
  lastUserMessage,
  promptTokens,
  startFakeProviders,
  toolResults,
  type FakeProviders,
  type Turn,
} from '../support/fake-providers';
import {
  approvePush,
  closedRunsOf,
  containersOf,
  git,
  GO_GATE,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  startSession,
  startStack,
  waitForStatus,
  type TestStack,
} from '../support/helpers';
import { recordHistory, replayHistory } from '../support/histories';

const KEY = `sk-test-${randomBytes(12).toString('hex')}`;
const AGENTS_MD = 'Always end files with a newline. Marker: AGENTS-MD-7f3a.\n';

const RESPONSES_KEY = `sk-resp-${randomBytes(12).toString('hex')}`;
const COMPATIBLE_KEY = `sk-compat-${randomBytes(12).toString('hex')}`;

/** The worker's default endpoint speaks Anthropic's Messages API. */
let model: FakeProviders;
/** Listed endpoints: the OpenAI Responses API, and an OpenAI-compatible chat-completions server. */
let responses: FakeProviders;
let compatible: FakeProviders;
/** A listed compatible endpoint whose model has a small context window (4000 tokens, estimated). */
let windowed: FakeProviders;
let stack: TestStack;
let repo: { url: string; bare: string };

beforeAll(async () => {
  model = await startFakeProviders({ apiKey: KEY });
  responses = await startFakeProviders({ apiKey: RESPONSES_KEY });
  compatible = await startFakeProviders({ apiKey: COMPATIBLE_KEY });
  windowed = await startFakeProviders({ apiKey: COMPATIBLE_KEY, contextWindow: 4000 });
  stack = await startStack({
    DRYDOCK_MODEL_BASE_URL: model.baseUrl,
    DRYDOCK_MODEL_API: 'anthropic',
    DRYDOCK_MODEL_API_KEY: KEY,
    DRYDOCK_MODEL_ENDPOINTS: {
      [responses.baseUrl]: { api: 'openai', key: RESPONSES_KEY },
      [compatible.baseUrl]: COMPATIBLE_KEY,
      [windowed.baseUrl]: COMPATIBLE_KEY,
    },
    DRYDOCK_MODEL_PRICES: { 'fake-1': { input: 1, output: 2 }, 'fake-cost': { input: 1, output: 0 } },
  });
  repo = await makeFixtureRepo({ 'AGENTS.md': AGENTS_MD });
});
afterAll(async () => {
  await stack?.stop();
  await Promise.all([model, responses, compatible, windowed].map((m) => m?.close()));
});

const pushedFile = (id: string, file: string) => git(['show', `drydock/${id}:${file}`], repo.bare);

/** Every payload of a history, decoded, so a secret cannot hide in base64. */
async function historyText(handle: WorkflowHandle): Promise<string> {
  const json = historyToJSON(await handle.fetchHistory());
  const decoded = [...json.matchAll(/"data":\s*"([A-Za-z0-9+/=]+)"/g)].map((m) =>
    Buffer.from(m[1], 'base64').toString(),
  );
  return `${json}\n${decoded.join('\n')}`;
}

const protocols = [
  { api: 'anthropic', server: () => model, key: () => KEY, protocol: 'anthropic' },
  { api: 'openai (Responses)', server: () => responses, key: () => RESPONSES_KEY, protocol: 'responses' },
  { api: 'compatible', server: () => compatible, key: () => COMPATIBLE_KEY, protocol: 'chat' },
] as const;

test.each(protocols)(
  'built-in loop on $api: the model reads, edits and tests through tools; verified, approved, pushed; the key stays on the worker',
  async ({ api, server, key, protocol }) => {
    const model = server();
    const KEY = key();
    const id = newSessionId('llm');
    const before = model.requests.length;
    model.script([
      { text: 'Looking around.', toolCalls: [{ name: 'list_files', arguments: {} }] },
      { toolCalls: [{ name: 'read_file', arguments: { path: 'README.md' } }] },
      {
        toolCalls: [
          {
            name: 'edit_file',
            arguments: { path: 'README.md', old_string: '# fixture\n', new_string: "# fixture\nhello $(it's) `me`\n" },
          },
          { name: 'edit_file', arguments: { path: 'README.md', old_string: 'not there', new_string: 'x' } },
        ],
      },
      { toolCalls: [{ name: 'run', arguments: { command: 'seq 1 20000; sh check.sh && echo CHECK-OK' } }] },
      {
        toolCalls: [
          { name: 'search', arguments: { pattern: 'hel+o' } },
          { name: 'nonsense', arguments: {} },
        ],
      },
      { text: 'Added a greeting to README.md.' },
    ]);
    const handle = await startSession(stack, id, {
      repo: { url: repo.url },
      task: 'greet in the README',
      agent: {
        kind: 'openai',
        model: 'fake-1',
        toolOutputLimit: 1000,
        ...(api === 'anthropic' ? {} : { baseUrl: model.baseUrl }),
      },
      verify: { test: 'sh check.sh' },
    });
    const waiting = await waitForStatus(handle, inPhase('awaiting_approval'), 120_000);
    expect(waiting.agent).toMatchObject({
      kind: 'openai',
      turn: 6,
      stopReason: 'done',
      attempt: 1,
      instructions: true,
    });
    const final = await approvePush(handle);

    expect(final.phase).toBe('completed');
    expect(pushedFile(id, 'README.md')).toBe("# fixture\nhello $(it's) `me`\n");
    expect(await containersOf(id)).toHaveLength(0);
    const requests = model.requests.slice(before);
    expect(requests).toHaveLength(6);
    for (const r of requests) {
      expect(r.protocol).toBe(protocol);
      expect(r.headers[protocol === 'anthropic' ? 'x-api-key' : 'authorization']).toBe(
        protocol === 'anthropic' ? KEY : `Bearer ${KEY}`,
      );
      // Each call is bounded (max_tokens), so one call cannot spend more than that on its answer.
      expect(r.maxTokens).toBe(8192);
    }

    // What the model saw: the system prompt with AGENTS.md and the test command, the task, tool results.
    const first = requests[0];
    expect(first.model).toBe('fake-1');
    expect(first.tools.sort()).toEqual(
      [
        'edit_file',
        'list_files',
        'propose_note',
        'read_file',
        'run',
        'search',
        'service_logs',
        'start_child',
        'write_file',
      ].sort(),
    );
    expect(first.messages[0].text).toContain('AGENTS-MD-7f3a');
    expect(first.messages[0].text).toContain('sh check.sh');
    expect(lastUserMessage(first)).toBe('greet in the README');
    const results = toolResults(requests[5]);
    expect(results[0].trim().split('\n').sort()).toEqual(['AGENTS.md', 'README.md', 'check.sh']);
    expect(results[1]).toBe('# fixture\n');
    expect(results[2]).toBe('edited README.md\n');
    expect(results[3]).toMatch(/^error \(exit code 1\): old_string not found in README\.md/);
    // The long output is cut to the limit, and the model is told so.
    expect(results[4]).toMatch(/^exit code 0\n1\n2\n/);
    expect(results[4]).toMatch(/\[output truncated: the first 1000 of \d+ bytes are shown\]$/);
    expect(results[5]).toContain("README.md:2:hello $(it's) `me`");
    expect(results[6]).toBe('error: unknown tool "nonsense"');

    // Status: progress, usage, cost at the configured price, the calls, the transcript.
    const agent = final.agent!;
    const usage = requests.reduce((sum, r) => sum + promptTokens(r), 0);
    expect(agent.usage).toEqual({
      promptTokens: usage,
      completionTokens: 60,
      totalTokens: usage + 60,
      cachedTokens: 0,
    });
    expect(agent.costUsd).toBeCloseTo((usage * 1 + 60 * 2) / 1e6, 12);
    expect(agent.summary).toBe('Added a greeting to README.md.');
    expect(agent.lastTool).toBe('nonsense');
    expect(agent.steps).toBe(7);
    expect(agent.calls!.filter((c) => c.type === 'model')).toHaveLength(6);
    expect(agent.calls!.find((c) => c.type === 'tool' && c.tool === 'run')).toMatchObject({
      ok: true,
      exitCode: 0,
      truncated: true,
    });
    const transcript = JSON.parse(
      await readFile(path.join(stack.config.DRYDOCK_DATA_DIR, 'artifacts', agent.transcript!), 'utf8'),
    );
    expect(transcript).toHaveLength(2 + 6 + 7);
    expect(final.timeline.map((s) => s.name)).toEqual([
      'provision',
      'agent: start',
      'turn 1',
      'turn 2',
      'turn 3',
      'turn 4',
      'turn 5',
      'turn 6',
      'commit',
      'verify: sh check.sh',
      'approval: push',
      `push drydock/${id}`,
      'teardown',
    ]);

    // The key is in no history payload and no status.
    expect(await historyText(handle)).not.toContain(KEY);
    expect(JSON.stringify(final)).not.toContain(KEY);

    await replayHistory(await handle.fetchHistory());
    if (api === 'anthropic') await recordHistory(handle, 'openai-loop');
  },
);

test('continue-as-new every 2 turns: the session goes on in new runs with its sandbox, status and budget', async () => {
  const id = newSessionId('can');
  const before = model.requests.length;
  model.script((req) => {
    const written = toolResults(req).length;
    if (written < 5)
      return { toolCalls: [{ name: 'write_file', arguments: { path: `f${written}.txt`, content: `${written}\n` } }] };
    if (written === 5) return { toolCalls: [{ name: 'run', arguments: { command: 'echo hello >> README.md' } }] };
    return { text: 'wrote five files' };
  });
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'write files',
    agent: { kind: 'openai', model: 'fake-1', continueAsNewEvery: 2 },
    verify: { test: 'sh check.sh' },
  });
  const final = await approvePush(handle);
  expect(final.phase).toBe('completed');
  expect(model.requests.length - before).toBe(7);
  expect(final.agent).toMatchObject({ turn: 7, steps: 6, runs: 4, stopReason: 'done' });
  expect(final.timeline.filter((s) => s.name === 'provision')).toHaveLength(1);
  expect(final.timeline.filter((s) => s.name.startsWith('turn ')).map((s) => s.name)).toEqual(
    [1, 2, 3, 4, 5, 6, 7].map((n) => `turn ${n}`),
  );
  expect(final.timeline.filter((s) => s.name === 'teardown')).toHaveLength(1);
  for (let i = 0; i < 5; i++) expect(pushedFile(id, `f${i}.txt`)).toBe(`${i}\n`);
  expect(await containersOf(id)).toHaveLength(0);

  // Four runs of one workflow id; the first three continued as new (visibility lags the result: polled).
  const runs = await closedRunsOf(stack.client, id);
  // Each run's history replays, the continued ones included.
  for (const run of runs) await replayHistory(await stack.client.workflow.getHandle(id, run.runId).fetchHistory());
  expect(runs.map((r) => r.status).sort()).toEqual([
    'COMPLETED',
    'CONTINUED_AS_NEW',
    'CONTINUED_AS_NEW',
    'CONTINUED_AS_NEW',
  ]);
});

test('a failed verification goes back to the model, which fixes the change in its second attempt', async () => {
  const id = newSessionId('feedback');
  const before = model.requests.length;
  model.script((req) => {
    const last = req.messages[req.messages.length - 1];
    if (last.role === 'user' && /verification of your change failed/.test(last.text)) {
      return { toolCalls: [{ name: 'run', arguments: { command: 'echo hello >> README.md' } }] };
    }
    if (toolResults(req).length === 0)
      return { toolCalls: [{ name: 'write_file', arguments: { path: 'NOTE.md', content: 'hi\n' } }] };
    return { text: 'done' };
  });
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'greet',
    agent: { kind: 'openai', model: 'fake-1' },
    verify: { test: 'sh check.sh' },
  });
  const final = await approvePush(handle);
  expect(final.phase).toBe('completed');
  expect(final.agent).toMatchObject({ attempt: 2, turn: 4, stopReason: 'done' });
  expect(final.verification).toMatchObject({ passed: true });
  const names = final.timeline.map((s) => s.name);
  expect(names).toContain('feedback: attempt 2');
  expect(names).toContain('verify: sh check.sh (attempt 2)');
  expect(final.timeline.find((s) => s.name === 'verify: sh check.sh')!.ok).toBe(false);
  const feedback = model.requests
    .slice(before)
    .map((r) => r.messages.find((m) => m.role === 'user' && /verification/.test(m.text)))
    .find(Boolean)!;
  expect(feedback.text).toMatch(/attempt 1 of 3[\s\S]*sh check\.sh/);
  expect(pushedFile(id, 'README.md')).toBe('# fixture\nhello\n');
  expect(pushedFile(id, 'NOTE.md')).toBe('hi\n');
});

test('each budget ends the agent phase with its reason; onExceeded "fail" ends the session', async () => {
  const runForever = (model: string): Turn => ({
    toolCalls: [{ name: 'run', arguments: { command: model === 'fake-wall' ? 'sleep 2' : 'true' } }],
    usage: model === 'fake-cost' ? { input: 100_000, output: 0 } : { input: 900, output: 100 },
  });
  model.script((req) => runForever(req.model));
  const session = (name: string, modelName: string, budget: Record<string, unknown>) => {
    const id = newSessionId(name);
    return startSession(stack, id, {
      repo: { url: repo.url },
      task: 'loop forever',
      agent: { kind: 'openai', model: modelName, budget },
    });
  };
  const handles = await Promise.all([
    session('turns', 'fake-turns', { maxTurns: 2 }),
    session('tokens', 'fake-tokens', { maxTokens: 2500 }),
    session('cost', 'fake-cost', { maxCost: 0.25 }),
    session('wall', 'fake-wall', { maxWallTime: '3s' }),
    session('fail', 'fake-fail', { maxTurns: 1, onExceeded: 'fail' }),
  ]);
  const [turns, tokens, cost, wall] = (await Promise.all(
    handles.slice(0, 4).map((h) => h.result()),
  )) as SessionStatus[];
  const made = (name: string) => model.requests.filter((r) => r.model === name).length;

  // Nothing changed, so nothing to publish: the sessions complete after the agent phase.
  expect(turns).toMatchObject({ phase: 'completed', agent: { stopReason: 'max_turns', turn: 2 } });
  expect(made('fake-turns')).toBe(2);
  // The budget is not overshot: the third call (at least 900 + 100 more) would not fit in the 500 left, so it is not made.
  expect(tokens).toMatchObject({ phase: 'completed', agent: { stopReason: 'max_tokens', turn: 2 } });
  expect(tokens.agent!.usage!.totalTokens).toBe(2000);
  expect(made('fake-tokens')).toBe(2);
  // $0.10 a call: the third ($0.30 in all) would cross $0.25, so it is not made.
  expect(cost).toMatchObject({ phase: 'completed', agent: { stopReason: 'max_cost', turn: 2 } });
  expect(cost.agent!.costUsd).toBeCloseTo(0.2, 10);
  expect(wall).toMatchObject({ phase: 'completed', agent: { stopReason: 'max_wall_time' } });
  expect(made('fake-wall')).toBe(wall.agent!.turn);
  expect(wall.agent!.turn).toBeGreaterThanOrEqual(1);
  expect(turns.timeline.find((s) => s.name === 'agent stopped')!.detail).toBe('budget: 2 turns used');
  expect(cost.timeline.find((s) => s.name === 'agent stopped')!.detail).toBe('budget: $0.25 spent');

  await expect(handles[4].result()).rejects.toThrow();
  const failed = await handles[4].query(status);
  expect(failed).toMatchObject({ phase: 'failed', error: 'agent stopped: budget: 1 turns used' });
  for (const h of handles) expect(await containersOf(h.workflowId)).toHaveLength(0);
});

test('a conversation longer than the context window is compacted, also after a context-length error, and completes', async () => {
  const id = newSessionId('compact');
  const run = (n: number): Turn => ({ toolCalls: [{ name: 'run', arguments: { command: `seq ${n} 600 # ${n}` } }] });
  // Ten long tool outputs (~2000 characters each) are more than the fake's 4000 tokens; one
  // answer in the middle is the provider's context-length error.
  windowed.script([
    ...[1, 2, 3, 4, 5, 6, 7].map(run),
    { contextLengthExceeded: true },
    ...[8, 9, 10].map(run),
    { text: 'Counted.' },
  ]);
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'count to 600, ten times',
    agent: { kind: 'openai', model: 'fake-1', baseUrl: windowed.baseUrl, contextWindow: 4000, toolOutputLimit: 2000 },
  });
  const settled = (st: SessionStatus) => ['awaiting_approval', 'completed', 'failed'].includes(st.phase);
  const waiting = await waitForStatus(handle, settled, 180_000);
  expect(waiting.error).toBeUndefined();
  expect(waiting.agent).toMatchObject({ stopReason: 'done', turn: 11, summary: 'Counted.' });
  // At least one compaction before the window, and one more after the provider's error.
  expect(waiting.agent!.compactions).toBeGreaterThanOrEqual(2);
  expect(waiting.timeline.some((s) => /compacted before message \d+/.test(s.detail ?? ''))).toBe(true);

  // The provider answered over-window only once: the scripted error.
  const requests = windowed.requests;
  expect(requests.filter((r) => r.status === 400)).toHaveLength(1);
  expect(requests.filter((r) => r.status === 200)).toHaveLength(11);
  const last = requests[requests.length - 1];
  // The task and the instructions are kept, older outputs are stubs, the latest output is whole.
  expect(last.messages[0].text).toContain('AGENTS-MD-7f3a');
  expect(last.messages[1].text).toBe('count to 600, ten times');
  const results = toolResults(last);
  expect(results).toHaveLength(10);
  expect(results[0]).toMatch(/^\[\d+ characters of tool output removed to save context\]$/);
  expect(results[9]).toMatch(/^exit code 0\n10\n11\n/);
  expect(promptTokens(last)).toBeLessThanOrEqual(4000);
  // The stored conversation is whole: compaction is only a view of it.
  const transcript = JSON.parse(
    await readFile(path.join(stack.config.DRYDOCK_DATA_DIR, 'artifacts', waiting.agent!.transcript!), 'utf8'),
  ) as { role: string; content: string }[];
  const outputs = transcript.filter((m) => m.role === 'tool');
  expect(outputs).toHaveLength(10);
  expect(outputs[0].content).toMatch(/^exit code 0\n1\n2\n/);
  await handle.cancel();
  await handle.result().catch(() => undefined); // teardown runs before the cancelled session ends
});

test('a prompt the provider keeps refusing as too long, compacted as far as it goes, fails the session saying so', async () => {
  const before = windowed.requests.length;
  windowed.script(() => ({ contextLengthExceeded: true }));
  const handle = await startSession(stack, newSessionId('toolong'), {
    repo: { url: repo.url },
    task: 'x',
    agent: { kind: 'openai', model: 'fake-1', baseUrl: windowed.baseUrl, contextWindow: 4000 },
  });
  await expect(handle.result()).rejects.toThrow();
  expect((await handle.query(status)).error).toMatch(
    /does not fit agent\.contextWindow 4000 tokens even with older tool outputs compacted/,
  );
  // Bounded: the first prompt, then one for each tighter compaction that changes it.
  const asked = windowed.requests.slice(before);
  expect(asked.length).toBeGreaterThanOrEqual(1);
  expect(asked.length).toBeLessThanOrEqual(4);
  expect(asked.every((r) => r.status === 400)).toBe(true);
});

test('a cost budget needs a price: an unpriced model fails the session before any call', async () => {
  const before = model.requests.length;
  const handle = await startSession(stack, newSessionId('noprice'), {
    repo: { url: repo.url },
    task: 'x',
    agent: { kind: 'openai', model: 'unpriced', budget: { maxCost: 1 } },
  });
  await expect(handle.result()).rejects.toThrow();
  expect((await handle.query(status)).error).toMatch(/needs a price for model unpriced.*DRYDOCK_MODEL_PRICES/);
  expect(model.requests.length).toBe(before);
});

test('a session cannot send the worker key to an endpoint the worker does not allow', async () => {
  const other = await startFakeProviders();
  try {
    const handle = await startSession(stack, newSessionId('endpoint'), {
      repo: { url: repo.url },
      task: 'x',
      agent: { kind: 'openai', model: 'fake-1', baseUrl: other.baseUrl },
    });
    await expect(handle.result()).rejects.toThrow();
    expect((await handle.query(status)).error).toMatch(/is not an endpoint this worker allows/);
    expect(other.requests).toHaveLength(0);
  } finally {
    await other.close();
  }
});

test('cli agent: the prompt reaches the CLI literally, output is streamed, the change is verified and pushed', async () => {
  // A fake agent CLI in the repo: records its argument, reports progress, edits.
  const cliRepo = await makeFixtureRepo({
    'fake-agent.sh':
      // Until the test has seen its first line streamed (/tmp/go), at most 2 minutes.
      `#!/bin/sh\nprintf "%s" "$1" > PROMPT.txt\necho "agent: thinking"\n${GO_GATE}\necho hello >> README.md\necho "agent: done"\n`,
  });
  const task = `fix it's "quoted" $(touch pwned) \`touch pwned2\`; touch pwned3 && echo $HOME | cat > x\\n\n* glob *`;
  const id = newSessionId('cli');
  const handle = await startSession(stack, id, {
    repo: { url: cliRepo.url },
    task,
    agent: {
      kind: 'cli',
      command: ['sh', 'fake-agent.sh', '{prompt}'],
      egress: [{ host: 'api.example.com', port: 443, methods: ['POST'] }],
    },
    verify: { test: 'sh check.sh' },
  });
  const log = path.join(stack.config.DRYDOCK_DATA_DIR, 'artifacts', id, 'agent-cli-1.log');
  // While the CLI runs: its output so far is in the artifact store, and in the activity's heartbeat.
  const running = await waitForStatus(
    handle,
    (s) => s.timeline.some((t) => t.name === 'agent: sh (attempt 1)'),
    120_000,
  );
  expect(running.phase).toBe('agent');
  let streamed = '';
  let heartbeat = '';
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline && !(streamed.includes('thinking') && heartbeat.includes('thinking'))) {
    streamed = await readFile(log, 'utf8').catch(() => '');
    const pending = (await handle.describe()).raw.pendingActivities ?? [];
    heartbeat = JSON.stringify(
      pending.map((p) => p.heartbeatDetails?.payloads?.map((x) => Buffer.from(x.data!).toString())),
    );
    await new Promise((r) => setTimeout(r, 200));
  }
  expect(streamed).toContain('agent: thinking');
  expect(heartbeat).toContain('agent: thinking');
  expect(streamed).not.toContain('agent: done');
  execFileSync('docker', ['exec', running.sandbox!.name, 'touch', '/tmp/go']);

  const final = await approvePush(handle);
  expect(final.phase).toBe('completed');
  const branch = `drydock/${id}`;
  expect(git(['show', `${branch}:PROMPT.txt`], cliRepo.bare)).toBe(
    cliPrompt(task, 'sh check.sh', undefined, { propose: true }),
  );
  expect(git(['ls-tree', '--name-only', branch], cliRepo.bare).split('\n')).not.toEqual(
    expect.arrayContaining(['pwned']),
  );
  expect(git(['ls-tree', '--name-only', branch], cliRepo.bare).trim().split('\n').sort()).toEqual(
    ['PROMPT.txt', 'README.md', 'check.sh', 'fake-agent.sh'].sort(),
  );
  expect(final.agent).toMatchObject({
    kind: 'cli',
    stopReason: 'done',
    attempt: 1,
    transcript: `${id}/agent-cli-1.log`,
  });
  expect(await readFile(log, 'utf8')).toBe('agent: thinking\nagent: done\n');

  // The egress allowlist is handed to the activity that runs the CLI.
  const history = await handle.fetchHistory();
  const cliStep = history.events!.find(
    (e) =>
      e.activityTaskScheduledEventAttributes?.activityType?.name === 'runStep' &&
      Buffer.from(e.activityTaskScheduledEventAttributes.input!.payloads![0].data!).toString().includes('agent-cli-1'),
  )!;
  const scheduled = JSON.parse(
    Buffer.from(cliStep.activityTaskScheduledEventAttributes!.input!.payloads![0].data!).toString(),
  );
  expect(scheduled.egress).toEqual([{ host: 'api.example.com', port: 443, methods: ['POST'] }]);
  expect(await containersOf(id)).toHaveLength(0);
});

test('script agent: a patch step applies a unified diff; one that does not apply fails the session', async () => {
  const patch = [
    'diff --git a/README.md b/README.md',
    '--- a/README.md',
    '+++ b/README.md',
    '@@ -1 +1,2 @@',
    ' # fixture',
    '+hello from a patch',
    '',
  ].join('\n');
  const id = newSessionId('patch');
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'patch it',
    agent: { kind: 'script', steps: [{ patch }] },
    verify: { test: 'sh check.sh' },
  });
  const final = await approvePush(handle);
  expect(final.phase).toBe('completed');
  expect(pushedFile(id, 'README.md')).toBe('# fixture\nhello from a patch\n');
  expect(final.timeline[1]).toMatchObject({ name: 'step 1: apply patch', ok: true });

  const bad = await startSession(stack, newSessionId('badpatch'), {
    repo: { url: repo.url },
    task: 'patch it',
    agent: { steps: [{ patch: patch.replace(' # fixture', ' # not the content') }] },
  });
  await expect(bad.result()).rejects.toThrow();
  const failed = await bad.query(status);
  expect(failed.phase).toBe('failed');
  expect(failed.error).toMatch(/step 1: apply patch exited with 1/);
  expect(failed.timeline[1].outputTail).toMatch(/patch failed|does not apply/);
});
