/**
 * Per-repo roles, the pure rules (identity/roles.ts): the identities file's
 * `roles` section and its mistakes, which role a name holds where, and who
 * may decide on or steer a session. The same rules through `drydock serve`:
 * test/e2e/roles.test.ts.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseDirectory } from '../../identity/directory';
import { loadIdentities } from '../../identity/identities';
import { checkHolders, covers, decisionRefusal, REQUESTER_UNKNOWN, Roles, steeringRefusal } from '../../identity/roles';

const FILE = `
people:
  alice: {}
  bob: {}
  carol: {}
  dave: {}
  erin: {}
roles:
  acme/shop:
    approver: [alice, bob]
    requester: [carol, machine:ci]
    reader: dave
  acme/*:
    reader: [erin]
  "*":
    reader: machine:grafana
  acme/docs:
    approver: alice
    forbidSelfApproval: false
`;

const roles = () => parseDirectory(FILE).roles;

test('each role includes the ones below it: approver > requester > reader; a name without a role holds nothing', () => {
  const r = roles();
  expect(r.configured).toBe(true);
  expect(r.roleOf('alice', 'acme/shop')).toBe('approver');
  expect(['reader', 'requester', 'approver'].map((role) => r.holds('alice', 'acme/shop', role as never))).toEqual([
    true,
    true,
    true,
  ]);
  expect(['reader', 'requester', 'approver'].map((role) => r.holds('carol', 'acme/shop', role as never))).toEqual([
    true,
    true,
    false,
  ]);
  expect(r.holds('machine:ci', 'acme/shop', 'requester')).toBe(true);
  expect(r.holds('dave', 'acme/shop', 'reader')).toBe(true);
  expect(r.holds('dave', 'acme/shop', 'requester')).toBe(false);
  expect(r.roleOf('mallory', 'acme/shop')).toBeUndefined();
  expect(r.holds('mallory', 'acme/shop', 'reader')).toBe(false);
  // A machine and a GitHub login are other names than a person's.
  expect(r.holds('github:alice', 'acme/shop', 'reader')).toBe(false);
});

test('patterns: owner/name (any case), owner/* (one level), "*" (every repo, the unregistered too)', () => {
  expect(covers('acme/shop', 'ACME/Shop')).toBe(true);
  expect(covers('acme/shop', 'acme/shopping')).toBe(false);
  expect(covers('acme/*', 'acme/anything')).toBe(true);
  expect(covers('acme/*', 'acmecorp/shop')).toBe(false);
  expect(covers('*', 'other/repo')).toBe(true);
  expect(covers('*', undefined)).toBe(true);
  expect(covers('acme/*', undefined)).toBe(false);
  const r = roles();
  // The highest role over every pattern that covers the repo.
  expect(r.roleOf('erin', 'acme/shop')).toBe('reader');
  expect(r.roleOf('erin', 'other/repo')).toBeUndefined();
  expect(r.holds('machine:grafana', 'other/repo', 'reader')).toBe(true);
  expect(r.holds('machine:grafana', undefined, 'reader')).toBe(true);
  expect(r.holds('alice', undefined, 'reader')).toBe(false);
  expect(r.readsEverything('machine:grafana')).toBe(true);
  expect(r.readsEverything('alice')).toBe(false);
});

test('without a roles section people are not checked: each holds every role and may approve their own session', () => {
  const open = parseDirectory('people:\n  alice: {}\n').roles;
  expect(open.configured).toBe(false);
  expect(open.holds('anyone', 'acme/shop', 'approver')).toBe(true);
  expect(open.readsEverything('machine:ci')).toBe(true);
  expect(open.forbidsSelfApproval('acme/shop')).toBe(false);
  expect(decisionRefusal(open, 'alice', { repo: 'acme/shop', requestedBy: 'alice' }, 'approve')).toBeUndefined();
  expect(new Roles().configured).toBe(false);
  // An empty section is configured: nobody holds anything.
  const shut = parseDirectory('people:\n  alice: {}\nroles: {}\n').roles;
  expect(shut.configured).toBe(true);
  expect(shut.holds('alice', 'acme/shop', 'reader')).toBe(false);
});

test("without a roles section a machine's token reads and starts sessions but does not decide or steer them", () => {
  const open = parseDirectory('people:\n  alice: {}\n').roles;
  expect(open.holds('machine:ci', 'acme/shop', 'requester')).toBe(true);
  expect(open.holds('machine:ci', 'acme/shop', 'approver')).toBe(false);
  expect(decisionRefusal(open, 'machine:ci', { repo: undefined }, 'approve')).toBe(
    "machine:ci may not approve, reject or steer sessions of this repo: a machine's token does not decide without a roles section; give machine:ci the approver role in the identities file's roles",
  );
  expect(steeringRefusal(open, 'machine:ci', { repo: undefined, requestedBy: 'alice' })).toMatch(/roles section/);
  // Its own request it may steer, as a requester may.
  expect(steeringRefusal(open, 'machine:ci', { repo: undefined, requestedBy: 'machine:ci' })).toBeUndefined();
  // Development mode (one developer's scripts): machines decide too, as serve loads it.
  expect(new Roles(undefined, true).holds('machine:ci', 'acme/shop', 'approver')).toBe(true);
  const served = (dev: boolean) =>
    loadIdentities(
      { DRYDOCK_API_TOKENS: 'ci=cccccccccccccccccccc', DRYDOCK_DEV_MODE: dev, DRYDOCK_OIDC_CLAIM: 'email' },
      () => '',
    ).roles;
  expect(served(false).holds('machine:ci', undefined, 'approver')).toBe(false);
  expect(served(true).holds('machine:ci', undefined, 'approver')).toBe(true);
});

test('a decision needs the approver role, named with the repo; self-approval is forbidden unless the repo allows it', () => {
  const r = roles();
  const shop = { repo: 'acme/shop', requestedBy: 'alice' };
  expect(decisionRefusal(r, 'dave', shop, 'approve')).toBe(
    'dave may not approve, reject or steer sessions of acme/shop: that needs the approver role (dave is a reader)',
  );
  expect(decisionRefusal(r, 'carol', shop, 'reject')).toMatch(/needs the approver role \(carol is a requester\)/);
  expect(decisionRefusal(r, 'mallory', shop, 'approve')).toMatch(/\(mallory has no role there\)$/);
  expect(decisionRefusal(r, 'alice', shop, 'approve')).toBe(
    "alice requested this session and may not approve it: self-approval is forbidden on acme/shop (the roles' forbidSelfApproval)",
  );
  // Rejecting one's own request is not approving it.
  expect(decisionRefusal(r, 'alice', shop, 'reject')).toBeUndefined();
  expect(decisionRefusal(r, 'bob', shop, 'approve')).toBeUndefined();
  // acme/docs allows it; the most specific pattern that says so decides.
  expect(r.forbidsSelfApproval('acme/shop')).toBe(true);
  expect(r.forbidsSelfApproval('acme/docs')).toBe(false);
  expect(decisionRefusal(r, 'alice', { repo: 'acme/docs', requestedBy: 'alice' }, 'approve')).toBeUndefined();
  const layered = parseDirectory(
    'people: {alice: {}}\nroles:\n  "*": {approver: alice, forbidSelfApproval: false}\n  acme/*: {forbidSelfApproval: true}\n',
  ).roles;
  expect(layered.forbidsSelfApproval('acme/shop')).toBe(true);
  expect(layered.forbidsSelfApproval('other/repo')).toBe(false);
  // A status no worker answered for has no requester: an approval is refused until one can be read.
  const unknown = { repo: 'acme/shop', requesterUnknown: true };
  expect(decisionRefusal(r, 'bob', unknown, 'approve')).toBe(REQUESTER_UNKNOWN);
  expect(decisionRefusal(r, 'bob', unknown, 'reject')).toBeUndefined();
  expect(decisionRefusal(r, 'alice', { ...unknown, repo: 'acme/docs' }, 'approve')).toBeUndefined();
  // An unregistered repo's session is named by its URL.
  expect(decisionRefusal(r, 'alice', { repo: undefined, shown: 'file:///x.git' }, 'approve')).toMatch(
    /sessions of file:\/\/\/x.git: that needs the approver role \(alice has no role there\)/,
  );
});

test("a follow-up or attach: an approver, or the session's own requester while they hold the requester role", () => {
  const r = roles();
  expect(steeringRefusal(r, 'carol', { repo: 'acme/shop', requestedBy: 'carol' })).toBeUndefined();
  expect(steeringRefusal(r, 'carol', { repo: 'acme/shop', requestedBy: 'alice' })).toMatch(/needs the approver role/);
  expect(steeringRefusal(r, 'bob', { repo: 'acme/shop', requestedBy: 'alice' })).toBeUndefined();
  // A reader named as the requester (a session started before the roles changed) may not steer it.
  expect(steeringRefusal(r, 'dave', { repo: 'acme/shop', requestedBy: 'dave' })).toMatch(/dave is a reader/);
});

test('the roles section: a mistake names its field (an unknown role, a person not in people, a bad pattern)', () => {
  const file = (roles: string) => `people:\n  alice: {}\nroles:\n${roles}`;
  expect(() => parseDirectory(file('  acme/shop:\n    admin: [alice]\n'))).toThrow(
    'DRYDOCK_IDENTITIES_FILE: roles.acme/shop.admin: not a role: the roles are reader, requester, approver (and the switch forbidSelfApproval)',
  );
  expect(() => parseDirectory(file('  acme/shop:\n    approver: [alice, dave]\n'))).toThrow(
    'DRYDOCK_IDENTITIES_FILE: roles.acme/shop.approver: dave is not in people',
  );
  expect(() => parseDirectory(file('  acme/shop:\n    reader: github:octocat\n'))).toThrow(
    'roles.acme/shop.reader: github:octocat is neither a person of people nor machine:<name>',
  );
  expect(() => parseDirectory(file('  acme:\n    reader: alice\n'))).toThrow(
    'roles.acme: a repo pattern is owner/name, owner/* or "*"',
  );
  expect(() => parseDirectory(file('  acme/shop:\n    approver: {alice: yes}\n'))).toThrow(
    'roles.acme/shop.approver: a name or a list of names',
  );
  expect(() => parseDirectory(file('  acme/shop:\n    forbidSelfApproval: "no"\n'))).toThrow(
    'roles.acme/shop.forbidSelfApproval: true or false',
  );
  // Machines are checked against the configured API tokens when serve loads both.
  const section = parseDirectory(FILE).roles.section!;
  expect(checkHolders(section, new Set(['alice', 'bob', 'carol', 'dave', 'erin']), new Set(['machine:ci']))).toEqual([
    'roles.*.reader: machine:grafana has no API token (DRYDOCK_API_TOKENS or DRYDOCK_API_TOKENS_FILE)',
  ]);
});

test("docs/identity.md's example is a valid identities file that means what the page says", () => {
  const page = readFileSync(path.join(__dirname, '../../docs/identity.md'), 'utf8');
  const section = page.slice(page.indexOf('## Roles per repository'));
  const example = section.slice(section.indexOf('```yaml\n') + 8, section.indexOf('```\n', section.indexOf('```yaml')));
  const r = parseDirectory(example).roles;
  expect(r.roleOf('carol', 'acme/shop')).toBe('requester');
  expect(r.roleOf('machine:grafana', 'acme/web')).toBe('reader');
  expect(r.readsEverything('auditor')).toBe(true);
  expect([r.forbidsSelfApproval('acme/shop'), r.forbidsSelfApproval('acme/docs')]).toEqual([true, false]);
});
