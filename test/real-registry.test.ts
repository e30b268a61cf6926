/**
 * A real project from the real npm registry, through drydock's egress proxy,
 * behind this machine's TLS-intercepting network (its CA is in the host's
 * system bundle, which is what DRYDOCK_EXTRA_CA_CERTS names here: the
 * corporate-proxy case, for real). The lockfile is generated on the host,
 * so it resolves today's versions of express, vitest and typescript.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { WorkflowFailedError } from '@temporalio/client';
import type { SnapshotBuildResult } from '../activities/snapshot';
import { addRepo } from '../cli/snapshots';
import { deleteSnapshotSchedules, SNAPSHOT_LABELS } from '../lib/snapshots';
import type { SessionStatus } from '../workflows/api';
import { docker, makeSnapshotRepo, newSessionId, startSession, startStack, type TestStack } from './helpers';

const HOST_CA_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';
const ALLOW = ['registry.npmjs.org', 'pypi.org'];
let trusting: TestStack;
let plain: TestStack;
const project: Record<string, string> = {};
const repos: Array<{ url: string; stack: TestStack }> = [];

beforeAll(async () => {
  [trusting, plain] = await Promise.all([startStack({ DRYDOCK_EXTRA_CA_CERTS: HOST_CA_BUNDLE }), startStack()]);
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-realreg-'));
  const manifest = {
    name: 'realreg',
    version: '1.0.0',
    private: true,
    type: 'module',
    dependencies: { express: '^4.21.0' },
    devDependencies: { vitest: '^2.1.0', typescript: '^5.6.0' },
  };
  await writeFile(path.join(dir, 'package.json'), JSON.stringify(manifest, null, 2));
  await promisify(execFile)('npm', ['install', '--package-lock-only', '--no-audit', '--no-fund'], { cwd: dir });
  project['package.json'] = JSON.stringify(manifest, null, 2);
  project['package-lock.json'] = await readFile(path.join(dir, 'package-lock.json'), 'utf8');
  project['app.test.js'] = `import { expect, test } from 'vitest';
import express from 'express';
test('express builds an app', () => expect(typeof express()).toBe('function'));
`;
}, 120_000);
afterAll(async () => {
  const urls = repos.map((r) => r.url);
  for (const image of await docker.listImages({ filters: { label: [`${SNAPSHOT_LABELS.image}=snapshot`] } })) {
    if (urls.includes(image.Labels?.[SNAPSHOT_LABELS.repo] ?? ''))
      await docker.getImage(image.Id).remove({ force: true });
  }
  for (const { url, stack } of repos) await deleteSnapshotSchedules(stack.client, url, [stack.config.DRYDOCK_HOST_ID]);
  await Promise.all([trusting?.stop(), plain?.stop()]);
});

/** Registers the generated project on `stack` with this setup and builds its snapshot through the proxy. */
async function build(stack: TestStack, setup: string): Promise<{ url: string; built: SnapshotBuildResult }> {
  const repo = await makeSnapshotRepo();
  repos.push({ url: repo.url, stack });
  await repo.commit(project);
  await addRepo(stack.client, stack.config, repo.url, { every: '1h', setup, allow: ALLOW });
  const built: SnapshotBuildResult = await stack.client.workflow.execute('refreshSnapshot', {
    workflowId: newSessionId('realreg-snap'),
    taskQueue: stack.config.DRYDOCK_TASK_QUEUE,
    args: [{ repo: repo.url }],
  });
  return { url: repo.url, built };
}

test('the lockfile resolves at least 150 real packages', () => {
  const lock = JSON.parse(project['package-lock.json']) as { packages: Record<string, unknown> };
  expect(Object.keys(lock.packages).length - 1).toBeGreaterThanOrEqual(150);
});

test('with DRYDOCK_EXTRA_CA_CERTS: npm ci, git, corepack and Python trust the network; a session runs the tests', async () => {
  // git: TLS must pass for the registry's 404 to come back ("not found"); corepack fetches pnpm;
  // Python: OpenSSL's store (the image has no pip).
  const setup = [
    'npm ci --no-audit --no-fund --loglevel=error',
    '(git ls-remote https://registry.npmjs.org/drydock-probe.git 2>&1 || true)',
    'COREPACK_ENABLE_DOWNLOAD_PROMPT=0 corepack pnpm@9.15.0 --version',
    `python3 -c "import urllib.request; print('pypi', urllib.request.urlopen('https://pypi.org/simple/pip/').status)"`,
  ].join(' && ');
  const { url, built } = await build(trusting, setup);
  expect(built).toMatchObject({ status: 'ready' });
  const log = await readFile(
    path.join(trusting.config.DRYDOCK_DATA_DIR, 'artifacts', built.buildId, 'setup.log'),
    'utf8',
  );
  expect(log).toMatch(/repository '[^']+' not found/);
  expect(log).not.toMatch(/certificate/i);
  expect(log).toContain('pypi 200');
  expect(log).toMatch(/^9\.15\.0$/m);
  // The bundle was mounted, never part of the build's filesystem: the snapshot has none of it.
  const probe = await docker.createContainer({ Image: built.image!, Cmd: ['true'] });
  try {
    await expect(probe.getArchive({ path: '/run/drydock/ca-certificates.crt' })).rejects.toThrow();
    expect((await docker.getImage(built.image!).inspect()).Config.Env ?? []).not.toContainEqual(
      expect.stringContaining('NODE_EXTRA_CA_CERTS'),
    );
  } finally {
    await probe.remove({ force: true });
  }

  const session = (await (
    await startSession(trusting, newSessionId('realreg-session'), {
      repo: { url },
      task: 'run the tests',
      agent: { steps: [{ run: 'npx vitest run' }] },
    })
  ).result()) as SessionStatus;
  expect(session.phase).toBe('completed');
  expect(session.timeline.find((t) => t.name.startsWith('step 1'))?.outputTail).toMatch(/1 passed/);
}, 420_000);

test('without it, the build fails with a message that names the certificate problem and the setting', async () => {
  // A failed build fails its workflow (non-retryable); the reason is its cause.
  const failure = await build(plain, 'npm ci --fetch-retries=0 --no-audit --no-fund --loglevel=error').then(
    ({ built }) => `built: ${built.status}`,
    (err: WorkflowFailedError) => err.cause?.message ?? String(err),
  );
  expect(failure).toMatch(/SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT|certificate/);
  expect(failure).toContain("set DRYDOCK_EXTRA_CA_CERTS to the PEM of your network's CA");
}, 300_000);
