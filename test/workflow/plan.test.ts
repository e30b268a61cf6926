/**
 * A plan first (docs/agents.md): the agent writes a plan while it may only
 * read, the session waits at the `plan` gate, a follow-up there amends the
 * plan (the agent writes it again), an approval binds to the plan on display
 * and the agent then works with the approved plan, fenced. With stub
 * activities on the time-skipping server; the real parts are in
 * test/e2e/plan.test.ts.
 */
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { WorkflowBundle } from '@temporalio/worker';
import type { ToolCallInput } from '../../agent-loop/contract';
import type { StepInput } from '../../sandbox/contract';
import { decide, followup, reject, type SessionStatus } from '../../workflows/api';
import { planHash } from '../../workflows/rules/plan';
import {
  acceptAsGiven,
  awaitStatus,
  OPEN_POLICY,
  modelAnswer,
  type ModelAnswer,
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

const REPO = { url: 'https://github.com/acme/app.git' };

/** A model that writes plan 1 (after trying a write), plan 2 when amended, then works and finishes. */
function planningModel(): Stubs['modelCall'] {
  return async ({ turn }) => {
    const answer = (tools: string[], content: string): ModelAnswer => {
      const a = modelAnswer(turn, tools) as Extract<ModelAnswer, { call: unknown }>;
      return { ...a, content, toolCalls: a.toolCalls.map((c, i) => ({ ...c, name: tools[i] })) };
    };
    if (turn === 1) return answer(['read_file', 'write_file'], '');
    if (turn === 2) return answer([], 'Plan:\n1. change hello.txt\n2. run the tests');
    if (turn === 3) return answer([], 'Plan:\n1. change hello.txt and README.md\n2. run the tests');
    if (turn === 4) return answer(['write_file'], '');
    return answer([], 'changed hello.txt and README.md');
  };
}

test('a plan is written reading only, amended by a follow-up, approved, then carried out', async () => {
  const seen: SessionStatus[] = [];
  const run = await runSession(
    harness,
    'plan-amended',
    { repo: REPO, task: 'greet in two files', plan: true, agent: { kind: 'openai', model: 'gpt-test' } },
    { modelCall: planningModel() },
    async (handle) => {
      const first = await awaitStatus(handle, (s) => s.pendingApproval?.action === 'plan', 'plan 1 at its gate');
      seen.push(first);
      // An approval of anything but the plan on display is refused.
      const stale = await handle
        .executeUpdate(decide, {
          args: [{ decision: 'approve', action: 'plan', by: 'alice', change: 'f'.repeat(64) }],
        })
        .catch((err: Error) => err);
      expect((stale as Error & { cause?: Error }).cause?.message).toMatch(/^stale: change ffffffffffff/);
      await handle.executeUpdate(followup, { args: [{ by: 'alice', text: 'also README.md' }] });
      const second = await awaitStatus(
        handle,
        (s) => s.pendingApproval?.action === 'plan' && s.pendingApproval.evidence.plan?.version === 2,
        'plan 2 at its gate',
      );
      seen.push(second);
      await handle.executeUpdate(decide, {
        args: [{ decision: 'approve', action: 'plan', by: 'alice', change: second.pendingApproval!.change }],
      });
    },
  );
  expect(run.error).toBeUndefined();
  expect(run.status.phase).toBe('completed');
  const [first, second] = seen;
  expect(first.phase).toBe('awaiting_approval');
  expect(first.pendingApproval!.evidence.plan).toEqual({
    text: 'Plan:\n1. change hello.txt\n2. run the tests',
    version: 1,
  });
  expect(first.pendingApproval!.change).toBe(planHash(first.pendingApproval!.evidence.plan!.text, 1));
  expect(second.pendingApproval!.evidence.plan!.text).toContain('README.md');
  expect(run.status.plan).toMatchObject({
    state: 'approved',
    version: 2,
    approvedBy: 'alice',
    amendments: [{ by: 'alice', text: 'also README.md', version: 2 }],
  });
  // While planning, every tool call went with planning (the worker refuses writes); after the approval none.
  expect((run.args.runTool as ToolCallInput[]).map((a) => [a.turn, a.planning ?? false])).toEqual([
    [1, true],
    [1, true],
    [4, false],
  ]);
  // The model heard: the plan request, the amendment, then the approved plan, fenced.
  const told = (run.args.addAgentMessage as { index: number; content: string }[]).map((m) => m.content);
  expect(told).toHaveLength(3);
  expect(told[0]).toMatch(/Before you change anything, write a plan/);
  expect(told[1]).toMatch(/From alice:\nalso README.md/);
  expect(told[2]).toMatch(/approved by alice/);
  expect(told[2]).toContain(
    '<approved-plan>\nPlan:\n1. change hello.txt and README.md\n2. run the tests\n</approved-plan>',
  );
  expect(run.status.timeline.filter((s) => s.name === 'approval: plan').map((s) => [s.detail, s.ok])).toEqual([
    ['plan 1 amended by alice', true],
    ['plan 2 approved by alice', true],
  ]);
  expect(run.calls).toEqual(
    expect.arrayContaining(['recordAudit plan-amendment-2', 'recordAudit approval/plan/2', 'commitChanges']),
  );
  expect(run.status.decisions.map((d) => [d.action, d.decision, d.by])).toEqual([['plan', 'approve', 'alice']]);
  expect(run.status.agent!.summary).toBe('changed hello.txt and README.md');
});

test('a plan survives continue-as-new: asked once, its gate and its approval in the run that follows', async () => {
  const run = await runSession(
    harness,
    'plan-continued',
    {
      repo: REPO,
      task: 'greet in two files',
      plan: true,
      agent: { kind: 'openai', model: 'gpt-test', continueAsNewEvery: 1 },
    },
    { modelCall: planningModel() },
    async (handle) => {
      const first = await awaitStatus(handle, (s) => s.pendingApproval?.action === 'plan', 'plan 1 at its gate');
      await handle.executeUpdate(decide, {
        args: [{ decision: 'approve', action: 'plan', by: 'alice', change: first.pendingApproval!.change }],
      });
    },
  );
  expect(run.error).toBeUndefined();
  expect(run.status.phase).toBe('completed');
  expect(run.status.agent!.runs).toBe(2); // continued as new while it planned (before turn 2)
  expect(run.status.plan).toMatchObject({ state: 'approved', version: 1, approvedBy: 'alice' });
  // One request for the plan, one approved plan: nothing asked twice across the runs.
  const told = (run.args.addAgentMessage as { index: number; content: string }[]).map((m) => m.content);
  expect(told.map((t) => t.split('\n')[0])).toEqual([
    expect.stringMatching(/^Before you change anything/),
    'Your plan was approved by alice. Carry it out now: all tools are available again.',
  ]);
  expect((run.args.runTool as ToolCallInput[]).map((a) => [a.turn, a.planning ?? false])).toEqual([
    [1, true],
    [1, true],
  ]);
  expect(run.status.agent!.summary).toMatch(/README.md/); // turn 3: the work, done at once
});

test('a plan waiting past parkAfter parks the sandbox; approved, the work brings one back from the checkpoint', async () => {
  const run = await runSession(
    harness,
    'plan-parked',
    { repo: REPO, task: 'greet', plan: true, agent: { kind: 'openai', model: 'gpt-test' } },
    {
      repoPolicy: acceptAsGiven({ ...OPEN_POLICY, parkAfter: '15m' }),
      modelCall: async ({ turn }) => ({ ...modelAnswer(turn, []), content: turn === 1 ? 'Plan: greet' : 'greeted' }),
    },
    async (handle) => {
      await awaitStatus(handle, (s) => s.pendingApproval?.action === 'plan', 'the plan at its gate');
      await harness.env.sleep('16m');
      const parked = await awaitStatus(handle, (s) => s.parked !== undefined, 'the session parked');
      expect(parked.phase).toBe('awaiting_approval');
      await handle.executeUpdate(decide, {
        args: [{ decision: 'approve', action: 'plan', by: 'alice', change: parked.pendingApproval!.change }],
      });
    },
  );
  expect(run.error).toBeUndefined();
  expect(run.status.phase).toBe('completed');
  expect(run.calls.filter((c) => /^(provision|destroy)Sandbox/.test(c))).toEqual([
    'provisionSandbox',
    'destroySandbox', // parked at the plan gate
    'provisionSandbox 1', // brought back for the work
    'destroySandbox 1',
  ]);
  expect(run.status.restarts ?? 0).toBe(0);
});

test('a plan rejected from the Temporal UI (the reject signal) ends the session before any change', async () => {
  const run = await runSession(
    harness,
    'plan-rejected',
    { repo: REPO, task: 'rewrite it all', plan: true, agent: { kind: 'openai', model: 'gpt-test' } },
    { modelCall: async ({ turn }) => ({ ...modelAnswer(turn, []), content: 'Plan: rewrite everything' }) },
    async (handle) => {
      await awaitStatus(handle, (s) => s.pendingApproval?.action === 'plan', 'the plan at its gate');
      // As from the Temporal UI: the reject signal, bound to the plan on display.
      await handle.signal(reject, { action: 'plan', by: 'bob', comment: 'too big' });
    },
  );
  expect(run.status.phase).toBe('rejected');
  expect(run.status.error).toBe('plan rejected by bob: too big');
  expect(run.calls).not.toContain('commitChanges');
  expect(run.calls).not.toContain('runTool');
});

test("a script agent's planSteps print the plan; a follow-up's steps write the next; the work steps read $DRYDOCK_PLAN", async () => {
  const run = await runSession(
    harness,
    'plan-script',
    {
      repo: REPO,
      task: 'scripted',
      plan: true,
      agent: { kind: 'script', planSteps: [{ run: 'cat PLAN.md' }], steps: [{ run: 'sh do.sh' }] },
    },
    {
      runStep: async ({ key }) => ({
        exitCode: 0,
        timedOut: false,
        outputTail: key.startsWith('plan-') ? `the plan of ${key}` : `${key} ok`,
        artifact: `steps/${key}.log`,
      }),
    },
    async (handle) => {
      await awaitStatus(handle, (s) => s.pendingApproval?.evidence.plan?.version === 1, 'plan 1');
      await handle.executeUpdate(followup, { args: [{ by: 'alice', steps: [{ run: 'cat OTHER.md' }] }] });
      const second = await awaitStatus(handle, (s) => s.pendingApproval?.evidence.plan?.version === 2, 'plan 2');
      expect(second.pendingApproval!.evidence.plan!.text).toBe('the plan of plan-2-step-1');
      await handle.executeUpdate(decide, {
        args: [{ decision: 'approve', action: 'plan', by: 'alice', change: second.pendingApproval!.change }],
      });
    },
  );
  expect(run.status.phase).toBe('completed');
  const steps = run.args.runStep as StepInput[];
  expect(steps.map((s) => [s.key, 'run' in s.step ? s.step.run : '', s.env?.DRYDOCK_PLAN])).toEqual([
    ['plan-1-step-1', 'cat PLAN.md', undefined],
    ['plan-2-step-1', 'cat OTHER.md', undefined],
    ['step-1', 'sh do.sh', 'the plan of plan-2-step-1'],
  ]);
});

test('an agent CLI plans in a run of its own, and its work prompt carries the approved plan', async () => {
  const run = await runSession(
    harness,
    'plan-cli',
    { repo: REPO, task: 'fix it', plan: true, agent: { kind: 'cli', command: ['my-agent', '{prompt}'] } },
    {
      runStep: async ({ key }) => ({
        exitCode: 0,
        timedOut: false,
        outputTail: key.includes('plan') ? 'Plan: edit fix.txt' : 'edited fix.txt',
        artifact: `steps/${key}.log`,
      }),
    },
    async (handle) => {
      const asked = await awaitStatus(handle, (s) => s.pendingApproval?.action === 'plan', 'the plan');
      await handle.executeUpdate(decide, {
        args: [{ decision: 'approve', action: 'plan', by: 'carol', change: asked.pendingApproval!.change }],
      });
    },
  );
  expect(run.status.phase).toBe('completed');
  const steps = (run.args.runStep as StepInput[]).filter((s) => s.key.startsWith('agent-cli'));
  expect(steps.map((s) => s.key)).toEqual(['agent-cli-plan-1', 'agent-cli-1']);
  const prompts = steps.map((s) => ('run' in s.step ? s.step.run : ''));
  expect(prompts[0]).toMatch(/Before you change anything, write a plan/);
  expect(prompts[1]).toContain('<approved-plan>\nPlan: edit fix.txt\n</approved-plan>');
  expect(run.status.plan).toMatchObject({ state: 'approved', version: 1, approvedBy: 'carol' });
});
