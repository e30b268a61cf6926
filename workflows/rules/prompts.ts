/**
 * Texts of the agent phase: the prompts of agent CLIs and the feedback after
 * a failed verification. Pure, so they are unit-tested on their own.
 */
import type { Verification } from '../api';
import { proposeHint } from './repo-notes';

/** One argument for sh, taken literally whatever it contains. */
export function shellQuote(arg: string): string {
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

/**
 * The shell command of an argv with `prompt` as one literal argument where
 * it says "{prompt}": every element is single-quoted, so nothing in the
 * prompt (or the argv) is interpreted by the shell, except an element that is
 * exactly "{env:DRYDOCK_NAME}", which becomes "$DRYDOCK_NAME" (only drydock's own variables).
 */
export function cliCommand(argv: readonly string[], prompt: string): string {
  // NUL cannot be in an argument; nothing else needs care inside single quotes.
  const literal = prompt.replace(/\0/g, '');
  // "{env:DRYDOCK_...}" is the value of drydock's variable of the step, which the worker sets (a config holding a token).
  return argv
    .map((arg) =>
      /^\{env:DRYDOCK_[A-Z_]+\}$/.test(arg) ? `"$${arg.slice(5, -1)}"` : shellQuote(arg === '{prompt}' ? literal : arg),
    )
    .join(' ');
}

/** Characters of verification output that go back to the agent. */
const FEEDBACK_TAIL = 4_000;

/** What the agent is told after a failed verification. */
export function feedbackMessage(verification: Verification, attempt: number, maxRounds: number): string {
  return [
    `The verification of your change failed (attempt ${attempt} of ${maxRounds + 1}). Fix the change and finish again.`,
    verification.summary,
    ...(verification.outputTail
      ? ['Output of the test command (end):', verification.outputTail.slice(-FEEDBACK_TAIL)]
      : []),
  ].join('\n\n');
}

/**
 * The prompt of an agent CLI: the task, the approved plan (fenced) if any, how
 * it is checked, and the last failure if any (CLIs read AGENTS.md themselves);
 * with repo memory, the repo's approved notes (fenced: rules/repo-notes.ts) and
 * how to propose one.
 */
export function cliPrompt(
  task: string,
  verifyCommand: string | undefined,
  feedback?: string,
  extra: { plan?: string; notes?: string; propose?: boolean } = {},
): string {
  return [
    task,
    ...(extra.plan ? [extra.plan] : []),
    ...(verifyCommand ? [`The change will be verified with: ${verifyCommand}`] : []),
    'Do not commit or push: drydock commits the change and a person reviews it.',
    ...(extra.propose ? [proposeHint(false)] : []),
    ...(extra.notes ? [extra.notes] : []),
    ...(feedback ? [feedback] : []),
  ].join('\n\n');
}
