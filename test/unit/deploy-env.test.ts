/** The deploy command's environment is an allowlist: the worker's credentials never reach it. */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { deployEnv } from '../../activities/publish';
import { loadConfig } from '../../platform/config';

const worker = {
  PATH: process.env.PATH,
  HOME: '/home/worker',
  LANG: 'C.UTF-8',
  TZ: 'UTC',
  DATABASE_URL: 'postgres://drydock:db-password@db.internal/drydock',
  DRYDOCK_MODEL_ENDPOINTS: '{"https://models.internal/v1":"model-key-123"}',
  DRYDOCK_MODEL_API_KEY: 'sk-model-key',
  GITHUB_TOKEN: 'ghp_token',
  DRYDOCK_SECRET_NPM: 'npm-secret',
  AWS_PROFILE: 'prod',
  DEPLOY_TARGET: 'staging',
};

test('DATABASE_URL and model keys do not reach the deploy command; declared and basic variables do', async () => {
  const env = deployEnv(worker, ['DEPLOY_TARGET'], { DRYDOCK_BRANCH: 'drydock/s1' });
  const { stdout } = await promisify(execFile)('sh', ['-c', 'env'], { env });
  const seen = Object.fromEntries(
    stdout.split('\n').map((line) => [line.split('=')[0], line.slice(line.indexOf('=') + 1)]),
  );
  for (const name of [
    'DATABASE_URL',
    'DRYDOCK_MODEL_ENDPOINTS',
    'DRYDOCK_MODEL_API_KEY',
    'GITHUB_TOKEN',
    'DRYDOCK_SECRET_NPM',
    'AWS_PROFILE',
  ]) {
    expect(seen[name]).toBeUndefined();
  }
  expect(stdout).not.toMatch(/db-password|model-key/);
  expect(seen).toMatchObject({
    HOME: '/home/worker',
    LANG: 'C.UTF-8',
    TZ: 'UTC',
    DEPLOY_TARGET: 'staging',
    DRYDOCK_BRANCH: 'drydock/s1',
  });
});

test('DRYDOCK_DEPLOY_ENV names the extra variables, and refuses what is not a name', () => {
  expect(loadConfig({ DRYDOCK_DEPLOY_ENV: 'DEPLOY_TARGET, KUBECONFIG' }).DRYDOCK_DEPLOY_ENV).toEqual([
    'DEPLOY_TARGET',
    'KUBECONFIG',
  ]);
  expect(loadConfig({}).DRYDOCK_DEPLOY_ENV).toEqual([]);
  expect(() => loadConfig({ DRYDOCK_DEPLOY_ENV: 'A=B' })).toThrow(/DRYDOCK_DEPLOY_ENV/);
});
