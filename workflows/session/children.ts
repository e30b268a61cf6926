/**
 * Child sessions (docs/agents.md, Child sessions): the built-in loop's
 * start_child calls of one model answer each start an agentSession child
 * workflow (id `<session>.child-<n>`) on the parent's repo at its base
 * commit, all of them before the parent waits for the first, so they run in
 * parallel. The child works, verifies and ends without publishing; its
 * outcome, summary and diff become the call's result. Bounded by count,
 * depth and the parent's budget (rules/children.ts); a child's spend is
 * counted in the parent's; cancelling the parent cancels its children.
 * An agent CLI's calls, and a script step's drydock-child, come as the
 * startChild update through the step's gateway.
 */
import {
  condition,
  ChildWorkflowFailure,
  isCancellation,
  ParentClosePolicy,
  setHandler,
  startChild,
  ApplicationFailure,
} from '@temporalio/workflow';
import type { SessionStatus } from '../api';
import { sessionProgress, startChildForStep, WORKFLOW_TYPE, type StepChildAnswer, type StepChildRequest } from '../api';
import {
  CHILD_TOOL,
  childAnswer,
  childDiffPath,
  childEnd,
  childInput,
  childSessionId,
  childTask,
  childShown,
  refuseChild,
  type ChildEnd,
} from '../rules/children';
import { onHost } from './proxies';
import { inSandbox } from './sandbox';
import type { SessionRun } from './state';

type SessionWorkflow = (input: unknown) => Promise<SessionStatus>;

/** A started call: the child's end to wait for, or why none was started. */
type Started = { refused: string } | { childId: string; ended: Promise<ChildEnd> };

/** Keeps the children's rows in status current from their progress; takes a step's start_child calls (a CLI's, a script's). */
export function installChildHandlers(run: SessionRun): void {
  installStepChildHandler(run);
  setHandler(sessionProgress, (progress) => {
    const child = run.status.children?.find((c) => c.sessionId === progress?.sessionId);
    if (!child || child.phase === 'completed' || child.phase === 'failed' || child.phase === 'cancelled') return;
    child.phase = progress.phase;
    if (progress.agent) child.costUsd = progress.agent.costUsd;
    if (progress.change) child.diffstat = progress.change.diffstat.slice(-500);
    if (progress.verification) child.verified = progress.verification.passed;
  });
}

/** Starts a child for each start_child call of the answer, in order; the others are not touched. */
export async function startChildren(
  run: SessionRun,
  assistantIndex: number,
  calls: { name: string }[],
): Promise<Map<number, Started>> {
  const started = new Map<number, Started>();
  for (const [callIndex, call] of calls.entries()) {
    if (call.name === CHILD_TOOL) started.set(callIndex, await startOne(run, assistantIndex, callIndex));
  }
  return started;
}

/** Whether start_child is offered at the next model call: one more child would not be refused. */
export function mayStartChild(run: SessionRun): boolean {
  return (
    run.status.plan?.state !== 'writing' &&
    !refuseChild(run.input, run.status.children?.length ?? 0, spent(run), run.policy.maxChildren)
  );
}

function spent(run: SessionRun) {
  const agent = run.status.agent!;
  return { costUsd: agent.costUsd ?? 0, tokens: agent.usage?.totalTokens ?? 0 };
}

async function startOne(run: SessionRun, assistantIndex: number, callIndex: number): Promise<Started> {
  if (run.status.plan?.state === 'writing') return { refused: 'start_child is not available while you write the plan' };
  const asked = await inSandbox(run, (sb) =>
    onHost(sb).readChildCall({ sessionId: run.sessionId, assistantIndex, callIndex }),
  );
  if ('problem' in asked) return { refused: asked.problem };
  return startWithTask(run, asked.task);
}

/** Starts the child of one call unless a bound refuses it (the timeline says so). */
async function startWithTask(run: SessionRun, task: string): Promise<Started> {
  const refused = refuseChild(run.input, run.status.children?.length ?? 0, spent(run), run.policy.maxChildren);
  if (refused) {
    await run.note('child: refused', refused, false);
    return { refused };
  }
  const children = (run.status.children ??= []);
  const childId = childSessionId(run.sessionId, children.length + 1);
  const baseCommit = run.sandbox?.baseCommit ?? run.startCommit ?? run.input.repo.ref;
  const input = childInput(run.input, { sessionId: run.sessionId, baseCommit: baseCommit! }, task, spent(run));
  children.push(childShown(childId, task, new Date().toISOString()));
  const handle = await startChild<SessionWorkflow>(WORKFLOW_TYPE, {
    workflowId: childId,
    args: [input],
    parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
  });
  await run.note('child: started', `${childId}: ${task.split('\n')[0].slice(0, 200)}`);
  return {
    childId,
    ended: handle.result().then(
      (status) => childEnd(childId, status),
      (err) => failedEnd(childId, err),
    ),
  };
}

/**
 * A child that failed carries its status in the failure. Never throws: a
 * parent being cancelled hears of it from its own next step, and no child's
 * promise is left rejected unawaited.
 */
