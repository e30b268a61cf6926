/** Who may attach to a session's sandbox, and when (workflows/rules/attach.ts). */
import { checkAttach, checkDetach, checkHandOver, type AttachState } from '../../workflows/rules/attach';
import type { AttachInput } from '../../workflows/api';

const policy = { approvers: ['alice'] };
const live: AttachState = { phase: 'awaiting_approval', requestedBy: 'rita', sandbox: { name: 'sb-1' } };
const attachedBy = (by: string): AttachState => ({
  ...live,
  phase: 'attached',
  attached: { by, at: '2026-12-01T00:00:00.000Z', sandbox: 'sb-1', host: 'h', during: 'awaiting_approval' },
});
const reason = (r: ReturnType<typeof checkAttach>) => (r.ok ? 'ok' : r.reason);

test('approvers and the requester may attach while the sandbox is live', () => {
  for (const phase of ['agent', 'verifying', 'awaiting_approval'] as const) {
    expect(reason(checkAttach({ ...live, phase }, policy, { by: 'alice' }))).toBe('ok');
    expect(reason(checkAttach({ ...live, phase }, policy, { by: 'rita' }))).toBe('ok');
  }
  expect(reason(checkAttach(live, policy, { by: 'mallory' }))).toBe(
    'mallory may not attach to this session (allowed: alice, rita)',
  );
  // Nobody named anywhere: anyone who names themselves.
  expect(reason(checkAttach({ ...live, requestedBy: undefined }, { approvers: [] }, { by: 'x' }))).toBe('ok');
});

test('malformed input names the bad field', () => {
  expect(reason(checkAttach(live, policy, undefined))).toBe('attach needs {by}');
  expect(reason(checkAttach(live, policy, { by: ' ' }))).toBe("'by' must name who attaches");
  expect(reason(checkAttach(live, policy, { by: 'a'.repeat(201) }))).toBe("'by' is 201 characters; at most 200");
  expect(reason(checkAttach(live, policy, { by: 7 } as unknown as AttachInput))).toBe("'by' must name who attaches");
});

test('one person at a time; the one attached may attach again', () => {
  expect(reason(checkAttach(attachedBy('rita'), policy, { by: 'rita' }))).toBe('ok');
  expect(reason(checkAttach(attachedBy('rita'), policy, { by: 'alice' }))).toBe(
    'rita is attached since 2026-12-01T00:00:00.000Z; one person at a time',
  );
});

test('no live sandbox: torn down while open for follow-ups, not ready yet, publishing or ended', () => {
  expect(reason(checkAttach({ ...live, phase: 'awaiting_followup' }, policy, { by: 'rita' }))).toMatch(
    /^the sandbox was torn down after publishing .*send a follow-up to re-provision it/,
  );
  expect(reason(checkAttach({ ...live, phase: 'provisioning' }, policy, { by: 'rita' }))).toBe(
    'the sandbox is not ready yet (phase provisioning); try again soon',
  );
  for (const phase of ['publishing', 'tearing_down', 'completed'] as const) {
    expect(reason(checkAttach({ ...live, phase }, policy, { by: 'rita' }))).toBe(
      `the session has no sandbox to attach to in phase ${phase}`,
    );
  }
});

test('detach: the one attached, or an approver or the requester; refused when nobody is attached', () => {
  expect(reason(checkDetach(live, policy, { by: 'rita' }))).toBe('nobody is attached (phase awaiting_approval)');
  expect(reason(checkDetach(attachedBy('rita'), policy, { by: 'rita' }))).toBe('ok');
  expect(reason(checkDetach(attachedBy('rita'), policy, { by: 'alice' }))).toBe('ok');
  expect(reason(checkDetach(attachedBy('rita'), policy, { by: 'mallory' }))).toBe(
    'mallory may not detach from this session (allowed: alice, rita)',
  );
});

test('hand-over: from the one attached to another who may attach; nobody else', () => {
  expect(reason(checkHandOver(attachedBy('rita'), policy, { from: 'rita', to: 'alice' }))).toBe('ok');
  expect(reason(checkHandOver(attachedBy('rita'), policy, { from: 'alice', to: 'rita' }))).toBe(
    'alice is not the one attached (rita is)',
  );
  expect(reason(checkHandOver(live, policy, { from: 'rita', to: 'alice' }))).toBe(
    'rita is not the one attached (nobody is)',
  );
  expect(reason(checkHandOver(attachedBy('rita'), policy, { from: 'rita', to: 'mallory' }))).toBe(
    'mallory may not attach to this session (allowed: alice, rita)',
  );
  expect(reason(checkHandOver(attachedBy('rita'), policy, { from: 'rita', to: 'rita' }))).toBe(
    'a hand-over is to someone else',
  );
  expect(reason(checkHandOver(attachedBy('rita'), policy, undefined))).toBe('a hand-over needs {from, to}');
});
