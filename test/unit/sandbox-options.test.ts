/** The switches of sandbox creation, from the environment to Docker's options. */
import { loadConfig } from '../../lib/config';
import { sandboxCreateOptions, type SandboxSpec } from '../../lib/sandbox';

const spec: SandboxSpec = {
  name: 'drydock-s',
  image: 'drydock-base:x',
  labels: { 'drydock.session': 's' },
  cpus: 1,
  memoryBytes: 1024 ** 3,
  pids: 100,
  tmpBytes: 1024 ** 2,
  egressDir: '/data/egress/abc',
};

test('defaults: read-only root, volumes for /workspace and home, the engine default runtime', () => {
  const host = sandboxCreateOptions(spec).HostConfig!;
  expect(host.ReadonlyRootfs).toBe(true);
  expect(host.Runtime).toBeUndefined();
  expect(host.Mounts!.map((m) => `${m.Type} ${m.Target}`)).toEqual([
    'volume /workspace',
    'volume /home/drydock',
    'bind /run/drydock',
  ]);
});

test('DRYDOCK_DOCKER_RUNTIME and DRYDOCK_READONLY_ROOTFS reach the container options', () => {
  const config = loadConfig({ DRYDOCK_DOCKER_RUNTIME: 'runsc', DRYDOCK_READONLY_ROOTFS: 'false' });
  const host = sandboxCreateOptions({
    ...spec,
    runtime: config.DRYDOCK_DOCKER_RUNTIME,
    readonlyRoot: config.DRYDOCK_READONLY_ROOTFS,
  }).HostConfig!;
  expect(host.Runtime).toBe('runsc');
  expect(host.ReadonlyRootfs).toBe(false);
  expect(host.Mounts!.map((m) => m.Target)).toEqual(['/run/drydock']);
  expect(host.CapDrop).toEqual(['ALL']); // the rest stays
  expect(() => loadConfig({ DRYDOCK_DOCKER_RUNTIME: 'run sc' })).toThrow(/DRYDOCK_DOCKER_RUNTIME/);
});

test('granted secrets come from DRYDOCK_SECRET_<NAME> only', () => {
  expect(loadConfig({ DRYDOCK_SECRET_OPENAI_API_KEY: 'k', GITHUB_TOKEN: 't', DRYDOCK_SECRET_: 'x' }).secrets).toEqual({
    OPENAI_API_KEY: 'k',
  });
});