function failedEnd(childId: string, err: unknown): ChildEnd {
  const cause = err instanceof ChildWorkflowFailure ? err.cause : undefined;
  if (cause instanceof ApplicationFailure) {
    const status = cause.details?.[0] as Partial<SessionStatus> | undefined;
    return childEnd(childId, { ...status, error: status?.error ?? cause.message }, 'failed');
  }
  const cancelled = isCancellation(err) || isCancellation(cause);
  return childEnd(childId, { error: String(cause ?? err) }, cancelled ? 'cancelled' : 'failed');
}

/** Waits for the call's child (or its refusal) and writes the call's result; its spend joins the parent's. */
export async function answerChild(
  run: SessionRun,
  started: Started,
  at: { assistantIndex: number; callIndex: number },
): Promise<void> {
  const { loop } = run;
  const progress = run.status.agent!;
  let content: string;
  let end: ChildEnd | undefined;
  if ('refused' in started) {
    content = `error: ${started.refused}`;
  } else {
    end = await started.ended;
    content = await childEnded(run, end);
  }
  const record = await inSandbox(run, (sb) =>
    onHost(sb).answerChildCall({
      sandbox: sb.name,
      sessionId: run.sessionId,
      turn: loop.turn,
      ...at,
      index: loop.messageCount,
      childId: end?.sessionId ?? '',
      content,
      changed: end?.changed ?? false,
      ok: end?.phase === 'completed',
    }),
  );
  loop.messageCount++;
  progress.steps++;
  progress.calls = [...(progress.calls ?? []), record].slice(-20);
}

/** A child's end as the parent takes it: its spend joins the parent's, its row and the timeline say how it ended. */
async function childEnded(run: SessionRun, end: ChildEnd): Promise<string> {
  const progress = run.status.agent!;
  progress.costUsd = (progress.costUsd ?? 0) + end.costUsd;
  progress.usage ??= { promptTokens: 0, completionTokens: 0, totalTokens: 0 };
  progress.usage.totalTokens += end.tokens;
  const row = run.status.children?.find((c) => c.sessionId === end.sessionId);
  if (row) Object.assign(row, { phase: end.phase, costUsd: end.costUsd, verified: end.verification?.passed });
  await run.note(
    `child: ${end.phase}`,
    `${end.sessionId}${end.diffstat ? `: ${end.diffstat.trim().split('\n').at(-1)}` : ''}`,
    end.phase === 'completed',
  );
  return childAnswer(end, end.changed ? childDiffPath(end.sessionId) : undefined);
}

/**
 * start_child for an agent CLI or a script's drydock-child (docs/agents.md,
 * Child sessions): the gateway's call arrives as the startChild update while the step runs;
 * the same bounds as the built-in loop's decide, the child runs as one of
 * the loop's, and the update's answer (the CLI's tool result) comes once it
 * ended, with its diff in the parent's sandbox. The agent's round waits for
 * every such child before it goes on (awaitStepChildren).
 */
function installStepChildHandler(run: SessionRun): void {
  setHandler(
    startChildForStep,
    async ({ task, step }): Promise<StepChildAnswer> => {
      const n = run.stepChildCalls++;
      const asked = childTask(task);
      const started = 'problem' in asked ? { refused: asked.problem } : await startWithTask(run, asked.task);
      let answer: StepChildAnswer;
      let end: ChildEnd | undefined;
      if ('refused' in started) {
        answer = { content: `error: ${started.refused}`, ok: false };
      } else {
        run.stepChildrenRunning++;
        try {
          end = await started.ended;
          answer = { content: await childEnded(run, end), ok: end.phase === 'completed', childId: end.sessionId };
        } finally {
          run.stepChildrenRunning--;
        }
      }
      await inSandbox(run, (sb) =>
        onHost(sb).deliverCliChild({
          sandbox: sb.name,
          sessionId: run.sessionId,
          step,
          n,
          changed: end?.changed ?? false,
          ok: answer.ok,
          ...(end ? { childId: end.sessionId } : { refused: answer.content.slice(0, 500) }),
        }),
      );
      return answer;
    },
    {
      validator: ({ step } = {} as StepChildRequest) => {
        if (!run.childStep || step !== run.childStep) {
          throw new Error(`start_child is taken from the step under way only (${run.childStep ?? 'none'})`);
        }
      },
    },
  );
}

/** The end of an agent CLI's round or a script's step: the children its start_child calls started have all ended first. */
export async function awaitStepChildren(run: SessionRun): Promise<void> {
  await condition(() => run.stepChildrenRunning === 0);
}

/** Runs an agent CLI's or a script's step with its start_child calls taken (their audit numbers count from 0 in each step). */
export async function takingStepChildren<T>(run: SessionRun, step: string, fn: () => Promise<T>): Promise<T> {
  run.childStep = step;
  run.stepChildCalls = 0;
  try {
    return await fn();
  } finally {
    run.childStep = undefined;
  }
}
