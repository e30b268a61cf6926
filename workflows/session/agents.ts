/**
 * The agent phase: the agent kinds (a script, the built-in model loop, an
 * agent CLI) and their attempts at a change that passes verification. Each
 * attempt the agent works, its change is committed and verified; a failed
 * verification goes back to a model-driven agent up to verify.maxRounds times.
 * (A round is something else: the task, then each follow-up; see rounds.ts.)
 */
import { log } from '@temporalio/workflow';
import type { CommitResult, GatewayResult, Sandbox, StepInput } from '../../sandbox/contract';
import { describeSetupFiles } from '../api';
import { durationMs } from '../units';
import { agentCliRun, AGENT_CLIS, CLI_CHILD_SERVER } from '../rules/agent-clis';
import { describeStop } from '../rules/budget';
import { agentLabel } from '../rules/metrics';
import { describeSecrets, secretFeedback, type SecretFound } from '../rules/change-secrets';
import { cliCommand, cliPrompt, feedbackMessage } from '../rules/prompts';
import { awaitStepChildren, mayStartChild, takingStepChildren } from './children';
import { editedByHand } from './attach';
import { exitText, SessionEnd } from './errors';
import { modelAgent } from './model-agent';
import { keepNotes, proposing } from './memory';
import { stepNonce } from './nonce';
import { onHost } from './proxies';
import { inSandbox, startAgentApp } from './sandbox';
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
  const label = agentLabel(run.input.agent);
  run.status.agent =
    kind === 'script'
      ? { label, steps: run.input.agent.steps.length }
      : { label, kind, steps: 0, attempt: 1, runs: 1, ...model };
}

/** The agent's attempts until the change passes verification (or is not verified); returns it, and keeps the notes the agent proposed. */
export async function workUntilVerified(run: SessionRun): Promise<CommitResult> {
  const change = await attemptsUntilVerified(run);
  await keepNotes(run);
  return change;
}

async function attemptsUntilVerified(run: SessionRun): Promise<CommitResult> {
  const { input, loop, status } = run;
  for (;;) {
    await agentWorks(run);
    run.commitDate = undefined; // a new attempt's commit is a new commit
    const commit = await run.track('commit', async (record) => {
      // The notes the agent proposed come out in the commit's exec; they are kept once the round ends.
      const result = await inSandbox(run, (sb) => commitChange(run, sb, proposing(run)));
      record.detail = result.changed ? `${result.commit.slice(0, 12)} on ${run.branch}` : 'no changes';
      return result;
    });
    if (commit.notes?.length) run.loop.memory!.taken = [...(run.loop.memory!.taken ?? []), ...commit.notes];
    // The commit's author is drydock's, not the agent's: not shown among the agent's results.
    const { commit: made, changed, diffstat, changeHash, diff, files } = commit;
    Object.assign(status.agent!, { commit: made, changed, diffstat, changeHash, files, ...(diff ? { diff } : {}) });
    status.agent!.setupFiles = describeSetupFiles(commit.setupFiles);
    status.agent!.blocked = commit.blocked && describeSecrets(commit.blocked);
    if (commit.blocked) {
      status.agent!.diff = undefined; // the last attempt's diff is not this change
      await refused(run, commit.blocked);
      continue;
    }
    if (!(input.verify.test || input.verify.browser)) return commit;
    const verification = await verify(run);
    if (verification.passed) return commit;
    if (editedByHand(run)) {
      await verifyHandEditsNext(run, verification.summary);
      continue;
    }
    const failure = `verification failed: ${verification.summary.split('\n').join('; ')}`;
    // Only an agent that finished on its own gets another attempt (a budget stays spent).
    if (input.agent.kind === 'script' || status.agent!.stopReason !== 'done' || loop.attempt > input.verify.maxRounds) {
      throw new SessionEnd('failed', failure, 'verification_failed');
    }
    await feedBack(run, failure, feedbackMessage(verification, loop.attempt, input.verify.maxRounds));
  }
}

/**
 * The change holds a secret the worker knows: never verified, shown or
 * published. A model-driven agent that finished on its own gets another
 * attempt to remove it (within verify.maxRounds); otherwise the session fails.
 */
async function refused(run: SessionRun, found: SecretFound[]): Promise<void> {
  const { input, loop, status } = run;
  const failure = describeSecrets(found);
  await run.note('change refused', failure, false);
  if (input.agent.kind === 'script' || status.agent!.stopReason !== 'done' || loop.attempt > input.verify.maxRounds) {
    throw new SessionEnd('failed', failure, 'secret_in_change');
  }
  await feedBack(run, failure, secretFeedback(found, loop.attempt, input.verify.maxRounds));
}

