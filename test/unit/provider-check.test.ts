/**
 * The sandbox providers' settings and start checks (sandbox/host-provider.ts)
 * where no engine is needed: a bad setting, an engine or API that does not
 * answer, and the Kubernetes client's raw errors, each one line naming the
 * setting. The checks against a running engine or cluster are in
 * test/e2e/provider-check.test.ts and test/e2e/k8s-sandbox.test.ts.
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ApiException } from '@kubernetes/client-node';
import { loadConfig, type Config } from '../../platform/config';
import { startHostProvider, type StartNeeds } from '../../sandbox/host-provider';
import { ProviderCheckFailed } from '../../sandbox/provider';
import { dockerSettingsSchema } from '../../sandbox/docker/settings';
import { kubernetesSettingsSchema } from '../../sandbox/kubernetes/settings';
import { KubernetesApiError, kubeErrorLine, withOneLineErrors } from '../../sandbox/kubernetes/api-errors';

const need: StartNeeds = { baseImage: 'drydock-base:test', baseImageSetting: 'DRYDOCK_BASE_IMAGE' };
let dataDir: string;

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(tmpdir(), 'drydock-provider-check-'));
});

const configWith = (env: Record<string, string>): Config => ({
  ...loadConfig(env),
  DRYDOCK_DATA_DIR: dataDir,
});

/** The check's failure: a ProviderCheckFailed whose message is one line. */
async function failureOf(started: Promise<unknown>): Promise<ProviderCheckFailed> {
  const err = await started.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ProviderCheckFailed);
  expect((err as Error).message).not.toMatch(/\n/);
  return err as ProviderCheckFailed;
}

/** The client's exception for the missing namespace of issue 47, as the API server sends it. */
const namespaceNotFound = () =>
  new ApiException(
    404,
    'Unknown API Status Code!',
    JSON.stringify({
      kind: 'Status',
      apiVersion: 'v1',
      status: 'Failure',
      message: 'namespaces "drydock-sandboxes" not found',
      reason: 'NotFound',
      details: { name: 'drydock-sandboxes', kind: 'namespaces' },
      code: 404,
    }),
    { 'audit-id': 'f3b1', 'content-type': 'application/json', date: 'Fri, 04 Dec 2026 22:00:00 GMT' },
  );

describe('the Kubernetes client in one line', () => {
  test("an ApiException's dump becomes its status and the API's message, without headers", () => {
    const raw = namespaceNotFound();
    expect(raw.message).toMatch(/HTTP-Code: 404\nMessage: Unknown API Status Code!/); // what reached people
    expect(kubeErrorLine(raw)).toBe('Kubernetes API 404 NotFound: namespaces "drydock-sandboxes" not found');
  });

  test('a body that is not a Status is cut to one line; other errors keep their first line', () => {
    const html = new ApiException(502, 'Bad Gateway', '<html>\n<body>bad gateway</body>\n</html>', {});
    expect(kubeErrorLine(html)).toBe('Kubernetes API 502: <html> <body>bad gateway</body> </html>');
    expect(kubeErrorLine(new Error('connect ECONNREFUSED 127.0.0.1:6443\n    at stack'))).toBe(
      'connect ECONNREFUSED 127.0.0.1:6443',
    );
  });

  test('a wrapped client rejects with the one line and keeps the status for callers that branch on it', async () => {
    const client = withOneLineErrors({
      createNamespacedPod: (): Promise<void> => Promise.reject(namespaceNotFound()),
      name: 'core',
    });
    expect(client.name).toBe('core');
    const err = await client.createNamespacedPod().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KubernetesApiError);
    expect(err).toMatchObject({
      code: 404,
      reason: 'NotFound',
      message: 'Kubernetes API 404 NotFound: namespaces "drydock-sandboxes" not found',
    });
  });
});

