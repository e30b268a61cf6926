/**
 * Repo memory in a session (docs/agents.md, Repo memory): the repo's approved
 * notes, fenced, for the agent's prompt (repoPolicy read them at the start),
 * and the notes the agent proposed, taken out of the sandbox with each commit
 * and kept after each round's verified change for a maintainer to decide on.
 */
import { isCancellation } from '@temporalio/workflow';
import type { GivenNote } from '../rules/repo-notes';
import { NOTE_LIMITS, notesSection } from '../rules/repo-notes';
import { stepNonce } from './nonce';
import { records } from './proxies';
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
 * Keeps what the agent proposed this round (taken out of the sandbox with each commit: no
 * exec of its own), at most NOTE_LIMITS.perRound notes; nothing to keep, no activity.
 * Proposals are a side matter: failing to keep them is noted, and the change goes on to its gate.
 */
export async function keepNotes(run: SessionRun): Promise<void> {
  const memory = run.loop.memory;
  const texts = (memory?.taken ?? []).slice(0, NOTE_LIMITS.perRound);
  if (!memory || !proposing(run) || !texts.length) return;
  memory.taken = undefined;
  const round = run.status.round ?? 1;
  let proposed: number[];
  try {
    ({ proposed } = await records.keepNotes({ sessionId: run.sessionId, repo: memory.repo, round, texts }));
  } catch (err) {
    if (isCancellation(err)) throw err;
    await run.note('notes: not kept', `the proposed notes could not be kept: ${errorText(err)}`, false);
    return;
  }
  if (!proposed.length) return;
  const kept = (run.status.memory ??= { given: [], proposed: [] });
  kept.proposed = [...kept.proposed, ...proposed];
  await run.note(
    'notes: proposed',
    `${proposed.length} for a maintainer (${proposed.map((id) => `#${id}`).join(', ')})`,
  );
}

const errorText = (err: unknown) => (err instanceof Error ? err.message : String(err)).slice(0, 300);
