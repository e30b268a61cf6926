/**
 * The built-in tool loop: each model call and each tool call is an activity,
 * so a crash resumes after the last completed one without paying for a model
 * call twice. Continues as new every agent.continueAsNewEvery turns (or when
 * Temporal suggests it) to keep each run's history small.
 */
import { ActivityFailure, workflowInfo } from '@temporalio/workflow';
import { RetryState } from '@temporalio/common';
import type { ModelCallResult, ToolCallInput } from '../../agent-loop/contract';
import type { McpServer } from '../mcp-servers';
import { decideMcpCall, parseMcpToolName } from '../rules/mcp';
import type { AgentCall } from '../api';
import { durationMs } from '../units';
import { stepNonce } from './nonce';
import { onHost } from './proxies';
import { inSandbox } from './sandbox';
import { answerChild, mayStartChild, startChildren } from './children';
import { gateMcpWrite } from './mcp-gate';
import { proposing } from './memory';
import type { SessionRun } from './state';

/** Calls kept in status; the whole conversation is in the transcript artifact. */
const RECENT_CALLS = 20;

export async function modelAgent(run: SessionRun): Promise<void> {
  if (run.loop.messageCount === 0) await startConversation(run);
  for (let turnsThisRun = 0; ; turnsThisRun++) {
    if (run.budgetSpent()) return;
    if (turnsThisRun >= run.input.agent.continueAsNewEvery || workflowInfo().continueAsNewSuggested) {
      await run.continueAsNew();
    }
    run.loop.turn++;
    if (await turn(run)) {
      run.status.agent!.stopReason ??= 'done';
      return;
    }
  }
}

/** The conversation's first messages: the task, the repo's AGENTS.md. */
export async function startConversation(run: SessionRun): Promise<void> {
  const started = await run.track('agent: start', async (record) => {
    const result = await inSandbox(run, (sb) =>
      onHost(sb).startModelAgent({
        sandbox: sb.name,
        sessionId: run.sessionId,
        task: run.status.task, // with its forge's context, for a webhook session
        verifyCommand: run.input.verify.test,
        ...(run.loop.memory?.notes ? { notes: run.loop.memory.notes } : {}),
        ...(proposing(run) ? { propose: true } : {}),
      }),
    );
    record.detail = result.instructions ? 'with AGENTS.md' : 'no AGENTS.md';
    return result;
  });
  run.loop.messageCount = started.messageCount;
  run.status.agent!.instructions = started.instructions;
  if (run.loop.mcp) await offerMcpTools(run, run.loop.mcp.servers);
}

/** The repo's MCP tools the model is offered (the worker asks each declared server); what is missing is noted. */
async function offerMcpTools(run: SessionRun, servers: McpServer[]): Promise<void> {
  await run.track('agent: MCP tools', async (record) => {
    const listed = await inSandbox(run, (sb) => onHost(sb).listMcpTools({ sessionId: run.sessionId, servers }));
    record.detail = [`${listed.tools.length} offered`, ...listed.problems].join('; ');
    record.ok = listed.problems.length === 0;
  });
}

/**
 * The model call of a turn, on a proxy that retries a rate limit (after its
 * Retry-After) for as long as the wall-time budget lasts, and not after it:
 * the activity gives up other failures itself after a few attempts.
 */
async function modelCall(run: SessionRun): Promise<ModelCallResult | 'max_wall_time'> {
  const { input, loop, sessionId } = run;
  const agent = input.agent;
  const progress = run.status.agent!;
  const { maxTokens, maxCost } = agent.budget;
  const leftMs = durationMs(agent.budget.maxWallTime) - (Date.now() - loop.startedAt);
  const previous = [...(progress.calls ?? [])].reverse().find((c) => c.type === 'model');
  try {
    return await inSandbox(run, (sb) =>
      onHost(sb, undefined, { scheduleToCloseMs: Math.max(1000, leftMs) }).modelCall({
        sandbox: sb.name,
        sessionId,
        baseUrl: agent.baseUrl,
        model: agent.model!,
        temperature: agent.temperature,
        turn: loop.turn,
        messageCount: loop.messageCount,
        requirePrice: maxCost !== undefined,
        maxOutputTokens: agent.maxOutputTokens,
        contextWindow: agent.contextWindow,
        compactedBefore: loop.compactedBefore ?? 0,
        ...(mayStartChild(run) ? { children: true } : {}),
        remaining: {
          ...(maxTokens !== undefined ? { tokens: maxTokens - progress.usage!.totalTokens } : {}),
          ...(maxCost !== undefined ? { costUsd: maxCost - (progress.costUsd ?? 0) } : {}),
        },
        ...(previous?.type === 'model'
          ? { previous: { promptTokens: previous.promptTokens, completionTokens: previous.completionTokens } }
          : {}),
      }),
    );
  } catch (err) {
    if (err instanceof ActivityFailure && err.retryState === RetryState.TIMEOUT) return 'max_wall_time';
    throw err;
  }
}

