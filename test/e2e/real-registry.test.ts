/**
 * A real project from the real npm registry, through drydock's egress proxy,
 * behind this machine's TLS-intercepting network (test/support/real-registry-project.ts):
 * with DRYDOCK_EXTRA_CA_CERTS its snapshot builds and a session runs its tests;
 * without, the build fails naming the certificate problem and the setting.
 */
import type { WorkflowFailedError } from '@temporalio/client';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { SnapshotBuildResult } from '../../sandbox/contract';
import { addRepo } from '../../cli/snapshots';
import { deleteSnapshotSchedules, SNAPSHOT_LABELS } from '../../sandbox/snapshots';
import type { SessionStatus } from '../../workflows/api';
import { docker, makeSnapshotRepo, newSessionId, startSession, startStack, type TestStack } from '../support/helpers';
import {
  HOST_CA_BUNDLE,
  lockedPackages,
  REAL_REGISTRY_ALLOW,
  REAL_REGISTRY_SETUP,
  REAL_REGISTRY_TEST,
  realRegistryProject,
} from '../support/real-registry-project';

let trusting: TestStack;
let plain: TestStack;
let project: Record<string, string>;
const repos: Array<{ url: string; stack: TestStack }> = [];

beforeAll(async () => {
  [trusting, plain, project] = await Promise.all([
    startStack({ DRYDOCK_EXTRA_CA_CERTS: HOST_CA_BUNDLE }),
    startStack(),
    realRegistryProject(),
  ]);
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
  await addRepo(stack.client, stack.config, repo.url, { every: '1h', setup, allow: REAL_REGISTRY_ALLOW });
  const built: SnapshotBuildResult = await stack.client.workflow.execute('refreshSnapshot', {
    workflowId: newSessionId('realreg-snap'),
    taskQueue: stack.config.DRYDOCK_TASK_QUEUE,
    args: [{ repo: repo.url }],
  });
  return { url: repo.url, built };
}

test('the lockfile resolves at least 150 real packages', () => {
  expect(lockedPackages(project)).toBeGreaterThanOrEqual(150);
});

test('with DRYDOCK_EXTRA_CA_CERTS: npm ci, git, corepack and Python trust the network; a session runs the tests', async () => {
  // git: TLS must pass for the registry's 404 to come back ("not found"); corepack fetches pnpm;
  // Python: OpenSSL's store (the image has no pip).
  const setup = [
    REAL_REGISTRY_SETUP,
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
      agent: { steps: [{ run: REAL_REGISTRY_TEST }] },
    })
  ).result()) as SessionStatus;
  expect(session.phase).toBe('completed');
  expect(session.timeline.find((t) => t.name.startsWith('step 1'))?.outputTail).toMatch(/1 passed/);
}, 420_000);

test('without it, the build fails with a message that names the certificate problem and the setting', async () => {
  // A failed build fails its workflow (non-retryable); the reason is its cause.
  const failure = await build(plain, `${REAL_REGISTRY_SETUP} --fetch-retries=0`).then(
    ({ built }) => `built: ${built.status}`,
    (err: WorkflowFailedError) => err.cause?.message ?? String(err),
  );
  expect(failure).toMatch(/SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT|certificate/);
  expect(failure).toContain("set DRYDOCK_EXTRA_CA_CERTS to the PEM of your network's CA");
}, 300_000);
