/**
 * Child sessions (docs/agents.md, Child sessions) on the time-skipping test
 * server with stub activities: the built-in loop's start_child calls start
 * agentSession children in parallel at the parent's base commit; each works,
 * verifies and ends without publishing; its outcome and diff come back as the
 * call's result and its spend joins the parent's. Count, depth and budget
 * are refused with a message the model reads; cancelling the parent cancels
 * its children and tears their sandboxes down.
 */
import { Context } from '@temporalio/activity';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { WorkflowBundle } from '@temporalio/worker';
import type { AnswerChildInput, CliChildDelivery } from '../../agent-loop/children';
import type { StepInput } from '../../sandbox/contract';
import {
  startChildForStep,
  status,
  status as statusQuery,
  type StepChildAnswer,
  type SessionStatus,
} from '../../workflows/api';
import type { SessionInputDraft } from '../../workflows/input';
import { childDiffPath } from '../../workflows/rules/children';
import {
  acceptAsGiven,
  awaitStatus,
  BASE_COMMIT,
  modelAnswer,
  OPEN_POLICY,
  type ModelAnswer,
  runSession,
  startEnvironment,
  stopEnvironment,
  type Stubs,
  withStubWorker,
} from './harness';

let harness: { env: TestWorkflowEnvironment; bundle: WorkflowBundle };
beforeAll(async () => {
  harness = await startEnvironment();
});
afterAll(async () => {
  await stopEnvironment(harness?.env);
});

const input = (extra: Partial<SessionInputDraft> = {}): SessionInputDraft => ({
  repo: { url: 'https://github.com/acme/app.git' },
  task: 'split the work',
  agent: { kind: 'openai', model: 'gpt-test' },
  verify: { test: 'npm test' },
  ...extra,
});

const isChild = (sessionId: string) => /\.child-\d+$/.test(sessionId);

/** The parent asks for `tools` at turn 1 (start_child and run), children ask for `childTools`; each call costs $0.01. */
function model(tools: string[], childTools: string[] = []): Stubs['modelCall'] {
  return async ({ turn, sessionId }) => {
    const asked = turn === 1 ? (isChild(sessionId) ? childTools : tools) : [];
    const answer = modelAnswer(turn, asked) as Extract<ModelAnswer, { call: unknown }>;
    return {
      ...answer,
      call: { ...answer.call, costUsd: 0.01 },
      toolCalls: answer.toolCalls.map((c, i) => ({ ...c, name: asked[i] })),
      content: asked.length ? '' : `${sessionId} done`,
    };
  };
}

const tasks = ['write the docs', 'write the tests', 'and a third'];
const childStubs = (answers: AnswerChildInput[]): Stubs => ({
  readChildCall: async ({ callIndex }) => ({ task: tasks[callIndex] }),
  answerChildCall: async (a) => {
    answers.push(a);
    return {
      type: 'tool',
      turn: a.turn,
      tool: 'start_child',
      summary: 'start_child',
      ok: a.ok,
      durationMs: 1,
      outputBytes: 1,
      truncated: false,
    };
  },
});

