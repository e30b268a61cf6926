/**
 * Pure decisions and texts of the agent phase: budgets, the prompts of agent
 * CLIs and the feedback after a failed verification. No Temporal here, so
 * they are unit-tested on their own.
 */
import type { AgentStopReason, Verification } from './api';
import { CLI_TEMPLATES, durationMs, type AgentSettings } from './input';

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

/** One argument for sh, taken literally whatever it contains. */
export function shellQuote(arg: string): string {
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

/**
 * The shell command that runs an agent CLI with `prompt` as one literal
 * argument: every element is single-quoted, so nothing in the prompt (or the
 * template) is interpreted by the shell.
 */
export function cliCommand(command: NonNullable<AgentSettings['command']>, prompt: string): string {
  const argv = typeof command === 'string' ? CLI_TEMPLATES[command] : command;
  // NUL cannot be in an argument; nothing else needs care inside single quotes.
  const literal = prompt.replace(/\0/g, '');
  return argv.map((arg) => shellQuote(arg === '{prompt}' ? literal : arg)).join(' ');
}

/** Characters of verification output that go back to the agent. */
const FEEDBACK_TAIL = 4_000;

/** What the agent is told after a failed verification. */
export function feedbackMessage(verification: Verification, round: number, maxRounds: number): string {
  return [
    `The verification of your change failed (attempt ${round} of ${maxRounds + 1}). Fix the change and finish again.`,
    verification.summary,
    ...(verification.outputTail
      ? ['Output of the test command (end):', verification.outputTail.slice(-FEEDBACK_TAIL)]
      : []),
  ].join('\n\n');
}

/** The prompt of an agent CLI: the task, how it is checked, and the last failure if any. (CLIs read AGENTS.md themselves.) */
export function cliPrompt(task: string, verifyCommand: string | undefined, feedback?: string): string {
  return [
    task,
    ...(verifyCommand ? [`The change will be verified with: ${verifyCommand}`] : []),
    'Do not commit or push: drydock commits the change and a person reviews it.',
    ...(feedback ? [feedback] : []),
  ].join('\n\n');
}
