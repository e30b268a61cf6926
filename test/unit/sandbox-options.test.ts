/** The switches of sandbox creation (and of the isolated builder), from the environment to their options. */
import { spawnSync } from 'node:child_process';
import { loadConfig } from '../../platform/config';
import { firstProcessCmd, sandboxCreateOptions } from '../../sandbox/docker/create-options';
import { type SandboxSpec } from '../../sandbox/provider';

const spec: SandboxSpec = {
  name: 'drydock-s',
  image: 'drydock-base:x',
  labels: { 'drydock.session': 's' },
  cpus: 1,
  memoryBytes: 1024 ** 3,
  pids: 100,
  tmpBytes: 1024 ** 2,
  diskBytes: 1024 ** 3,
  egressDir: '/data/egress/abc',
};
const dirs = (which: string) => ({ lower: `/l/${which}`, upper: `/u/${which}/upper`, work: `/u/${which}/work` });
const storage = { workspace: dirs('workspace'), home: dirs('home') };

test('defaults: read-only root, overlay volumes for /workspace and home, the engine default runtime', () => {
  const host = sandboxCreateOptions(spec, storage).HostConfig!;
  expect(host.ReadonlyRootfs).toBe(true);
  expect(host.Runtime).toBeUndefined();
  expect(host.Mounts!.map((m) => `${m.Type} ${m.Target}`)).toEqual([
    'volume /workspace',
    'volume /home/drydock',
    'bind /run/drydock',
  ]);
  // Nothing copied: the engine mounts an overlay over the image's lower layer.
  const workspace = host.Mounts![0].VolumeOptions!;
  expect(workspace.NoCopy).toBe(true);
  expect(workspace.DriverConfig!.Options).toEqual({
    type: 'overlay',
    device: 'overlay',
    o: 'lowerdir=/l/workspace,upperdir=/u/workspace/upper,workdir=/u/workspace/work,nosuid,nodev',
  });
});

test('DRYDOCK_DOCKER_RUNTIME and DRYDOCK_READONLY_ROOTFS reach the container options', () => {
  const config = loadConfig({ DRYDOCK_DOCKER_RUNTIME: 'runsc', DRYDOCK_READONLY_ROOTFS: 'false' });
  const host = sandboxCreateOptions(
    {
      ...spec,
      runtime: config.DRYDOCK_DOCKER_RUNTIME,
      readonlyRoot: config.DRYDOCK_READONLY_ROOTFS,
    },
    storage,
  ).HostConfig!;
  expect(host.Runtime).toBe('runsc');
  expect(host.ReadonlyRootfs).toBe(false);
  // The overlays stay: the disk limit holds with a writable root too.
  expect(host.Mounts!.map((m) => m.Target)).toEqual(['/workspace', '/home/drydock', '/run/drydock']);
  expect(host.CapDrop).toEqual(['ALL']); // the rest stays
  expect(() => loadConfig({ DRYDOCK_DOCKER_RUNTIME: 'run sc' })).toThrow(/DRYDOCK_DOCKER_RUNTIME/);
});

test('granted secrets come from DRYDOCK_SECRET_<NAME> only', () => {
  expect(loadConfig({ DRYDOCK_SECRET_OPENAI_API_KEY: 'k', GITHUB_TOKEN: 't', DRYDOCK_SECRET_: 'x' }).secrets).toEqual({
    OPENAI_API_KEY: 'k',
  });
});

test("an image's VOLUMEs are bounded tmpfs, never the engine's anonymous volumes outside limits.disk (T4-L3)", () => {
  const volumes = ['/data', '/var/cache/app/', '/workspace', '/tmp', '/home/drydock', '/workspace/sub', '/data'];
  const host = sandboxCreateOptions(spec, storage, volumes).HostConfig!;
  const bounded = `rw,exec,nosuid,nodev,size=${spec.tmpBytes},mode=1777`;
  expect(host.Tmpfs).toEqual({
    '/tmp': bounded,
    '/data': bounded,
    '/var/cache/app': bounded,
    '/workspace/sub': bounded,
  });
  // The folders drydock mounts itself keep their mounts (the engine makes no volume where a mount is).
  expect(host.Mounts!.map((m) => m.Target)).toEqual(['/workspace', '/home/drydock', '/run/drydock']);
});

test("/tmp runs programs, as a developer's and a pod's does: Docker's tmpfs default is noexec", () => {
  // go-chi/chi as published: `go test ./...` failed with "fork/exec /tmp/go-build…/chi.test: permission denied".
  const tmp = sandboxCreateOptions(spec, storage).HostConfig!.Tmpfs!['/tmp']!.split(',');
  expect(tmp).toContain('exec');
  expect(tmp).not.toContain('noexec');
  expect(tmp).toEqual(expect.arrayContaining(['nosuid', 'nodev']));
});

test("DRYDOCK_BUILD_TIMEOUT: the isolated builder's limit, 8m by default, between 1m and 30m", () => {
  expect(loadConfig({}).DRYDOCK_BUILD_TIMEOUT).toBe(480_000);
  expect(loadConfig({ DRYDOCK_BUILD_TIMEOUT: '20m' }).DRYDOCK_BUILD_TIMEOUT).toBe(1_200_000);
  expect(() => loadConfig({ DRYDOCK_BUILD_TIMEOUT: '31m' })).toThrow(/DRYDOCK_BUILD_TIMEOUT: between 1m and 30m/);
  expect(() => loadConfig({ DRYDOCK_BUILD_TIMEOUT: '30s' })).toThrow(/DRYDOCK_BUILD_TIMEOUT/);
  expect(() => loadConfig({ DRYDOCK_BUILD_TIMEOUT: 'long' })).toThrow(/DRYDOCK_BUILD_TIMEOUT/);
});

test("a first process: its command's argv as given, then the keeper; an image with no sleep says so as the engine would", () => {
  const cmd = firstProcessCmd(['git', 'checkout', '--quiet'], 'n0nce');
  expect(cmd.slice(0, 2)).toEqual(['sh', '-c']);
  expect(cmd.slice(3)).toEqual(['drydock-first', 'n0nce', 'git', 'checkout', '--quiet']);
  expect(cmd[2].trim().split('\n').at(-1)).toBe('exec sleep infinity');
  // Run by a real sh with no sleep on its PATH: it stops before the command, in the engine's words.
  const ran = spawnSync('/bin/sh', ['-c', cmd[2], ...cmd.slice(3)], { env: { PATH: '/nonexistent' } });
  expect(ran.status).toBe(127);
  expect(ran.stderr.toString()).toMatch(/exec: "sleep": executable file not found/);
  expect(ran.stdout.toString()).toBe('');
});