test("two children in parallel at the parent's base commit: their diffs come back, they never push, their spend joins the parent's", async () => {
  const answers: AnswerChildInput[] = [];
  const stubs: Stubs = {
    ...childStubs(answers),
    modelCall: model(['start_child', 'start_child', 'run'], ['run']),
  };
  let child!: SessionStatus;
  const run = await withStubWorker(harness, 'children', stubs, async (worker) => {
    const handle = await harness.env.client.workflow.start('agentSession', {
      taskQueue: worker.taskQueue,
      workflowId: worker.taskQueue,
      args: [input()],
    });
    const status = (await handle.result()) as SessionStatus;
    child = await harness.env.client.workflow.getHandle(`${worker.taskQueue}.child-1`).query(statusQuery);
    return { id: worker.taskQueue, status, args: worker.args };
  });
  const parent = run.status;
  expect(parent.phase).toBe('completed');
  const ids = [`${run.id}.child-1`, `${run.id}.child-2`];
  expect(parent.children?.map((c) => [c.sessionId, c.task, c.phase, c.costUsd, c.verified])).toEqual([
    [ids[0], tasks[0], 'completed', 0.02, true],
    [ids[1], tasks[1], 'completed', 0.02, true],
  ]);
  // The parent's own two model calls and its children's two each.
  expect(parent.agent?.costUsd).toBeCloseTo(0.06);
  // Both children started before the first was waited for.
  const provisions = run.args.provisionSandbox as { sessionId: string; repo: { ref?: string } }[];
  expect(provisions.map((p) => [p.sessionId, p.repo.ref])).toEqual([
    [run.id, undefined],
    [ids[0], BASE_COMMIT],
    [ids[1], BASE_COMMIT],
  ]);
  // The parent's answers: each child's outcome and where its diff is.
  expect(answers.map((a) => [a.childId, a.callIndex, a.changed, a.ok])).toEqual([
    [ids[0], 0, true, true],
    [ids[1], 1, true, true],
  ]);
  expect(answers[0].content).toContain(`child session ${ids[0]} ended: completed`);
  expect(answers[0].content).toContain(`git apply ${childDiffPath(ids[0])}`);
  expect(answers[0].content).toContain(`${ids[0]} done`);
  // Messages in the order of the calls: the two answers, then the run call.
  expect(answers.map((a) => a.index)).toEqual([3, 4]);
  // Only the parent pushes; every sandbox is torn down.
  expect((run.args.pushBranch as { sessionId: string }[]).map((p) => p.sessionId)).toEqual([run.id]);
  expect(run.args.destroySandbox).toHaveLength(3);
  expect(child).toMatchObject({ childOf: run.id, phase: 'completed' });
  expect(child.pushed).toBeUndefined();
  expect(child.timeline.map((t) => t.name)).toContain('publish');
});

test('children beyond children.max, deeper than children.depth, or past the budget, are refused with a message the model reads', async () => {
  const answers: AnswerChildInput[] = [];
  const stubs: Stubs = { ...childStubs(answers), modelCall: model(['start_child', 'start_child', 'start_child']) };
  const run = await runSession(harness, 'children-max', input({ children: { max: 2 } }), stubs);
  expect(run.status.phase).toBe('completed');
  expect(answers.map((a) => a.content.split('\n')[0])).toEqual([
    `child session ${run.id}.child-1 ended: completed`,
    `child session ${run.id}.child-2 ended: completed`,
    'error: this session has started 2 child sessions, as many as children.max (2) allows',
  ]);
  expect(run.status.timeline.find((t) => t.name === 'child: refused')?.ok).toBe(false);

  const spent: AnswerChildInput[] = [];
  const broke = await runSession(
    harness,
    'children-budget',
    input({ agent: { kind: 'openai', model: 'gpt-test', budget: { maxCost: 0.005 } } }),
    { ...childStubs(spent), modelCall: model(['start_child']) },
  );
  expect(spent.map((a) => a.content)).toEqual([
    "error: the session's budget is spent ($0.0100 of $0.005, children included)",
  ]);
  expect(broke.status.children).toBeUndefined();

  // A child (here a session started as one) at the deepest depth allowed starts none of its own.
  const deep: AnswerChildInput[] = [];
  const child = await runSession(harness, 'children-depth', input({ childOf: { session: 'parent-1', depth: 1 } }), {
    ...childStubs(deep),
    modelCall: model(['start_child']),
  });
  expect(deep.map((a) => a.content)).toEqual([
    'error: this session is a child at depth 1, and children.depth 1 allows no deeper: do this work yourself',
  ]);
  expect(child.status).toMatchObject({ phase: 'completed', childOf: 'parent-1' });
  expect(child.args.pushBranch).toBeUndefined();

  const none: AnswerChildInput[] = [];
  await runSession(harness, 'children-none', input({ children: { max: 0 } }), {
    ...childStubs(none),
    modelCall: model(['start_child']),
  });
  expect(none[0].content).toBe('error: this session has started 0 child sessions, as many as children.max (0) allows');

  // The operator's DRYDOCK_MAX_CHILDREN (in the server's policy) caps what the session asks.
  const capped: AnswerChildInput[] = [];
  const operator = await runSession(harness, 'children-operator', input({ children: { max: 4 } }), {
    ...childStubs(capped),
    repoPolicy: acceptAsGiven({ ...OPEN_POLICY, maxChildren: 1 }),
    modelCall: model(['start_child', 'start_child']),
  });
  expect(capped.map((a) => a.content.split('\n')[0])).toEqual([
    `child session ${operator.id}.child-1 ended: completed`,
    'error: the operator allows at most 1 child sessions per session (DRYDOCK_MAX_CHILDREN), and this session has started 1',
  ]);
  expect(operator.status.policy?.maxChildren).toBe(1);
});

