/**
 * The session's side of MCP tools (docs/mcp.md): a repo whose operator
 * declared a server gets its tools listed at the conversation's start, and
 * each call the model makes is settled by the workflow before the worker
 * makes it: allowed, refused (not on the allowlist, past maxCalls), or, for a
 * writing tool, gated: made only after a person approves that very call. The worker's side,
 * against a real MCP server, is test/unit/mcp.test.ts.
 */
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { WorkflowBundle } from '@temporalio/worker';
import type { ToolCallInput } from '../../agent-loop/contract';
import type { StepInput } from '../../sandbox/contract';
import { decide, type SessionStatus } from '../../workflows/api';
import { parseSessionInput } from '../../workflows/input';
import { parseMcpDeclaration } from '../../workflows/mcp-servers';
import {
  awaitStatus,
  modelAnswer,
  type ModelAnswer,
  OPEN_POLICY,
  runSession,
  startEnvironment,
  stopEnvironment,
  type Stubs,
} from './harness';

let harness: { env: TestWorkflowEnvironment; bundle: WorkflowBundle };
beforeAll(async () => {
  harness = await startEnvironment();
});
afterAll(async () => {
  await stopEnvironment(harness?.env);
});

const declared = parseMcpDeclaration([
  {
    name: 'tracker',
    url: 'https://mcp.tracker.example/mcp',
    headers: { Authorization: { secret: 'TRACKER_TOKEN', prefix: 'Bearer ' } },
    tools: ['search_issues', 'create_issue'],
    writes: ['create_issue'],
    maxCalls: 4,
  },
]);

test("the model's MCP calls are settled by the workflow: allowed, refused, gated, and counted against maxCalls", async () => {
  if (!declared.ok) throw new Error(declared.problems.join('; '));
  const tools = [
    'mcp__tracker__search_issues',
    'mcp__tracker__delete_all',
    'mcp__tracker__create_issue',
    'mcp__tracker__create_issue',
    'mcp__tracker__search_issues',
    'mcp__tracker__search_issues',
    'run',
  ];
  const stubs: Stubs = {
    repoPolicy: async (raw) => {
      const parsed = parseSessionInput(raw);
      if (!parsed.ok) return parsed;
      return {
        ok: true,
        input: parsed.input,
        repo: 'acme/app',
        approvers: [],
        serverPolicy: OPEN_POLICY,
        mcp: declared.servers,
      };
    },
    listMcpTools: async () => ({ tools: ['mcp__tracker__search_issues', 'mcp__tracker__create_issue'], problems: [] }),
    describeMcpCall: async ({ callIndex }) => ({
      change: String(callIndex).repeat(64),
      arguments: '{"title":"flaky"}',
    }),
    modelCall: async ({ turn }) => {
      const answer = modelAnswer(turn, turn === 1 ? tools : []) as Extract<ModelAnswer, { call: unknown }>;
      return { ...answer, toolCalls: answer.toolCalls.map((c, i) => ({ ...c, name: tools[i] })) };
    },
  };
  const seen: SessionStatus[] = [];
  const run = await runSession(
    harness,
    'mcp-calls',
    {
      repo: { url: 'https://github.com/acme/app.git' },
      task: 'find the flaky test',
      agent: { kind: 'openai', model: 'gpt-test' },
    },
    stubs,
    async (handle) => {
      // The first writing call is approved, the second rejected; each decision binds to its own call.
      for (const decision of ['approve', 'reject'] as const) {
        const asked = await awaitStatus(
          handle,
          (s) =>
            s.pendingApproval?.action === 'mcp_write' &&
            !seen.some((x) => x.pendingApproval?.change === s.pendingApproval?.change),
          'it asks for approval of an MCP call',
        );
        seen.push(asked);
        await handle.executeUpdate(decide, {
          args: [
            {
              decision,
              action: 'mcp_write',
              by: 'alice',
              change: asked.pendingApproval!.change,
              comment: decision === 'reject' ? 'not now' : undefined,
            },
          ],
        });
      }
    },
  );
  expect(run.error).toBeUndefined();
  expect(run.calls.slice(0, 4)).toEqual(['repoPolicy', 'provisionSandbox', 'startModelAgent', 'listMcpTools']);
  expect(run.args.listMcpTools).toEqual([{ sessionId: run.id, servers: declared.servers }]);
  expect(seen.map((s) => [s.phase, s.pendingApproval?.evidence.mcpCall])).toEqual([
    ['awaiting_approval', { server: 'tracker', tool: 'create_issue', arguments: '{"title":"flaky"}' }],
    ['awaiting_approval', { server: 'tracker', tool: 'create_issue', arguments: '{"title":"flaky"}' }],
  ]);
  const settled = (run.args.runTool as ToolCallInput[]).map((a) => a.mcp);
  expect(settled).toEqual([
    { server: declared.servers[0], tool: 'search_issues', writes: false },
    {
      refused: 'the tool delete_all of MCP server tracker is not allowed for this repo',
      server: 'tracker',
      tool: 'delete_all',
    },
    { server: declared.servers[0], tool: 'create_issue', writes: true },
    {
      refused: 'alice rejected this call of create_issue: not now; it was not made',
      server: 'tracker',
      tool: 'create_issue',
    },
    { server: declared.servers[0], tool: 'search_issues', writes: false },
    {
      refused: 'budget: this session has used its 4 calls of MCP server tracker',
      server: 'tracker',
      tool: 'search_issues',
    },
    undefined, // drydock's own tool runs in the sandbox
  ]);
  expect(run.status.agent).toMatchObject({ mcpCalls: 6, steps: 7 });
  expect(run.status.phase).toBe('completed');
  expect(run.status.timeline.find((s) => s.name === 'agent: MCP tools')).toMatchObject({
    detail: '2 offered',
    ok: true,
  });
  expect(run.status.timeline.filter((s) => s.name === 'approval: mcp_write').map((s) => [s.detail, s.ok])).toEqual([
    ['tracker create_issue: approved by alice', true],
    ['tracker create_issue: rejected by alice', false],
  ]);
  expect(run.calls.filter((c) => c.startsWith('recordAudit'))).toEqual(
    expect.arrayContaining(['recordAudit approval/mcp_write/5', 'recordAudit approval/mcp_write/6']),
  );
});

