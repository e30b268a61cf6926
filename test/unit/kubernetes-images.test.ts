/**
 * Where a service's image comes from on Kubernetes (T4-M4): only drydock's own
 * images count as on the host; any other goes through the allowed registries
 * and must be pinned by digest, as the provider and the services' resolution
 * decide together (no cluster: neither asks the API).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { createLogger } from '../../platform/log';
import { resolveServiceImages } from '../../sandbox/activities/services';
import { imageInfoOf, ownServiceImage, pinnedDigest, serviceImagePullPolicy } from '../../sandbox/kubernetes/images';
import { KubernetesProvider } from '../../sandbox/kubernetes/provider';
import type { ServiceSpec } from '../../workflows/services';

const DIGEST = `sha256:${'ab'.repeat(32)}`;
let root: string;
let provider: KubernetesProvider;

beforeAll(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'k8s-images-'));
  const kubeconfig = new KubeConfig();
  kubeconfig.loadFromOptions({
    clusters: [{ name: 'c', server: 'https://127.0.0.1:1', skipTLSVerify: true }],
    users: [{ name: 'u' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  provider = new KubernetesProvider({ kubeconfig, namespace: 'sandboxes', node: 'node-1', snapshotRoot: root });
});
afterAll(() => rm(root, { recursive: true, force: true }));

const service = (image: string): ServiceSpec => ({
  name: 'db',
  image,
  environment: {},
  ports: [],
  data: [],
  dependsOn: [],
  limits: {},
  source: 'services.db',
});
const resolve = (image: string, allowed: string[], pull: boolean) =>
  resolveServiceImages({ sandboxes: provider, log: createLogger('silent') }, [service(image)], {
    repo: 'acme/app',
    allowed,
    pull,
  });

test("only drydock's own service images are on the host; any other image is a registry's", async () => {
  for (const own of ['drydock/postgres:17', 'drydock/redis', 'drydock-service-postgres:17-2e48c17aa084']) {
    expect([own, ownServiceImage(own)]).toEqual([own, own.includes('redis') ? 'redis' : 'postgres']);
    expect((await provider.image(own))?.fromRegistry).toBeUndefined();
  }
  for (const other of [
    'postgres:17',
    'evil.example/drydock/postgres:17',
    `drydock/postgres@${DIGEST}`,
    'drydock/mysql:8',
    'drydock-service-postgresx:1',
  ]) {
    expect([other, ownServiceImage(other)]).toEqual([other, undefined]);
    expect(await provider.image(other)).toMatchObject({ fromRegistry: true });
  }
  expect(imageInfoOf('drydock/redis:8')).toEqual({ id: 'drydock/redis:8', sizeBytes: 0, labels: {}, env: [] });
});

test("a service's image from a registry the repo may not use is refused, not handed to the node to pull", async () => {
  await expect(resolve('evil.example/x:1', [], true)).rejects.toThrow(
    /^services\.db\.image: image evil\.example\/x:1 is not on the worker's host and its registry evil\.example is not allowed for acme\/app/,
  );
  await expect(resolve('postgres:17', ['ghcr.io'], true)).rejects.toThrow(/registry docker\.io is not allowed/);
  // Allowed, but a session never pulls: a snapshot build records it.
  await expect(resolve(`evil.example/x@${DIGEST}`, ['evil.example'], false)).rejects.toThrow(
    /pulled only by a snapshot build/,
  );
});

test("an allowed registry's image must be pinned by digest: the node pulls it, drydock cannot pin a tag", async () => {
  await expect(resolve('evil.example/x:1', ['evil.example'], true)).rejects.toThrow(
    /pulling evil\.example\/x:1 failed: image evil\.example\/x:1: on Kubernetes .* name the image by digest \(evil\.example\/x:1@sha256:/,
  );
  expect(await resolve(`evil.example/x:1@${DIGEST}`, ['evil.example'], true)).toMatchObject([
    { image: `evil.example/x@${DIGEST}` },
  ]);
  // drydock's own images need no registry at all.
  expect(await resolve('drydock/postgres:17', [], false)).toMatchObject([{ image: 'drydock/postgres:17' }]);
});

test('a service container pulls only an image pinned by digest; anything else is never pulled', () => {
  expect(pinnedDigest(`evil.example/x@${DIGEST}`)).toBe(DIGEST);
  expect(pinnedDigest('evil.example/x:1')).toBeUndefined();
  expect(serviceImagePullPolicy(`evil.example/x@${DIGEST}`, 'IfNotPresent')).toBe('IfNotPresent');
  expect(serviceImagePullPolicy(`evil.example/x@${DIGEST}`, 'Always')).toBe('Always');
  for (const image of ['postgres:17', 'drydock/postgres:17', 'evil.example/x:1']) {
    expect(serviceImagePullPolicy(image, 'IfNotPresent')).toBe('Never');
    expect(serviceImagePullPolicy(image, 'Always')).toBe('Never');
  }
});