test('cancelling the parent cancels its running children and tears their sandboxes down', async () => {
  const answers: AnswerChildInput[] = [];
  const stubs: Stubs = {
    ...childStubs(answers),
    modelCall: model(['start_child', 'start_child']),
    // The children's agents work until cancelled.
    runStep: async ({ key, sessionId }) => {
      if (isChild(sessionId) && key === 'verify') {
        for (;;) {
          Context.current().heartbeat();
          await Context.current().sleep(100);
        }
      }
      return { exitCode: 0, timedOut: false, outputTail: `${key} ok`, artifact: `steps/${key}.log` };
    },
  };
  let children: SessionStatus[] = [];
  const run = await runSession(harness, 'children-cancel', input(), stubs, async (handle) => {
    await awaitStatus(
      handle,
      (s) => (s.children ?? []).filter((c) => c.phase === 'verifying').length === 2,
      'two children verifying',
    );
    await handle.cancel();
    const ids = [1, 2].map((n) => `${handle.workflowId}.child-${n}`);
    children = await Promise.all(
      ids.map(async (id) => {
        const child = harness.env.client.workflow.getHandle(id);
        await child.result().catch(() => undefined);
        return child.query(status);
      }),
    );
  });
  expect(run.status.phase).toBe('cancelled');
  expect(children.map((c) => c.phase)).toEqual(['cancelled', 'cancelled']);
  expect(answers).toEqual([]);
  expect(run.args.destroySandbox).toHaveLength(3);
});

test("an agent CLI's start_child through the gateway: the same bounds, the child's report as the call's answer, the round waits for it", async () => {
  const answers: StepChildAnswer[] = [];
  const rejected: string[] = [];
  const delivered: CliChildDelivery[] = [];
  const steps: StepInput[] = [];
  const stubs: Stubs = {
    installAgentCli: async () => ({ binary: '/opt/drydock-agents/claude', installed: false }),
    deliverCliChild: async (d) => void delivered.push(d),
    // The parent's CLI step asks for three children (children.max 2), as the gateway would, and for one from a step not running.
    runStep: async (step: StepInput) => {
      steps.push(step);
      if (step.gateway && !isChild(step.sessionId)) {
        const session = harness.env.client.workflow.getHandle(step.sessionId);
        const ask = (task: string, from = step.key) =>
          session.executeUpdate(startChildForStep, { args: [{ task, step: from }], updateId: `${from}-${task}` });
        for (const task of tasks) answers.push(await ask(task));
        await ask(tasks[0], 'agent-cli-9').catch((err: Error) => rejected.push(String(err.cause ?? err.message)));
      }
      return { exitCode: 0, timedOut: false, outputTail: `${step.key} ok`, artifact: `steps/${step.key}.log` };
    },
  };
  const run = await runSession(
    harness,
    'children-cli',
    input({ agent: { kind: 'cli', command: 'claude' }, children: { max: 2 } }),
    stubs,
  );
  expect(run.status.phase).toBe('completed');
  const ids = [`${run.id}.child-1`, `${run.id}.child-2`];
  expect(answers.map((a) => [a.childId, a.ok, a.content.split('\n')[0]])).toEqual([
    [ids[0], true, `child session ${ids[0]} ended: completed`],
    [ids[1], true, `child session ${ids[1]} ended: completed`],
    [undefined, false, 'error: this session has started 2 child sessions, as many as children.max (2) allows'],
  ]);
  expect(answers[0].content).toContain(`<child-words session="${ids[0]}">`);
  expect(answers[0].content).toContain(`git apply ${childDiffPath(ids[0])}`);
  expect(rejected).toEqual([expect.stringContaining('start_child is taken from the step under way only')]);
  // The parent's CLI was given drydock's endpoint; its children (children.depth 1) were not.
  const parentCli = steps.find((s) => s.gateway && !isChild(s.sessionId))!;
  expect(parentCli.gateway?.children).toBe(true);
  expect(JSON.parse(parentCli.env!.DRYDOCK_MCP_CONFIG).mcpServers.drydock.url).toBe(
    'http://127.0.0.1:3129/mcp/drydock',
  );
  expect(steps.filter((s) => s.gateway && isChild(s.sessionId)).map((s) => s.gateway?.children)).toEqual([
    undefined,
    undefined,
  ]);
  // Each call delivered (the diff into the sandbox) and audited, the refused one too.
  expect(delivered.map((d) => [d.step, d.n, d.childId, d.changed, d.ok])).toEqual([
    [parentCli.key, 0, ids[0], true, true],
    [parentCli.key, 1, ids[1], true, true],
    [parentCli.key, 2, undefined, false, false],
  ]);
  expect(run.status.children?.map((c) => [c.sessionId, c.phase])).toEqual([
    [ids[0], 'completed'],
    [ids[1], 'completed'],
  ]);
  expect(run.status.timeline.map((t) => t.name)).toEqual(
    expect.arrayContaining(['child: completed', 'child: refused']),
  );
});

