import { defaultBranch, refuseDecision } from '../../workflows/policy';

const waiting = { phase: 'awaiting_approval' as const, pendingApproval: { action: 'push' as const } as never };

test('a decision by a listed approver for the pending action counts', () => {
  expect(refuseDecision(waiting, ['alice'], { decision: 'approve', action: 'push', by: 'alice' })).toBeUndefined();
  expect(refuseDecision(waiting, [], { action: 'push', by: 'anyone' })).toBeUndefined();
});

test.each([
  [{ decision: 'approve', action: 'push', by: 'mallory' }, ['alice'], /mallory is not an approver.*alice/],
  [{ decision: 'approve', action: 'deploy', by: 'alice' }, [], /unknown action 'deploy'; known actions: push/],
  [{ decision: 'maybe', action: 'push', by: 'alice' }, [], /unknown decision 'maybe'/],
  [{ decision: 'approve', action: 'push', by: ' ' }, [], /'by' must name who decides/],
  [undefined, [], /needs \{action, by\}/],
])('refused: %j', (input, approvers, reason) => {
  expect(refuseDecision(waiting, approvers, input as never)).toMatch(reason);
});

test('nothing can be approved before the change is shown', () => {
  expect(refuseDecision({ phase: 'agent' }, [], { action: 'push', by: 'alice' })).toBe(
    'no approval is pending for push (phase: agent)',
  );
});

test('branch names are valid git refs', () => {
  expect(defaultBranch('session-20261130-ab12')).toBe('drydock/session-20261130-ab12');
  expect(defaultBranch('a b..c~d^e:f.lock')).toBe('drydock/a-b.c-d-e-f');
  expect(defaultBranch('...')).toBe('drydock/session');
});
