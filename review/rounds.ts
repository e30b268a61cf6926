/**
 * A session's changes round by round: where each round's interdiff is kept
 * (the worker writes them with its own git, sandbox/activities/commit.ts),
 * and which round a reviewer saw last. Pure.
 */
import type { RoundRecord } from '../workflows/api';

/** The artifact of round `round`'s change since round `since` (an earlier one). */
export function roundDiffName(round: number, since: number): string {
  return `rounds/${round}/since-${since}.diff`;
}

/**
 * The newest earlier round whose change this reviewer has seen (spent time on)
 * and that has a commit; undefined when they saw none of them.
 */
export function lastSeenRound(rounds: RoundRecord[], current: number, seen: string[]): number | undefined {
  const earlier = rounds.filter((r) => r.round < current && r.commit && r.change && seen.includes(r.change));
  return earlier.at(-1)?.round;
}