/** One model call and the tool calls it asked for; true when the model answered without tools (done). */
async function turn(run: SessionRun): Promise<boolean> {
  const { loop } = run;
  const progress = run.status.agent!;
  return run.track(`turn ${loop.turn}`, async (record) => {
    const result = await modelCall(run);
    if (result === 'max_wall_time' || result.stopped) {
      progress.stopReason = result === 'max_wall_time' ? result : result.stopped;
      record.detail = `not called: ${progress.stopReason}`;
      loop.turn--;
      return true;
    }
    const answer = result;
    const assistantIndex = loop.messageCount++;
    progress.turn = loop.turn;
    progress.usage = {
      promptTokens: progress.usage!.promptTokens + answer.call.promptTokens,
      completionTokens: progress.usage!.completionTokens + answer.call.completionTokens,
      totalTokens: progress.usage!.totalTokens + answer.call.totalTokens,
      cachedTokens: (progress.usage!.cachedTokens ?? 0) + (answer.call.cachedTokens ?? 0),
    };
    progress.costUsd = (progress.costUsd ?? 0) + (answer.call.costUsd ?? 0);
    progress.transcript = answer.transcript;
    loop.compactedBefore = answer.compactedBefore;
    if (answer.compacted) progress.compactions = (progress.compactions ?? 0) + 1;
    remember(run, answer.call);
    // Every child of the answer starts before the first is waited for: they run in parallel (children.ts).
    const children = await startChildren(run, assistantIndex, answer.toolCalls);
    for (const [callIndex, call] of answer.toolCalls.entries()) {
      progress.lastTool = call.summary;
      const child = children.get(callIndex);
      if (child) {
        await answerChild(run, child, { assistantIndex, callIndex });
        continue;
      }
      const mcp = mcpCall(run, call.name);
      await runTool(
        run,
        assistantIndex,
        callIndex,
        mcp && (await approvedMcpCall(run, mcp, assistantIndex, callIndex)),
      );
    }
    record.detail = `${answer.compacted ? `compacted before message ${answer.compactedBefore}; ` : ''}${answer.toolCalls.map((c) => c.summary).join(', ') || 'answered'}; ${answer.call.totalTokens} tokens`;
    if (answer.toolCalls.length === 0) progress.summary = answer.content;
    return answer.toolCalls.length === 0;
  });
}

/**
 * How an MCP tool's call goes (workflows/rules/mcp.ts), counted against its
 * server's calls; undefined for drydock's own tools, which run in the sandbox.
 */
function mcpCall(run: SessionRun, name: string): ToolCallInput['mcp'] {
  const { mcp } = run.loop;
  if (!mcp || !parseMcpToolName(name)) return undefined;
  const decided = decideMcpCall(mcp.servers, name, mcp.calls);
  const progress = run.status.agent!;
  progress.mcpCalls = (progress.mcpCalls ?? 0) + 1;
  if (decided.kind === 'refuse') return { refused: decided.reason, server: decided.server, tool: decided.tool };
  mcp.calls[decided.server.name] = (mcp.calls[decided.server.name] ?? 0) + 1;
  return { server: decided.server, tool: decided.tool, writes: decided.writes };
}

/** A writing MCP call once a person approved it at its gate (mcp-gate.ts), else refused with why. */
async function approvedMcpCall(
  run: SessionRun,
  mcp: NonNullable<ToolCallInput['mcp']>,
  assistantIndex: number,
  callIndex: number,
): Promise<ToolCallInput['mcp']> {
  if ('refused' in mcp || !mcp.writes) return mcp;
  const call = { server: mcp.server.name, tool: mcp.tool };
  const refused = await gateMcpWrite(run, call, { assistantIndex, callIndex, index: run.loop.messageCount });
  return refused ? { refused, ...call } : mcp;
}

async function runTool(
  run: SessionRun,
  assistantIndex: number,
  callIndex: number,
  mcp?: ToolCallInput['mcp'],
): Promise<void> {
  const { input, loop } = run;
  const runTimeoutMs = durationMs(input.agent.runTimeout);
  const result = await inSandbox(run, (sb) =>
    onHost(sb, runTimeoutMs + 60_000).runTool({
      sandbox: sb.name,
      sessionId: run.sessionId,
      turn: loop.turn,
      assistantIndex,
      callIndex,
      index: loop.messageCount,
      nonce: stepNonce(),
      outputLimit: input.agent.toolOutputLimit,
      runTimeoutMs,
      checkpointBase: sb.baseCommit,
      ...(mcp ? { mcp } : {}),
      // A plan first: until it is approved the agent only reads (agent-loop/tools.ts refuses the rest).
      ...(run.status.plan?.state === 'writing' ? { planning: true } : {}),
    }),
  );
  loop.messageCount++;
  run.status.agent!.steps++;
  remember(run, result);
}

function remember(run: SessionRun, call: AgentCall): void {
  const progress = run.status.agent!;
  progress.calls = [...(progress.calls ?? []), call].slice(-RECENT_CALLS);
}
