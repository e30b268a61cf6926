/**
 * Fixing its own pull request (docs/webhooks.md, CI on a drydock pull request):
 * the rules that take a CI failure as a follow-up round, cap them per pull
 * request, and let a person's follow-up win over an automatic one.
 */
import { CI_SENDER, checkFollowup, queueFollowup, type Followup } from '../../workflows/rules/followup';

const state = { phase: 'awaiting_followup' as const, requestedBy: 'alice', queued: 0, agentKind: 'openai' as const };
const policy = { approvers: ['alice'] };
const ci = (over: object = {}) => ({
  by: CI_SENDER,
  text: 'CI failed: tests',
  ci: { run: 7, commit: 'abc1234', cap: 2 },
  ...over,
});

test('a CI failure is a follow-up from drydock, taken while rounds are left, refused at the cap', () => {
  expect(checkFollowup(state, policy, ci())).toEqual({
    ok: true,
    followup: { by: CI_SENDER, text: 'CI failed: tests', ci: { run: 7, commit: 'abc1234' } },
  });
  expect(checkFollowup({ ...state, ciRounds: 1 }, policy, ci()).ok).toBe(true);
  expect(checkFollowup({ ...state, ciRounds: 2 }, policy, ci())).toEqual({
    ok: false,
    reason: 'CI fixed 2 time(s) already: at most 2 automatic rounds per pull request',
  });
  expect(checkFollowup(state, policy, ci({ ci: { run: 7, commit: 'abc1234', cap: 0 } })).ok).toBe(false);
});

test("it waits behind nothing: with a follow-up queued (a person's) it is refused", () => {
  expect(checkFollowup({ ...state, queued: 1 }, policy, ci())).toMatchObject({ ok: false, reason: /person's wins/ });
});

test('only drydock sends it, well formed, to an agent that can read it', () => {
  expect(checkFollowup(state, policy, ci({ by: 'mallory' }))).toMatchObject({ ok: false });
  expect(checkFollowup(state, policy, ci({ ci: { run: 0, commit: 'abc1234', cap: 2 } }))).toMatchObject({ ok: false });
  expect(checkFollowup(state, policy, ci({ ci: { run: 7, commit: 'not a sha', cap: 2 } }))).toMatchObject({
    ok: false,
  });
  expect(checkFollowup({ ...state, agentKind: 'script' }, policy, ci())).toMatchObject({ ok: false, reason: /script/ });
  expect(checkFollowup({ ...state, phase: 'completed' }, policy, ci())).toMatchObject({ ok: false });
  expect(checkFollowup(state, policy, ci({ text: 'x'.repeat(20_000) }))).toMatchObject({ ok: false });
});

test("a person's follow-up takes the place of a CI failure's still waiting; a CI failure's joins the queue", () => {
  const auto: Followup = { by: CI_SENDER, text: 'CI failed', ci: { run: 7, commit: 'abc1234' } };
  const person: Followup = { by: 'alice', text: 'rename it' };
  expect(queueFollowup([auto], person)).toEqual([person]);
  expect(queueFollowup([person], auto)).toEqual([person, auto]);
  expect(queueFollowup([], auto)).toEqual([auto]);
});