test('a repo without MCP servers lists none', async () => {
  const run = await runSession(harness, 'mcp-none', {
    repo: { url: 'https://github.com/acme/app.git' },
    task: 't',
    agent: { kind: 'openai', model: 'gpt-test' },
  });
  expect(run.calls).not.toContain('listMcpTools');
  expect(run.status.agent?.mcpCalls).toBeUndefined();
});

test("an agent CLI's step is given the repo's servers and the session's calls so far; its calls through the gateway count", async () => {
  if (!declared.ok) throw new Error(declared.problems.join('; '));
  const steps: StepInput[] = [];
  const stubs: Stubs = {
    repoPolicy: async (raw) => {
      const parsed = parseSessionInput(raw);
      if (!parsed.ok) return parsed;
      return {
        ok: true,
        input: parsed.input,
        repo: 'acme/app',
        approvers: [],
        serverPolicy: OPEN_POLICY,
        mcp: declared.servers,
      };
    },
    installAgentCli: async () => ({ binary: '/opt/drydock-agents/claude', installed: false }),
    runStep: async (step: StepInput) => {
      steps.push(step);
      const gateway = step.gateway && {
        calls: 2,
        inputTokens: 10,
        outputTokens: 5,
        cachedTokens: 0,
        costUsd: 0,
        refused: 0,
        log: 'agent-cli-1.models.jsonl',
        mcp: { calls: { tracker: 2 }, asked: 3, refused: 0 },
      };
      return { exitCode: 0, timedOut: false, outputTail: 'ok', ...(gateway ? { gateway } : {}) };
    },
  };
  const run = await runSession(
    harness,
    'mcp-cli',
    {
      repo: { url: 'https://github.com/acme/app.git' },
      task: 'find the flaky test',
      agent: { kind: 'cli', command: 'claude' },
    },
    stubs,
  );
  expect(run.error).toBeUndefined();
  const cli = steps.filter((s) => s.gateway);
  expect(cli).toHaveLength(1);
  expect(cli[0].gateway!.mcp).toEqual({ servers: declared.servers, calls: {} });
  // Claude Code is configured for the gateway's endpoint; the token is the worker's to put in its environment.
  expect((cli[0].step as { run: string }).run).toContain(`'--mcp-config' "$DRYDOCK_MCP_CONFIG" '--strict-mcp-config'`);
  expect(JSON.parse(cli[0].env!.DRYDOCK_MCP_CONFIG).mcpServers.tracker.url).toBe('http://127.0.0.1:3129/mcp/tracker');
  expect(run.status.agent).toMatchObject({ mcpCalls: 3 });
  // The built-in loop's listing is not made for a CLI: the gateway lists at the CLI's request.
  expect(run.calls).not.toContain('listMcpTools');
});