test("a script step's drydock-child: its gateway serves start_child, two children at once, each child's steps get its task", async () => {
  const answers: StepChildAnswer[] = [];
  const delivered: CliChildDelivery[] = [];
  const steps: StepInput[] = [];
  const stubs: Stubs = {
    deliverCliChild: async (d) => void delivered.push(d),
    // The parent's first step runs `drydock-child a & drydock-child b & wait`, as its gateway would ask.
    runStep: async (step: StepInput) => {
      steps.push(step);
      if (step.gateway && !isChild(step.sessionId)) {
        const session = harness.env.client.workflow.getHandle(step.sessionId);
        const ask = (task: string) =>
          session.executeUpdate(startChildForStep, {
            args: [{ task, step: step.key }],
            updateId: `${step.key}-${task}`,
          });
        answers.push(...(await Promise.all([ask(tasks[0]), ask(tasks[1])])));
      }
      return { exitCode: 0, timedOut: false, outputTail: `${step.key} ok`, artifact: `steps/${step.key}.log` };
    },
  };
  const script = {
    kind: 'script' as const,
    steps: [
      { run: 'drydock-child "write the docs" & drydock-child "write the tests" & wait', children: true },
      { run: 'echo no children here' },
      { write: { path: 'a.txt', content: 'a' } },
    ],
  };
  const run = await runSession(harness, 'children-script', input({ agent: script }), stubs);
  expect(run.status.phase).toBe('completed');
  const ids = [`${run.id}.child-1`, `${run.id}.child-2`];
  expect(answers.map((a) => [a.childId, a.ok]).sort()).toEqual([
    [ids[0], true],
    [ids[1], true],
  ]);
  // Only the parent's step with children: true has a gateway (no model: start_child only).
  const parent = steps.filter((s) => !isChild(s.sessionId) && s.key.startsWith('step-'));
  expect(parent.map((s) => [s.key, s.gateway])).toEqual([
    ['step-1', { children: true }],
    ['step-2', undefined],
    ['step-3', undefined],
  ]);
  // The children run the same steps, with their task in $DRYDOCK_TASK and no start_child (children.depth 1).
  const kids = steps.filter((s) => isChild(s.sessionId) && s.key === 'step-1');
  expect(kids.map((s) => [s.gateway, s.env?.DRYDOCK_TASK]).sort()).toEqual([
    [undefined, tasks[0]],
    [undefined, tasks[1]],
  ]);
  // The second step ran after both children ended; each call was delivered and audited.
  expect(delivered.map((d) => [d.step, d.changed, d.ok])).toEqual([
    ['step-1', true, true],
    ['step-1', true, true],
  ]);
  expect(run.status.children?.map((c) => c.phase)).toEqual(['completed', 'completed']);
});
