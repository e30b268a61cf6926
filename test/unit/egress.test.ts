/** The egress allowlist, judged without any network: names, ports, methods, address ranges. */
import { matchRule, resolveTarget, restrictedAddress, type EgressRule } from '../../sandbox/egress';
import { egressRule } from '../../workflows/rules/egress';

const rules: EgressRule[] = [
  { host: 'registry.npmjs.org' },
  { host: '*.pythonhosted.org', port: 443 },
  { host: 'api.example.com', methods: ['GET', 'HEAD'] },
  { host: '127.0.0.1', port: 8080 },
];

test.each([
  ['registry.npmjs.org', 443, 'CONNECT', true],
  ['REGISTRY.npmjs.org.', 80, 'GET', true],
  ['registry.npmjs.org', 8443, 'CONNECT', false],
  ['evil.npmjs.org', 443, 'CONNECT', false],
  ['files.pythonhosted.org', 443, 'CONNECT', true],
  ['pythonhosted.org', 443, 'CONNECT', false],
  ['files.pythonhosted.org', 80, 'GET', false],
  ['api.example.com', 80, 'GET', true],
  ['api.example.com', 80, 'POST', false],
  ['api.example.com', 443, 'CONNECT', false],
  ['127.0.0.1', 8080, 'POST', true],
  ['127.0.0.1', 8081, 'GET', false],
  ['localhost', 8080, 'GET', false],
])('%s:%d %s allowed: %s', (host, port, method, allowed) => {
  expect(matchRule(rules, host, port, method).allowed).toBe(allowed);
});

test('refusals say why', () => {
  expect(matchRule(rules, 'api.example.com', 80, 'POST').reason).toBe(
    'method POST not allowed for api.example.com (allowed: GET, HEAD)',
  );
  expect(matchRule(rules, 'api.example.com', 443, 'CONNECT').reason).toMatch(/tunnel cannot enforce/);
  expect(matchRule(rules, 'example.org', 443, 'CONNECT').reason).toBe('example.org is not on the allowlist');
  expect(matchRule([], 'registry.npmjs.org', 443, 'CONNECT').allowed).toBe(false);
});

test.each([
  ['127.0.0.1', 'loopback'],
  ['127.8.9.10', 'loopback'],
  ['10.1.2.3', 'private'],
  ['172.20.0.1', 'private'],
  ['192.168.1.1', 'private'],
  ['169.254.169.254', 'link-local'],
  ['100.64.0.1', 'shared (CGNAT)'],
  ['0.0.0.0', 'unspecified'],
  ['::1', 'loopback'],
  ['::ffff:10.0.0.1', 'private'],
  ['fd00::1', 'private'],
  ['fe80::1', 'link-local'],
  ['8.8.8.8', undefined],
  ['2606:4700::1111', undefined],
])('%s is %s', (address, range) => {
  expect(restrictedAddress(address)).toBe(range);
});

test('a name that resolves to a restricted address is refused; only a rule naming the address reaches it', async () => {
  const lookup = (addresses: string[]) => async () => addresses;
  const rule = { host: 'registry.internal' };
  expect(await resolveTarget('registry.internal', rule, lookup(['10.0.0.5']))).toEqual({
    refused: 'registry.internal is 10.0.0.5, a private address, which no rule names',
  });
  // One restricted answer among public ones is enough to refuse (no rebinding between check and use).
  expect(await resolveTarget('mixed.example', rule, lookup(['93.184.216.34', '127.0.0.1']))).toHaveProperty('refused');
  expect(await resolveTarget('registry.npmjs.org', rule, lookup(['104.16.1.34']))).toEqual({
    address: '104.16.1.34',
  });
  expect(await resolveTarget('127.0.0.1', { host: '127.0.0.1', port: 8080 })).toEqual({ address: '127.0.0.1' });
  const failing = async () => {
    throw new Error('ENOTFOUND');
  };
  expect(await resolveTarget('nowhere.invalid', rule, failing)).toEqual({
    refused: 'cannot resolve nowhere.invalid: ENOTFOUND',
  });
});

test('rules are validated with their field named', () => {
  expect(egressRule.safeParse({ host: 'registry.npmjs.org', port: 443, methods: ['GET'] }).success).toBe(true);
  expect(egressRule.safeParse({ host: '*.example.com' }).success).toBe(true);
  expect(egressRule.safeParse({ host: '127.0.0.1', port: 8080 }).success).toBe(true);
  const bad = egressRule.safeParse({ host: 'http://x.com/', methods: ['FETCH'], port: 0 });
  expect(bad.success).toBe(false);
  expect(bad.error!.issues.map((i) => i.path.join('.')).sort()).toEqual(['host', 'methods.0', 'port']);
});
