/** The approval rules (workflows/rules/policy.ts): who may decide what, and when a decision counts. */
import { loadConfig, selfApprovalForbidden } from '../../platform/config';
import type { ApprovalPolicy } from '../../workflows/api';
import {
  defaultBranch,
  refuseDecision,
  reviewedTogether,
  tightenPolicy,
  tooSoonToApprove,
} from '../../workflows/rules/policy';

const CHANGE = 'a1b2c3d4e5f6'.repeat(5) + 'abcd';
const waiting = {
  phase: 'awaiting_approval' as const,
  requestedBy: 'rita',
  pendingApproval: { action: 'push' as const, change: CHANGE } as never,
};
const anyone = { approvers: [], forbidSelfApproval: false };
const only = (...approvers: string[]) => ({ approvers, forbidSelfApproval: false });

test('a decision by a listed approver for the pending action counts', () => {
  expect(refuseDecision(waiting, only('alice'), { decision: 'approve', action: 'push', by: 'alice' })).toBeUndefined();
  expect(refuseDecision(waiting, anyone, { decision: 'approve', action: 'push', by: 'anyone' })).toBeUndefined();
  expect(
    refuseDecision(waiting, anyone, { decision: 'approve', action: 'push', by: 'x', change: CHANGE }),
  ).toBeUndefined();
});

test('a change is named whole: a prefix, even of the pending change, is refused (T4-L1)', () => {
  for (const change of [CHANGE.slice(0, 12), CHANGE.slice(0, 63), 'a1b2', CHANGE.toUpperCase(), `${CHANGE}0`]) {
    expect(refuseDecision(waiting, anyone, { decision: 'approve', action: 'push', by: 'x', change })).toBe(
      "'change' must be the whole hash of the change: 64 hex characters, as pendingApproval.change shows",
    );
  }
});

test('an approval names the change it was given for: any other change is stale', () => {
  expect(
    refuseDecision(waiting, anyone, { decision: 'approve', action: 'push', by: 'x', change: 'f'.repeat(64) }),
  ).toBe('stale: change ffffffffffff is not the pending change a1b2c3d4e5f6');
});

test('self-approval is refused when the rule is on; self-rejection is allowed', () => {
  const strict = { approvers: [], forbidSelfApproval: true };
  expect(refuseDecision(waiting, strict, { decision: 'approve', action: 'push', by: 'rita' })).toBe(
    'rita requested this session and may not approve it (self-approval is forbidden)',
  );
  expect(refuseDecision(waiting, strict, { decision: 'reject', action: 'push', by: 'rita' })).toBeUndefined();
  expect(refuseDecision(waiting, anyone, { decision: 'approve', action: 'push', by: 'rita' })).toBeUndefined();
});

test('the server forbids self-approval unless told not to; development mode (one developer) allows it', () => {
  expect(selfApprovalForbidden(loadConfig({}))).toBe(true);
  expect(selfApprovalForbidden(loadConfig({ DRYDOCK_FORBID_SELF_APPROVAL: 'false' }))).toBe(false);
  expect(selfApprovalForbidden(loadConfig({ DRYDOCK_DEV_MODE: '1' }))).toBe(false);
  expect(selfApprovalForbidden(loadConfig({ DRYDOCK_DEV_MODE: '1', DRYDOCK_FORBID_SELF_APPROVAL: 'true' }))).toBe(true);
});

test("the console's approval of a change that appeared seconds before (a live redraw) is refused", () => {
  const at = Date.parse('2026-12-04T20:00:00Z');
  const status = (startedAt: string) => ({
    pendingApproval: { action: 'push', change: CHANGE } as never,
    timeline: [
      {
        name: 'approval: push',
        phase: 'awaiting_approval' as const,
        startedAt: '2026-12-04T19:00:00Z',
        durationMs: 5,
        ok: true,
      },
      { name: 'approval: push', phase: 'awaiting_approval' as const, startedAt },
    ],
  });
  expect(tooSoonToApprove(status('2026-12-04T19:59:57Z'), at, 10_000)).toBe(
    'change a1b2c3d4e5f6 appeared 3 s ago: look it over, then approve again (in 7 s at the earliest)',
  );
  expect(tooSoonToApprove(status('2026-12-04T19:59:50Z'), at, 10_000)).toBeUndefined();
  expect(tooSoonToApprove(status('2026-12-04T19:59:59Z'), at, 0)).toBeUndefined();
  expect(tooSoonToApprove({ timeline: [] }, at, 10_000)).toBeUndefined();
});

