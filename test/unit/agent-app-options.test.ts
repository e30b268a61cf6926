/**
 * The app kept for the agent runs in a companion of the sandbox
 * (sandbox/docker/create-options.ts, filesCompanionCreateOptions): the
 * sandbox's image, environment and network namespace, its /workspace
 * read-write, its home read-only, no egress folder, hardened like a sandbox;
 * a provider that cannot add it (Kubernetes) refuses the field.
 */
import type Docker from 'dockerode';
import { filesCompanionCreateOptions } from '../../sandbox/docker/create-options';
import { refuseUnsupported } from '../../sandbox/activities/environment';
import type { SandboxProvider, SandboxSpec } from '../../sandbox/provider';

const spec = {
  name: 'drydock-s-app',
  image: 'ignored',
  labels: { 'drydock.session': 's' },
  cpus: 1,
  memoryBytes: 1024 ** 3,
  pids: 100,
  tmpBytes: 1024 ** 2,
  diskBytes: 1024 ** 3,
  egressDir: '/data/egress/drydock-s-app',
  companionOf: 'drydock-s',
  sharingFiles: { command: ['sh', '-c', 'node app.js'] },
} satisfies SandboxSpec;

const sandbox = {
  Config: { Image: 'drydock-snap:1', Env: ['PATH=/opt/drydock-node/bin:/usr/bin'] },
  Mounts: [
    { Type: 'volume', Name: 'ws1', Source: '', Destination: '/workspace', RW: true },
    { Type: 'volume', Name: 'home1', Source: '', Destination: '/home/drydock', RW: true },
    { Type: 'bind', Source: '/data/egress/drydock-s', Destination: '/run/drydock', RW: false },
    { Type: 'bind', Source: '/data/tools/helpers', Destination: '/opt/drydock', RW: false },
    { Type: 'bind', Source: '/data/sockets/db', Destination: '/run/postgresql', RW: true },
  ],
} as unknown as Pick<Docker.ContainerInspectInfo, 'Config' | 'Mounts'>;

test("the companion runs the app on the sandbox's files, image and environment: workspace writable, home read-only, no egress folder", () => {
  const options = filesCompanionCreateOptions(spec, sandbox);
  expect(options).toMatchObject({ Image: 'drydock-snap:1', Cmd: spec.sharingFiles.command, Entrypoint: [] });
  expect(options.Env).toContain('PATH=/opt/drydock-node/bin:/usr/bin');
  expect(options.Labels).toMatchObject({ 'drydock.session': 's', 'drydock.companion-of': 'drydock-s' });
  const host = options.HostConfig!;
  expect(host.Mounts).toEqual([
    { Type: 'volume', Source: 'ws1', Target: '/workspace', ReadOnly: false },
    { Type: 'volume', Source: 'home1', Target: '/home/drydock', ReadOnly: true },
    { Type: 'bind', Source: '/data/tools/helpers', Target: '/opt/drydock', ReadOnly: true },
    { Type: 'bind', Source: '/data/sockets/db', Target: '/run/postgresql', ReadOnly: false },
  ]);
  expect(host).toMatchObject({
    NetworkMode: 'container:drydock-s',
    CapDrop: ['ALL'],
    SecurityOpt: ['no-new-privileges'],
    Privileged: false,
    ReadonlyRootfs: true,
    PidsLimit: 100,
    Memory: 1024 ** 3,
    Tmpfs: { '/tmp': 'rw,exec,nosuid,nodev,size=1048576,mode=1777' },
  });
  // Its own process namespace: a step's end, which ends every process of the sandbox's, does not reach it.
  expect(host.PidMode).toBeUndefined();
  expect(host.VolumesFrom).toBeUndefined();
});

test('a provider that adds no container to a running sandbox (Kubernetes) refuses app.forAgent, naming the field', () => {
  const app = { start: 'npm start', port: 3000, readyPath: '/', readyTimeoutMs: 60_000, source: 'app' };
  const provider = (lateCompanions: boolean) =>
    ({
      name: 'kubernetes',
      capabilities: { lateCompanions, buildsImages: true, hostFolders: true },
      services: {},
    }) as SandboxProvider;
  expect(() =>
    refuseUnsupported(provider(false), undefined, { services: [], app: { ...app, forAgent: true } }),
  ).toThrow(
    'the repo declares app.forAgent, and the kubernetes sandbox provider adds no container to a running sandbox: ' +
      "remove app.forAgent (the agent's step starts the app)",
  );
  expect(() => refuseUnsupported(provider(false), undefined, { services: [], app })).not.toThrow();
  expect(() =>
    refuseUnsupported(provider(true), undefined, { services: [], app: { ...app, forAgent: true } }),
  ).not.toThrow();
});