/** One attempt of the agent's work; a spent budget ends the session or just the agent, as onExceeded says. */
async function agentWorks(run: SessionRun): Promise<void> {
  const { agent } = run.input;
  if (run.nextChangeByHand) {
    run.nextChangeByHand = false;
    // Had the agent finished on its own: a failed verification of the person's edits goes back to it.
    if (agent.kind !== 'script') run.status.agent!.stopReason = 'done';
    return;
  }
  await startAgentApp(run);
  if (agent.kind === 'script') return scriptAgent(run);
  await (agent.kind === 'openai' ? modelAgent(run) : cliAgent(run));
  const reason = run.status.agent!.stopReason!;
  if (reason === 'done') return;
  (run.status.refusals ??= { egress: 0, budget: 0 }).budget++;
  await run.note('agent stopped', describeStop(reason, agent.budget));
  if (agent.budget.onExceeded === 'fail') {
    throw new SessionEnd('failed', `agent stopped: ${describeStop(reason, agent.budget)}`, `budget_${reason}`);
  }
}

/**
 * A script agent's steps, in order. A plan first: they read the approved plan
 * from $DRYDOCK_PLAN; a child session's read its task from $DRYDOCK_TASK. A
 * `run` step with `children: true` may start child sessions with
 * drydock-child while one more would not be refused (its gateway serves
 * start_child); the step's children have all ended before the next step.
 */
async function scriptAgent(run: SessionRun): Promise<void> {
  const prefix = run.keyPrefix;
  const env = {
    ...(run.status.plan?.state === 'approved' ? { DRYDOCK_PLAN: run.status.plan.text ?? '' } : {}),
    ...(run.input.childOf ? { DRYDOCK_TASK: run.input.task } : {}),
  };
  for (const [i, step] of run.scriptSteps.entries()) {
    const key = `${prefix}step-${i + 1}`;
    const children = 'run' in step && step.children === true && mayStartChild(run);
    const options = {
      key,
      name: `${prefix}step ${i + 1}: ${describeStep(step)}`,
      failOnExit: true,
      checkpoint: true,
      ...(Object.keys(env).length ? { env } : {}),
      ...(children ? { gateway: { children: true } } : {}),
    };
    if (!children) {
      await runScriptStep(run, step, options);
      continue;
    }
    await takingStepChildren(run, key, () => runScriptStep(run, step, options));
    await awaitStepChildren(run); // a child started in the background has ended too, its diff in the sandbox
  }
}

/** A person attached while verification ran: their edits are committed and verified next, not the agent's. */
async function verifyHandEditsNext(run: SessionRun, summary: string): Promise<void> {
  run.loop.attempt++;
  run.status.agent!.attempt = run.loop.attempt;
  run.nextChangeByHand = true;
  await run.note('verification failed', `${summary.split('\n')[0].slice(0, 200)}; verifying the edits by hand next`);
}

