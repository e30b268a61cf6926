/**
 * The console's review-time counts (workers/routes/review.ts) on a status
 * that no worker answered in time (from the memo, as on a busy machine): the
 * change waiting for approval is still known, and a count whose change cannot
 * be checked goes unrecorded instead of refusing the decision or follow-up
 * that carries it (issue 45: the console's answer was "refused: change: not a
 * change of …"). A change that is not the session's is still refused.
 */
import pino from 'pino';
import { addConsoleTime, changeNamed, changesOf } from '../../workers/routes/review';
import { HttpError, type ServeContext } from '../../workers/http';
import type { SessionStatus } from '../../workflows/api';

const ROUND_1 = 'a'.repeat(64);
const ROUND_2 = 'b'.repeat(64);

const answered: SessionStatus = {
  sessionId: 's-1',
  repo: 'https://example.invalid/r.git',
  task: 't',
  phase: 'awaiting_approval',
  startedAt: '2026-12-04T00:00:00Z',
  timeline: [],
  decisions: [],
  refusedDecisions: [],
  rounds: [{ round: 1, change: ROUND_1 }] as SessionStatus['rounds'],
  pendingApproval: { action: 'push', change: ROUND_2 } as SessionStatus['pendingApproval'],
};

/** As platform/sessions.ts's lastKnownStatus makes it: no rounds, the memo's pending approval under `unanswered`. */
const fromMemo: SessionStatus = {
  ...answered,
  rounds: undefined,
  pendingApproval: undefined,
  unanswered: {
    message: 'no worker answered within 2 s',
    pendingActivities: [],
    pendingApproval: { action: 'push', change: ROUND_2, deadline: '2026-12-05T00:00:00Z' },
  },
};

function context(): { ctx: ServeContext; added: [string, number][]; warned: string[] } {
  const added: [string, number][] = [];
  const warned: string[] = [];
  const log = pino({ level: 'warn' }, { write: (line: string) => void warned.push(line) });
  const reviews = { addConsole: async (k: { change: string }, ms: number) => void added.push([k.change, ms]) };
  return { ctx: { reviews, log } as unknown as ServeContext, added, warned };
}

test('the changes of a session: each round and the pending one; from the memo, the pending one', () => {
  expect(changesOf(answered)).toEqual([ROUND_1, ROUND_2]);
  expect(changesOf(fromMemo)).toEqual([ROUND_2]);
  expect(changeNamed(fromMemo, ROUND_2.slice(0, 12))).toBe(ROUND_2);
});

test('a count on the pending change is recorded even when the status came from the memo', async () => {
  const { ctx, added } = context();
  expect(await addConsoleTime(ctx, fromMemo, 'alice', { change: ROUND_2, reviewMs: 1_500 })).toBe(true);
  expect(added).toEqual([[ROUND_2, 1_500]]);
});

test('a count on a change the memo cannot confirm goes unrecorded (logged), not refused', async () => {
  const { ctx, added, warned } = context();
  expect(await addConsoleTime(ctx, fromMemo, 'alice', { change: ROUND_1, reviewMs: 1_500 })).toBe(false);
  expect(added).toEqual([]);
  expect(warned.join('')).toContain("the session's changes are not known now");
});

test('a change that is not the session’s is refused when the session answered', async () => {
  const { ctx } = context();
  const refused = await addConsoleTime(ctx, answered, 'alice', { change: 'c'.repeat(64), reviewMs: 1_500 }).catch(
    (err: unknown) => err,
  );
  expect(refused).toBeInstanceOf(HttpError);
  expect(refused).toMatchObject({ status: 409, message: 'change: not a change of s-1' });
});
