/**
 * `setup` of .drydock/config.yaml in its two forms: a string (run as the
 * sandbox user), or { command, root } where root runs in the isolated builder
 * as the environment's last layer (workflows/repo-config.ts).
 */
import { checkRepoConfig, rootSetupOf, setupCommandOf } from '../../workflows/repo-config';

test('the string form is the command; the object form splits the command and the root part', () => {
  const plain = checkRepoConfig({ setup: 'npm ci' });
  const split = checkRepoConfig({ setup: { root: 'apt-get install -y tree', command: 'npm ci' } });
  const rootOnly = checkRepoConfig({ setup: { root: 'apt-get install -y tree' } });
  if (!plain.ok || !split.ok || !rootOnly.ok) throw new Error('valid files refused');
  expect([setupCommandOf(plain.config), rootSetupOf(plain.config)]).toEqual(['npm ci', undefined]);
  expect([setupCommandOf(split.config), rootSetupOf(split.config)]).toEqual(['npm ci', 'apt-get install -y tree']);
  expect([setupCommandOf(rootOnly.config), rootSetupOf(rootOnly.config)]).toEqual([
    undefined,
    'apt-get install -y tree',
  ]);
});

test('an unknown field of setup, or an empty root, is refused naming it', () => {
  const unknown = checkRepoConfig({ setup: { user: 'npm ci' } });
  expect(unknown.ok).toBe(false);
  expect(!unknown.ok && unknown.problems.join('\n')).toContain('.drydock/config.yaml: setup');
  const empty = checkRepoConfig({ setup: { root: '' } });
  expect(empty.ok).toBe(false);
  expect(!empty.ok && empty.problems.join('\n')).toContain('.drydock/config.yaml: setup');
});
