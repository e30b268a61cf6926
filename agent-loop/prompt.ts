/**
 * The built-in loop's system prompt: the task's frame, the repo's own
 * instructions (its AGENTS.md, read from the sandbox) and how the change
 * will be checked.
 */
import type { ShellScript } from '../sandbox';
import { proposeHint } from '../workflows/rules/repo-notes';

/** Characters of the repo's AGENTS.md that go into the system prompt. */
export const MAX_INSTRUCTIONS = 20_000;

/** The repo's AGENTS.md, at most $1 bytes of it; exit 1 when there is none. */
export const READ_INSTRUCTIONS: ShellScript = { name: 'read', text: 'test -f AGENTS.md && head -c "$1" AGENTS.md' };

/** The system prompt: the task's frame, the repo's own instructions, how the change will be checked. */
export function systemPrompt(opts: {
  instructions?: string;
  verifyCommand?: string;
  /** The repo's approved notes, already fenced (repo memory). */
  notes?: string;
  /** Say how to propose a note (the propose_note tool). */
  propose?: boolean;
}): string {
  return [
    'You are a coding agent working in a git repository at /workspace, in a sandbox without network.',
    'Use the tools to read and change files and to run commands. Make the smallest change that does the task.',
    'Do not commit, push or create branches: drydock commits your change and a person reviews it.',
    opts.verifyCommand
      ? `When you are done, the change is verified with: ${opts.verifyCommand}\nRun it yourself before you finish.`
      : 'There is no verification command; check your change yourself.',
    'When the task is done, answer with a short summary of what you changed and no tool call.',
    ...(opts.instructions
      ? ["The repository's instructions for agents (AGENTS.md):", '<agents-md>', opts.instructions, '</agents-md>']
      : []),
    ...(opts.propose ? [proposeHint(true)] : []),
    ...(opts.notes ? [opts.notes] : []),
  ].join('\n\n');
}