test('a session can tighten the server policy, never loosen it', () => {
  const server = {
    required: ['push' as const],
    approvers: ['alice', 'bob'],
    forbidSelfApproval: true,
    separateGates: true,
  };
  expect(
    tightenPolicy(server, {
      required: ['deploy'],
      approvers: ['bob', 'mallory'],
      forbidSelfApproval: false,
      separateGates: false,
    }),
  ).toEqual({
    ok: true,
    policy: { required: ['push', 'deploy'], approvers: ['bob'], forbidSelfApproval: true, separateGates: true },
  });
  expect(
    tightenPolicy(server, { required: [], approvers: [], forbidSelfApproval: false, separateGates: false }),
  ).toEqual({
    ok: true,
    policy: { required: ['push'], approvers: ['alice', 'bob'], forbidSelfApproval: true, separateGates: true },
  });
  expect(
    tightenPolicy(server, { required: [], approvers: ['mallory'], forbidSelfApproval: false, separateGates: false }),
  ).toEqual({
    ok: false,
    problem: 'approval.approvers: none of mallory is a server approver (alice, bob)',
  });
  const open = { required: [], approvers: [], forbidSelfApproval: false, separateGates: false };
  expect(
    tightenPolicy(open, { required: [], approvers: ['carol'], forbidSelfApproval: true, separateGates: false }),
  ).toEqual({
    ok: true,
    policy: { required: [], approvers: ['carol'], forbidSelfApproval: true, separateGates: false },
  });
});

test.each([
  [{ decision: 'approve', action: 'push', by: 'mallory' }, only('alice'), /mallory is not an approver.*alice/],
  [
    { decision: 'approve', action: 'merge', by: 'alice' },
    anyone,
    /unknown action 'merge'; known actions: push, pull_request, deploy, mcp_write/,
  ],
  [{ decision: 'approve', action: 'deploy', by: 'alice' }, anyone, /no approval is pending for deploy/],
  [{ decision: 'maybe', action: 'push', by: 'alice' }, anyone, /unknown decision 'maybe'/],
  [{ decision: 'approve', action: 'push', by: ' ' }, anyone, /'by' must name who decides/],
  [undefined, anyone, /needs \{decision, action, by\}/],
  [{ action: 'push', by: 'alice' }, anyone, /unknown decision 'undefined'/],
  [{ decision: 'approve', action: 'push', by: 'alice', change: 42 }, anyone, /'change' must be the whole hash/],
  [{ decision: 'approve', action: 'push', by: 'alice', comment: {} }, anyone, /'comment' must be text/],
])('refused: %j', (input, policy, reason) => {
  expect(refuseDecision(waiting, policy, input as never)).toMatch(reason);
});

test('nothing can be approved before the change is shown', () => {
  expect(refuseDecision({ phase: 'agent' }, anyone, { decision: 'approve', action: 'push', by: 'alice' })).toBe(
    'no approval is pending for push (phase: agent)',
  );
});

test('branch names are valid git refs', () => {
  expect(defaultBranch('session-20261130-ab12')).toBe('drydock/session-20261130-ab12');
  expect(defaultBranch('a b..c~d^e:f.lock')).toBe('drydock/a-b.c-d-e-f');
  expect(defaultBranch('...')).toBe('drydock/session');
});

test('one review per change: approving the pull request covers its push, unless policy keeps two gates', () => {
  const both = ['push' as const, 'pull_request' as const];
  const server = { required: both, approvers: [], forbidSelfApproval: false, separateGates: false };
  const session = { required: [], approvers: [], forbidSelfApproval: false, separateGates: false };
  const policy = (tightenPolicy(server, session) as { policy: ApprovalPolicy }).policy;
  expect(policy.separateGates).toBe(false);
  expect(reviewedTogether(policy, true)).toBe(true);
  expect(reviewedTogether(policy, false)).toBe(false); // no pull request: the push has its own gate
  expect(reviewedTogether({ ...policy, required: ['push'] }, true)).toBe(false);
  // A session may ask for two gates; a server with two gates keeps them.
  const tightened = tightenPolicy(server, { ...session, separateGates: true }) as { policy: ApprovalPolicy };
  expect(reviewedTogether(tightened.policy, true)).toBe(false);
  expect(reviewedTogether({ ...policy, separateGates: true }, true)).toBe(false);
});

test('a decision on an action covered by the pending one names the action to decide on', () => {
  const waiting = {
    phase: 'awaiting_approval' as const,
    pendingApproval: {
      action: 'pull_request' as const,
      covers: ['push' as const],
      change: 'c'.repeat(64),
      approvers: [],
      deadline: '',
      evidence: { branch: '', commit: '', diffstat: '', tests: '', screenshots: [] },
    },
  };
  const open = { approvers: [], forbidSelfApproval: false };
  expect(refuseDecision(waiting, open, { decision: 'approve', action: 'push', by: 'alice' })).toBe(
    'push is approved together with pull_request (one review per change): decide on pull_request',
  );
  expect(refuseDecision(waiting, open, { decision: 'approve', action: 'pull_request', by: 'alice' })).toBeUndefined();
});
