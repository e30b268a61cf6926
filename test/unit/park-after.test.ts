/** The operator's parking setting: DRYDOCK_PARK_AFTER, validated, and carried by the policy a session runs under. */
import { loadConfig } from '../../platform/config';
import { tightenPolicy } from '../../workflows/rules/policy';

test('DRYDOCK_PARK_AFTER: 15m by default, a duration, or "never" (0 too); anything else is refused naming it', () => {
  expect(loadConfig({}).DRYDOCK_PARK_AFTER).toBe('15m');
  expect(loadConfig({ DRYDOCK_PARK_AFTER: '2h' }).DRYDOCK_PARK_AFTER).toBe('2h');
  expect(loadConfig({ DRYDOCK_PARK_AFTER: 'never' }).DRYDOCK_PARK_AFTER).toBe('never');
  expect(loadConfig({ DRYDOCK_PARK_AFTER: '0' }).DRYDOCK_PARK_AFTER).toBe('never');
  expect(() => loadConfig({ DRYDOCK_PARK_AFTER: 'soon' })).toThrow(/DRYDOCK_PARK_AFTER/);
  expect(() => loadConfig({ DRYDOCK_PARK_AFTER: '-5m' })).toThrow(/DRYDOCK_PARK_AFTER/);
});

test("parkAfter is the server's alone: the policy a session runs under keeps it, and a session's own is ignored", () => {
  const base = { required: [], approvers: [], forbidSelfApproval: false, separateGates: false };
  const settled = tightenPolicy({ ...base, parkAfter: '10m' }, { ...base, parkAfter: 'never' });
  expect(settled).toEqual({ ok: true, policy: { ...base, parkAfter: '10m' } });
  expect(tightenPolicy(base, { ...base, parkAfter: '1m' })).toEqual({ ok: true, policy: base });
});