/** The next attempt starts with the failed verification: a message to the model, or the CLI's next prompt. */
async function feedBack(run: SessionRun, failure: string, feedback: string): Promise<void> {
  const { loop, status } = run;
  loop.attempt++;
  status.agent!.attempt = loop.attempt;
  status.agent!.stopReason = undefined;
  run.setPhase('agent');
  await run.track(`feedback: attempt ${loop.attempt}`, async (record) => {
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
  log.info('verification failed; the agent gets another attempt', { attempt: loop.attempt });
}

/**
 * An agent CLI, once per attempt, with the prompt as one literal argument.
 * "claude", "codex" and "opencode" come from the host's cache and reach their
 * model only through the worker's gateway, which holds the key and the
 * budget; any other argv reaches only agent.egress, through the proxy.
 */
export async function cliAgent(run: SessionRun, planRun?: { prompt: string; key: string }): Promise<void> {
  const { input, loop, sessionId } = run;
  const agent = input.agent;
  const progress = run.status.agent!;
  if (run.budgetSpent()) return;
  const limitMs = durationMs(agent.budget.maxWallTime) - (Date.now() - loop.startedAt);
  // A follow-up round asks for the follow-up; the agent's earlier work is in the tree. A plan run asks for the plan.
  const prompt =
    planRun?.prompt ??
    cliPrompt(loop.request ?? run.status.task, input.verify.test, loop.feedback, {
      plan: loop.plan,
      notes: loop.memory?.notes,
      propose: proposing(run),
    });
  const program = typeof agent.command === 'string' ? agent.command : agent.command![0];
  const what = planRun ? 'planning' : `attempt ${loop.attempt}`;
  const key = `${run.keyPrefix}${planRun?.key ?? `agent-cli-${loop.attempt}`}`;
  const result = await run.track(`agent: ${program} (${what})`, async (record) => {
    const step = await inSandbox(run, async (sb) => {
      const plan = await cliPlan(run, sb, prompt, !planRun);
      return takingStepChildren(run, key, () =>
        onHost(sb, limitMs + 60_000).runStep({
          sandbox: sb.name,
          sessionId,
          key,
          nonce: stepNonce(),
          step: { run: plan.command, timeout: limitMs },
          timeoutMs: limitMs,
          egress: agent.egress,
          secrets: agent.secrets,
          env: plan.env,
          gateway: plan.gateway,
          checkpointBase: sb.baseCommit,
        }),
      );
    });
    recordStep(record, step);
    run.countRefusals(step);
    return step;
  });
  // The children its start_child calls started have ended before the round goes on: their diffs are in the sandbox.
  await awaitStepChildren(run);
  progress.steps++;
  progress.transcript = result.artifact;
  progress.summary = (result.gateway?.final ?? result.outputTail).slice(-1000);
  if (result.gateway) countGatewayUsage(run, result.gateway);
  if (result.gateway?.stopped) {
    progress.stopReason = result.gateway.stopped;
    return;
  }
  if (result.timedOut) {
    progress.stopReason = 'max_wall_time';
    return;
  }
  if (result.exitCode !== 0)
    throw new SessionEnd('failed', `agent CLI ${program} ${exitText(result, input.limits, limitMs)}`, 'agent_failed');
  progress.stopReason = 'done';
}

/** The shell command of this attempt's CLI run, its environment, and its gateway with the budget left. */
async function cliPlan(
  run: SessionRun,
  sb: Sandbox,
  prompt: string,
  working: boolean,
): Promise<{ command: string; env?: Record<string, string>; gateway?: StepInput['gateway'] }> {
  const { agent } = run.input;
  if (typeof agent.command !== 'string') return { command: cliCommand(agent.command!, prompt) };
  const name = agent.command;
  const spec = AGENT_CLIS[name];
  const version = agent.version ?? spec.version;
  const { binary } = await onHost(sb, 15 * 60_000).installAgentCli({ name, version });
  const model = agent.model ?? spec.defaultModel;
  const mcp = run.loop.mcp;
  // start_child is served while one more child would not be refused (never to a plan's run).
  const children = working && mayStartChild(run);
  const servers = [...(mcp?.servers ?? []).map((s) => s.name), ...(children ? [CLI_CHILD_SERVER] : [])];
  const { argv, env } = agentCliRun(name, binary, model, prompt, servers);
  const used = run.status.agent!;
  const { maxTurns, maxTokens, maxCost } = agent.budget;
  const gateway = {
    cli: name,
    protocol: spec.protocol,
    maxCalls: maxTurns - run.loop.turn,
    ...(maxTokens !== undefined ? { maxTokens: maxTokens - (used.usage?.totalTokens ?? 0) } : {}),
    ...(maxCost !== undefined ? { maxCostUsd: maxCost - (used.costUsd ?? 0) } : {}),
    ...(mcp ? { mcp: { servers: mcp.servers, calls: { ...mcp.calls } } } : {}),
    ...(children ? { children: true } : {}),
  };
  run.status.agent!.model = model;
  return { command: cliCommand(argv, prompt), env, gateway };
}

/** What a CLI's model calls used, counted like the built-in loop's, so budgets and status see it. */
function countGatewayUsage(run: SessionRun, used: GatewayResult): void {
  const progress = run.status.agent!;
  const before = progress.usage ?? { promptTokens: 0, completionTokens: 0, totalTokens: 0 };
  progress.usage = {
    promptTokens: before.promptTokens + used.inputTokens,
    completionTokens: before.completionTokens + used.outputTokens,
    totalTokens: before.totalTokens + used.inputTokens + used.outputTokens,
  };
  progress.costUsd = (progress.costUsd ?? 0) + used.costUsd;
  progress.turn = (progress.turn ?? 0) + used.calls;
  run.loop.turn += used.calls;
  if (used.lastTool) progress.lastTool = used.lastTool;
  if (used.mcp && run.loop.mcp) {
    // The repo's MCP calls through the gateway count against each server's maxCalls like the built-in loop's.
    for (const [server, n] of Object.entries(used.mcp.calls))
      run.loop.mcp.calls[server] = (run.loop.mcp.calls[server] ?? 0) + n;
    progress.mcpCalls = (progress.mcpCalls ?? 0) + used.mcp.asked;
  }
}
