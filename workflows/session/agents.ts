/**
 * The agent phase: the agent kinds (a script, the built-in model loop, an
 * agent CLI) and their rounds. Each round the agent works, its change is
 * committed and verified; a failed verification goes back to a model-driven
 * agent up to verify.maxRounds times.
 */
import { log } from '@temporalio/workflow';
import type { CommitResult } from '../../activities/types';
import { durationMs } from '../input';
import { describeStop } from '../rules/budget';
import { cliCommand, cliPrompt, feedbackMessage } from '../rules/prompts';
import { exitText, SessionEnd } from './outcome';
import { modelAgent } from './model-agent';
import { onHost } from './proxies';
import { inSandbox } from './sandbox';
import { recordStep, type SessionRun } from './state';
import { commitChange } from './publish';
import { describeStep, runScriptStep } from './steps';
import { verify } from './verify';

/** Enters the agent phase: the agent's progress in status starts here. */
export function startAgent(run: SessionRun): void {
  run.setPhase('agent');
  run.loop.startedAt = Date.now();
  run.scriptSteps = run.input.agent.steps;
  const { kind } = run.input.agent;
  const model =
    kind === 'openai'
      ? {
          model: run.input.agent.model,
          turn: 0,
          usage: { promptTokens: 0, completionTokens: 0, totalTokens: 0 },
          costUsd: 0,
          calls: [],
        }
      : {};
  run.status.agent =
    kind === 'script' ? { steps: run.input.agent.steps.length } : { kind, steps: 0, round: 1, runs: 1, ...model };
}

/** Rounds until the change passes verification (or is not verified); returns it. */
export async function agentRounds(run: SessionRun): Promise<CommitResult> {
  const { input, loop, status } = run;
  for (;;) {
    await agentWorks(run);
    run.commitDate = undefined; // a new round's commit is a new commit
    const commit = await run.track('commit', async (record) => {
      const result = await inSandbox(run, (sb) => commitChange(run, sb));
      record.detail = result.changed ? `${result.commit.slice(0, 12)} on ${run.branch}` : 'no changes';
      return result;
    });
    Object.assign(status.agent!, commit);
    if (!(input.verify.test || input.verify.browser)) return commit;
    const verification = await verify(run);
    if (verification.passed) return commit;
    const failure = `verification failed: ${verification.summary.split('\n').join('; ')}`;
    // Only an agent that finished on its own gets another round (a budget stays spent).
    if (input.agent.kind === 'script' || status.agent!.stopReason !== 'done' || loop.round > input.verify.maxRounds) {
      throw new SessionEnd('failed', failure, 'verification_failed');
    }
    await feedBack(run, failure, feedbackMessage(verification, loop.round, input.verify.maxRounds));
  }
}

/** One round of the agent's work; a spent budget ends the session or just the agent, as onExceeded says. */
async function agentWorks(run: SessionRun): Promise<void> {
  const { agent } = run.input;
  if (agent.kind === 'script') {
    const prefix = run.keyPrefix;
    for (const [i, step] of run.scriptSteps.entries()) {
      const options = { key: `${prefix}step-${i + 1}`, name: `${prefix}step ${i + 1}: ${describeStep(step)}` };
      await runScriptStep(run, step, { ...options, failOnExit: true, checkpoint: true });
    }
    return;
  }
  await (agent.kind === 'openai' ? modelAgent(run) : cliAgent(run));
  const reason = run.status.agent!.stopReason!;
  if (reason === 'done') return;
  await run.note('agent stopped', describeStop(reason, agent.budget));
  if (agent.budget.onExceeded === 'fail') {
    throw new SessionEnd('failed', `agent stopped: ${describeStop(reason, agent.budget)}`, `budget_${reason}`);
  }
}

/** The next round starts with the failed verification: a message to the model, or the CLI's next prompt. */
async function feedBack(run: SessionRun, failure: string, feedback: string): Promise<void> {
  const { loop, status } = run;
  loop.round++;
  status.agent!.round = loop.round;
  status.agent!.stopReason = undefined;
  run.setPhase('agent');
  await run.track(`feedback: round ${loop.round}`, async (record) => {
    record.detail = failure.slice(0, 200);
    if (run.input.agent.kind === 'openai') {
      await inSandbox(run, (sb) =>
        onHost(sb).addAgentMessage({ sessionId: run.sessionId, index: loop.messageCount, content: feedback }),
      );
      loop.messageCount++;
    } else {
      loop.feedback = feedback;
    }
  });
  log.info('verification failed; the agent gets another round', { round: loop.round });
}

/**
 * An agent CLI from the sandbox image, once per round, with the prompt as
 * one literal argument. It may reach only agent.egress, through the proxy.
 */
async function cliAgent(run: SessionRun): Promise<void> {
  const { input, loop, sessionId } = run;
  const agent = input.agent;
  const progress = run.status.agent!;
  if (run.budgetSpent()) return;
  const limitMs = durationMs(agent.budget.maxWallTime) - (Date.now() - loop.startedAt);
  // A follow-up round asks for the follow-up; the agent's earlier work is in the tree.
  const command = cliCommand(
    agent.command!,
    cliPrompt(loop.request ?? run.status.task, input.verify.test, loop.feedback),
  );
  const program = typeof agent.command === 'string' ? agent.command : agent.command![0];
  const result = await run.track(`agent: ${program} (round ${loop.round})`, async (record) => {
    const step = await inSandbox(run, (sb) =>
      onHost(sb, limitMs + 60_000).runStep({
        sandbox: sb.name,
        sessionId,
        key: `${run.keyPrefix}agent-cli-${loop.round}`,
        step: { run: command, timeout: limitMs },
        timeoutMs: limitMs,
        egress: agent.egress,
        secrets: agent.secrets,
        checkpointBase: sb.baseCommit,
      }),
    );
    recordStep(record, step);
    return step;
  });
  progress.steps++;
  progress.transcript = result.artifact;
  progress.summary = result.outputTail.slice(-1000);
  if (result.timedOut) {
    progress.stopReason = 'max_wall_time';
    return;
  }
  if (result.exitCode !== 0)
    throw new SessionEnd('failed', `agent CLI ${program} ${exitText(result, input.limits, limitMs)}`, 'agent_failed');
  progress.stopReason = 'done';
}
