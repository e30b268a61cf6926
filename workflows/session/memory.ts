/**
 * Repo memory in a session (docs/agents.md, Repo memory): the repo's approved
 * notes, fenced, for the agent's prompt (repoPolicy read them at the start),
 * and the notes the agent proposed, collected after each round's verified
 * change for a maintainer to decide on.
 */
import { isCancellation } from '@temporalio/workflow';
import type { GivenNote } from '../rules/repo-notes';
import { notesSection } from '../rules/repo-notes';
import { stepNonce } from './nonce';
import { onHost } from './proxies';
import { inSandbox } from './sandbox';
import type { SessionRun } from './state';

/** At the start: what the session is given, and under which repo its proposals are kept. */
export function rememberNotes(run: SessionRun, repo: string, notes: GivenNote[] | undefined): void {
  const given = notes ?? [];
  run.loop.memory = { repo, ...(given.length ? { notes: notesSection(given, stepNonce()) } : {}) };
  if (given.length) run.status.memory = { given: given.map(({ id, version }) => ({ id, version })), proposed: [] };
}

/** Whether the agent's proposals are collected (input.memory.propose; a session from before repo memory: no). */
export function proposing(run: SessionRun): boolean {
  return run.loop.memory !== undefined && run.input.memory?.propose !== false;
}

/**
 * Keeps what the agent proposed this round (the notes file, emptied after).
 * Proposals are a side matter: failing to keep them is noted, and the change goes on to its gate.
 */
export async function collectNotes(run: SessionRun): Promise<void> {
  if (!proposing(run)) return;
  const { repo } = run.loop.memory!;
  const round = run.status.round ?? 1;
  let proposed: number[];
  try {
    ({ proposed } = await inSandbox(run, (sb) =>
      onHost(sb).collectNotes({ sandbox: sb.name, sessionId: run.sessionId, repo, round }),
    ));
  } catch (err) {
    if (isCancellation(err)) throw err;
    await run.note('notes: not kept', `the proposed notes could not be kept: ${errorText(err)}`, false);
    return;
  }
  if (!proposed.length) return;
  const memory = (run.status.memory ??= { given: [], proposed: [] });
  memory.proposed = [...memory.proposed, ...proposed];
  await run.note(
    'notes: proposed',
    `${proposed.length} for a maintainer (${proposed.map((id) => `#${id}`).join(', ')})`,
  );
}

const errorText = (err: unknown) => (err instanceof Error ? err.message : String(err)).slice(0, 300);
