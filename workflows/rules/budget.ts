/** Pure decisions of the agent phase: which budget stops the agent, in words. */
import type { AgentStopReason } from '../api';
import type { AgentSettings } from '../input';
import { durationMs } from '../units';

/** What the agent has used so far in the session. */
export interface BudgetUsed {
  turns: number;
  tokens: number;
  costUsd: number;
  elapsedMs: number;
}

/** The budget that stops the agent before its next model call, if any. */
export function budgetStop(budget: AgentSettings['budget'], used: BudgetUsed): AgentStopReason | undefined {
  if (used.turns >= budget.maxTurns) return 'max_turns';
  if (budget.maxTokens !== undefined && used.tokens >= budget.maxTokens) return 'max_tokens';
  if (budget.maxCost !== undefined && used.costUsd >= budget.maxCost) return 'max_cost';
  if (used.elapsedMs >= durationMs(budget.maxWallTime)) return 'max_wall_time';
  return undefined;
}

/** Says which budget ran out, with its limit. */
export function describeStop(reason: AgentStopReason, budget: AgentSettings['budget']): string {
  switch (reason) {
    case 'done':
      return 'the agent finished';
    case 'max_turns':
      return `budget: ${budget.maxTurns} turns used`;
    case 'max_tokens':
      return `budget: ${budget.maxTokens} tokens used`;
    case 'max_cost':
      return `budget: $${budget.maxCost} spent`;
    case 'max_wall_time':
      return `budget: wall time of ${budget.maxWallTime} used`;
  }
}