describe('settings schemas', () => {
  test('Docker: DOCKER_HOST in a form the engine client reads, or unset', () => {
    const base = { DRYDOCK_DATA_DIR: '/d' };
    expect(dockerSettingsSchema.safeParse({ ...base, DOCKER_HOST: 'unix:///run/docker.sock' }).success).toBe(true);
    expect(dockerSettingsSchema.safeParse({ ...base, DOCKER_HOST: 'tcp://127.0.0.1:2375' }).success).toBe(true);
    expect(dockerSettingsSchema.safeParse(base).success).toBe(true);
    expect(dockerSettingsSchema.safeParse({ ...base, DOCKER_HOST: '/run/docker.sock' }).success).toBe(false);
  });

  test("Kubernetes: the configuration's variables, parsed", () => {
    const parsed = kubernetesSettingsSchema.parse({ ...loadConfig({}), DRYDOCK_K8S_NAMESPACE: 'sandboxes' });
    expect(parsed).toMatchObject({ DRYDOCK_K8S_NAMESPACE: 'sandboxes', DRYDOCK_K8S_START_TIMEOUT: 300_000 });
    expect(kubernetesSettingsSchema.safeParse({ DRYDOCK_K8S_NAMESPACE: '' }).success).toBe(false);
  });

  test('a bad setting stops the start in one line naming it, before the engine is asked', async () => {
    const err = await failureOf(startHostProvider(configWith({}), need, { DOCKER_HOST: 'docker.sock' }));
    expect(err.setting).toBe('DOCKER_HOST');
    expect(err.message).toBe('DOCKER_HOST: unix:///path/to/docker.sock, tcp://host:port or ssh://user@host');
  });
});

describe('engines that do not answer', () => {
  test('Docker: a DOCKER_HOST socket that does not exist', async () => {
    const socket = path.join(dataDir, 'no-engine', 'docker.sock');
    const err = await failureOf(startHostProvider(configWith({}), need, { DOCKER_HOST: `unix://${socket}` }));
    expect(err.message).toBe(
      `DOCKER_HOST: the Docker engine at unix://${socket} does not answer (connect ENOENT ${socket}); ` +
        'start dockerd, or set DOCKER_HOST to an engine that runs',
    );
  });

  test('Kubernetes: a kubeconfig that cannot be read', async () => {
    const file = path.join(dataDir, 'no-such-kubeconfig');
    const config = configWith({ DRYDOCK_SANDBOX_PROVIDER: 'kubernetes', DRYDOCK_K8S_KUBECONFIG: file });
    const err = await failureOf(startHostProvider(config, need, {}));
    expect(err.setting).toBe('DRYDOCK_K8S_KUBECONFIG');
    expect(err.message).toMatch(
      /^DRYDOCK_K8S_KUBECONFIG: cannot load the kubeconfig \(.*ENOENT.*\); name a readable one$/,
    );
  });

  test('Kubernetes: an API server that does not answer on its address', async () => {
    const port = await closedPort();
    const file = path.join(dataDir, 'kubeconfig');
    await writeFile(file, kubeconfigFor(`https://127.0.0.1:${port}`));
    const config = configWith({ DRYDOCK_SANDBOX_PROVIDER: 'kubernetes', DRYDOCK_K8S_KUBECONFIG: file });
    const err = await failureOf(startHostProvider(config, need, {}));
    expect(err.message).toMatch(
      new RegExp(
        `^DRYDOCK_K8S_KUBECONFIG: the Kubernetes API at https://127.0.0.1:${port} does not answer \\(.*ECONNREFUSED.*\\); ` +
          'start the cluster or name one that runs$',
      ),
    );
  });
});

/** A loopback port nothing listens on (one just released). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

function kubeconfigFor(server: string): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters: [{name: c, cluster: {server: "' + server + '", insecure-skip-tls-verify: true}}]',
    'users: [{name: u, user: {token: t}}]',
    'contexts: [{name: x, context: {cluster: c, user: u}}]',
    'current-context: x',
  ].join('\n');
}
