/**
 * A sandbox's pod as sandbox/kubernetes/pod.ts makes it (every hardening
 * setting, the volumes, the placement), its name from the sandbox's, and
 * the state sandbox/kubernetes/pod-state.ts reads from what the API says,
 * with the error of a pod that did not start in time and how long it may take;
 * a session's services as containers of its pod, and their state.
 */
import type { CoreV1Event, V1Pod } from '@kubernetes/client-node';
import { loadConfig } from '../../platform/config';
import { KEEPER, podName, POD_ANNOTATIONS, POD_LABELS, sandboxPod } from '../../sandbox/kubernetes/pod';
import { notStartedMessage, runningState, warningsOf } from '../../sandbox/kubernetes/pod-state';
import { serviceContainerName, serviceStateOf } from '../../sandbox/kubernetes/service-containers';
import type { SandboxSpec, ServiceContainerSpec } from '../../sandbox/provider';

const MiB = 1024 ** 2;
const spec: SandboxSpec = {
  name: 'drydock-Session_1',
  image: 'drydock-base:abc',
  labels: { 'drydock.session': 'Session_1', 'drydock.repo': 'https://user:secret@example.com/a/b.git' },
  cpus: 1.5,
  memoryBytes: 512 * MiB,
  pids: 256,
  tmpBytes: 64 * MiB,
  diskBytes: 1024 * MiB,
  egressDir: '/var/lib/drydock/egress/0123',
  agentsDir: '/var/lib/drydock/agents',
  mounts: [{ source: '/var/lib/drydock/tools/helpers-1', target: '/opt/drydock' }],
  env: ['PATH=/opt/drydock-node/bin:/usr/bin', 'EMPTY='],
};
const where = { namespace: 'sandboxes', node: 'node-1', imagePullPolicy: 'Never' as const };

test('the pod has the Docker sandbox hardening in pod spec terms', () => {
  const pod = sandboxPod(spec, where);
  const s = pod.spec!;
  expect(s.automountServiceAccountToken).toBe(false);
  expect(s.enableServiceLinks).toBe(false);
  expect(s.restartPolicy).toBe('Never');
  expect(s.hostNetwork ?? false).toBe(false);
  expect(s.hostPID ?? false).toBe(false);
  expect(s.hostIPC ?? false).toBe(false);
  expect(s.shareProcessNamespace ?? false).toBe(false);
  expect(s.securityContext).toEqual({ runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } });
  expect(s.containers).toHaveLength(1);
  expect(s.initContainers).toBeUndefined();
  const [c] = s.containers;
  expect(c.securityContext).toEqual({
    runAsUser: 1000,
    runAsGroup: 1000,
    allowPrivilegeEscalation: false,
    privileged: false,
    readOnlyRootFilesystem: true,
    capabilities: { drop: ['ALL'] },
  });
  expect(c.command).toEqual(['sh', '-c', KEEPER]);
  expect(c.workingDir).toBe('/workspace');
  expect(c.imagePullPolicy).toBe('Never');
  expect(c.resources).toEqual({
    limits: { cpu: '1500m', memory: String(512 * MiB) },
    requests: { cpu: '150m', memory: String(512 * MiB) },
  });
  expect(c.env).toEqual([
    { name: 'GIT_CONFIG_COUNT', value: '1' },
    { name: 'GIT_CONFIG_KEY_0', value: 'safe.directory' },
    { name: 'GIT_CONFIG_VALUE_0', value: '/workspace' },
    { name: 'PATH', value: '/opt/drydock-node/bin:/usr/bin' },
    { name: 'EMPTY', value: '' },
  ]);
  expect(s.runtimeClassName).toBeUndefined();
  expect(sandboxPod({ ...spec, runtime: 'gvisor', readonlyRoot: false }, where).spec!.runtimeClassName).toBe('gvisor');
  expect(
    sandboxPod({ ...spec, readonlyRoot: false }, where).spec!.containers[0].securityContext!.readOnlyRootFilesystem,
  ).toBe(false);
});

test('tmp is memory of its size, workspace and home share one disk-sized emptyDir, host folders are read-only', () => {
  const pod = sandboxPod(spec, { ...where, snapshot: { id: 'abc123', dir: '/var/lib/drydock/snapshots/abc123' } });
  const volumes = Object.fromEntries(pod.spec!.volumes!.map((v) => [v.name, v]));
  expect(volumes.tmp.emptyDir).toEqual({ medium: 'Memory', sizeLimit: String(64 * MiB) });
  expect(volumes.disk.emptyDir).toEqual({ sizeLimit: String(1024 * MiB) });
  const mounts = pod.spec!.containers[0].volumeMounts!.map((m) => ({
    at: m.mountPath,
    from: volumes[m.name].hostPath?.path ?? `${m.name}${m.subPath ? `/${m.subPath}` : ''}`,
    ro: m.readOnly ?? false,
  }));
  expect(mounts).toEqual([
    { at: '/tmp', from: 'tmp', ro: false },
    { at: '/workspace', from: 'disk/workspace', ro: false },
    { at: '/home/drydock', from: 'disk/home', ro: false },
    { at: '/run/drydock', from: spec.egressDir, ro: true },
    { at: '/opt/drydock-agents', from: spec.agentsDir, ro: true },
    { at: '/opt/drydock', from: '/var/lib/drydock/tools/helpers-1', ro: true },
    { at: '/run/drydock-snapshot', from: '/var/lib/drydock/snapshots/abc123', ro: true },
  ]);
  for (const v of pod.spec!.volumes!.filter((x) => x.hostPath)) expect(v.hostPath!.type).toBe('Directory');
  expect(pod.metadata!.labels).toEqual({ [POD_LABELS.sandbox]: 'true', [POD_LABELS.snapshot]: 'abc123' });
});

test('placed on the worker node; the sandbox name and its labels (credentials redacted) in annotations', () => {
  const pod = sandboxPod(spec, where);
  expect(pod.metadata!.namespace).toBe('sandboxes');
  expect(pod.spec!.affinity!.nodeAffinity!.requiredDuringSchedulingIgnoredDuringExecution!.nodeSelectorTerms).toEqual([
    { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['node-1'] }] },
  ]);
  expect(pod.metadata!.annotations![POD_ANNOTATIONS.name]).toBe('drydock-Session_1');
  const labels = JSON.parse(pod.metadata!.annotations![POD_ANNOTATIONS.labels]) as Record<string, string>;
  expect(labels['drydock.session']).toBe('Session_1');
  expect(JSON.stringify(pod)).not.toContain('secret@');
});

test('pod names: a DNS label as it is, anything else made one with a hash of the original', () => {
  expect(podName('drydock-abc-1')).toBe('drydock-abc-1');
  const made = podName('drydock-Session_1');
  expect(made).toMatch(/^drydock-session-1-[0-9a-f]{8}$/);
  expect(podName('drydock-session-1')).not.toBe(made);
  expect(podName(made)).toBe(made); // an id given back to destroy names the same pod
  const long = podName(`drydock-${'x'.repeat(200)}`);
  expect(long.length).toBeLessThanOrEqual(63);
  expect(long).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
  expect(podName('___')).toMatch(/^sandbox-[0-9a-f]{8}$/);
});

const pod = (status: V1Pod['status'], extra: Partial<V1Pod['metadata']> = {}): V1Pod => ({
  metadata: { name: 'p', ...extra },
  status,
});
const container = (state: object) => ({
  containerStatuses: [{ name: 'sandbox', image: 'i', imageID: '', ready: true, restartCount: 0, state }],
});

test('pod states: running, starting, failed for good with the reason, gone', () => {
  expect(runningState(undefined).phase).toBe('gone');
  expect(runningState(pod({ phase: 'Running' }, { deletionTimestamp: new Date() })).phase).toBe('gone');
  expect(runningState(pod({ phase: 'Running', ...container({ running: {} }) }))).toEqual({ phase: 'running', why: '' });
  expect(runningState(pod({ phase: 'Pending' })).phase).toBe('starting');
  const unschedulable = pod({
    phase: 'Pending',
    conditions: [{ type: 'PodScheduled', status: 'False', message: '0/1 nodes are available: 1 Insufficient memory.' }],
  });
  expect(runningState(unschedulable)).toEqual({
    phase: 'starting',
    why: '0/1 nodes are available: 1 Insufficient memory.',
  });
  const pulling = pod({
    phase: 'Pending',
    ...container({ waiting: { reason: 'ImagePullBackOff', message: 'back-off' } }),
  });
  expect(runningState(pulling)).toEqual({ phase: 'starting', why: 'ImagePullBackOff: back-off' });
  const noShell = pod({
    phase: 'Pending',
    ...container({ waiting: { reason: 'RunContainerError', message: 'exec: "sh": executable file not found' } }),
  });
  expect(runningState(noShell)).toEqual({
    phase: 'failed',
    why: 'RunContainerError: exec: "sh": executable file not found',
  });
  const evicted = pod({
    phase: 'Failed',
    reason: 'Evicted',
    message: 'Usage of EmptyDir volume "disk" exceeds the limit',
  });
  expect(runningState(evicted)).toEqual({
    phase: 'failed',
    why: 'Evicted: Usage of EmptyDir volume "disk" exceeds the limit',
  });
  const killed = pod({ phase: 'Running', ...container({ terminated: { exitCode: 137, reason: 'OOMKilled' } }) });
  expect(runningState(killed)).toEqual({ phase: 'failed', why: 'exited 137: OOMKilled' });
});

test('a waiting container without a message is its reason alone', () => {
  const creating = pod({ phase: 'Pending', ...container({ waiting: { reason: 'ContainerCreating' } }) });
  expect(runningState(creating)).toEqual({ phase: 'starting', why: 'ContainerCreating' });
});

const event = (type: string, reason: string, message: string, at: string): CoreV1Event => ({
  metadata: {},
  involvedObject: {},
  type,
  reason,
  message,
  lastTimestamp: new Date(at),
});

test("a pod's warnings: newest last, each once, at most three, normal events left out", () => {
  const events = [
    event('Warning', 'FailedMount', 'hostPath type check failed: /gone is not a directory', '2026-01-01T00:00:05Z'),
    event('Normal', 'Scheduled', 'Successfully assigned', '2026-01-01T00:00:01Z'),
    event(
      'Warning',
      'FailedScheduling',
      '0/1 nodes are available:\n 1 node(s) had untolerated taint(s).',
      '2026-01-01T00:00:00Z',
    ),
    event('Warning', 'FailedMount', 'hostPath type check failed: /gone is not a directory', '2026-01-01T00:00:02Z'),
    event('Warning', 'FailedCreatePodSandBox', 'x'.repeat(400), '2026-01-01T00:00:03Z'),
    event('Warning', 'BackOff', 'Back-off pulling image', '2026-01-01T00:00:04Z'),
  ];
  expect(warningsOf(events)).toEqual([
    `FailedCreatePodSandBox: ${'x'.repeat(276)}`,
    'BackOff: Back-off pulling image',
    'FailedMount: hostPath type check failed: /gone is not a directory',
  ]);
  expect(warningsOf([])).toEqual([]);
});

test('a pod that did not start in time: its state, its warnings, and where to look', () => {
  const at = { sandbox: 'drydock-S_1', namespace: 'sandboxes', node: 'node-1', limitMs: 120_000 };
  const taint = '0/1 nodes are available: 1 node(s) had untolerated taint(s).';
  const unscheduled: V1Pod = {
    metadata: { name: 'drydock-s-1-abc' },
    spec: { containers: [] },
    status: { phase: 'Pending', conditions: [{ type: 'PodScheduled', status: 'False', message: taint }] },
  };
  // The scheduler's event repeats the condition: said once.
  expect(notStartedMessage(unscheduled, [`FailedScheduling: ${taint}`, 'Other: x'], at)).toBe(
    `the pod drydock-s-1-abc of drydock-S_1 did not start within 120 s (${taint}; Other: x): the scheduler did not ` +
      'place it on node node-1: see kubectl describe node node-1 (its taints, conditions and free resources); ' +
      'DRYDOCK_K8S_START_TIMEOUT gives pods longer to start',
  );
  const stuck: V1Pod = {
    metadata: { name: 'drydock-s1' },
    spec: { containers: [], nodeName: 'node-1' },
    status: { phase: 'Pending', ...container({ waiting: { reason: 'ContainerCreating' } }) },
  };
  const mount = 'FailedMount: MountVolume.SetUp failed for volume "host-0" : hostPath type check failed';
  expect(notStartedMessage(stuck, [mount], { ...at, sandbox: 'drydock-s1' })).toBe(
    `the pod drydock-s1 did not start within 120 s (ContainerCreating; ${mount}): node node-1 has not started ` +
      "it: see its events (kubectl describe pod drydock-s1 -n sandboxes) and the node's kubelet; " +
      'DRYDOCK_K8S_START_TIMEOUT gives pods longer to start',
  );
});

test("DRYDOCK_K8S_START_TIMEOUT: 5m by default, a duration, within the provisioning activity's 10m", () => {
  expect(loadConfig({}).DRYDOCK_K8S_START_TIMEOUT).toBe(300_000);
  expect(loadConfig({ DRYDOCK_K8S_START_TIMEOUT: '90s' }).DRYDOCK_K8S_START_TIMEOUT).toBe(90_000);
  expect(() => loadConfig({ DRYDOCK_K8S_START_TIMEOUT: '9m' })).toThrow(/DRYDOCK_K8S_START_TIMEOUT: at most 8m/);
  expect(() => loadConfig({ DRYDOCK_K8S_START_TIMEOUT: 'soon' })).toThrow(/DRYDOCK_K8S_START_TIMEOUT/);
});

// ---------------------------------------------------------------- services as containers of the pod

const db: ServiceContainerSpec = {
  sandbox: spec.name,
  service: 'db',
  image: 'drydock-service-postgres:17',
  labels: { 'drydock.session': 'Session_1' },
  env: ['POSTGRES_HOST_AUTH_METHOD=trust', 'POSTGRES_DB=app'],
  command: ['-c', 'fsync=off'],
  healthcheck: { test: ['pg_isready', '-h', '127.0.0.1'], intervalMs: 1_000, timeoutMs: 10_000, retries: 60 },
  folders: [
    {
      path: '/var/lib/postgresql/data',
      from: { image: 'drydock-service-postgres:17', path: '/var/lib/postgresql/data' },
    },
  ],
  cpus: 1,
  memoryBytes: 256 * MiB,
  pids: 128,
};
const cache: ServiceContainerSpec = {
  ...db,
  service: 'cache_2',
  image: 'redis:8',
  env: [],
  user: '999:1000',
  entrypoint: ['redis-server'],
  command: undefined,
  workingDir: '/data',
  healthcheck: undefined,
  folders: [
    { path: '/data', from: { image: 'drydock-data-x:cache_2', path: '/drydock-data/0/data' } },
    { path: '/run/redis', from: { image: 'redis:8', path: '/run/redis' } },
  ],
  cpus: 0.5,
  memoryBytes: 64 * MiB,
};

test("services are containers of the sandbox's pod, hardened like its own, with their limits and checks", () => {
  const pod = sandboxPod({ ...spec, services: [db, cache] }, where);
  const s = pod.spec!;
  expect(s.containers.map((c) => c.name)).toEqual(['sandbox', 'svc-db', serviceContainerName('cache_2')]);
  expect(serviceContainerName('cache_2')).toMatch(/^svc-cache-2-[0-9a-f]{6}$/);
  expect(JSON.parse(pod.metadata!.annotations![POD_ANNOTATIONS.services])).toEqual(['db', 'cache_2']);
  // One network namespace, one pod: nothing of the pod's own settings changes for them.
  expect([s.hostNetwork, s.shareProcessNamespace].map(Boolean)).toEqual([false, false]);
  expect(s.automountServiceAccountToken).toBe(false);
  expect(s.securityContext).toEqual({ runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } });
  const [, pg, redis] = s.containers;
  const hardened = {
    allowPrivilegeEscalation: false,
    privileged: false,
    readOnlyRootFilesystem: true,
    capabilities: { drop: ['ALL'] },
  };
  // Never root: drydock's own image as its user's known ids (its USER is a name); a declared uid is enforced.
  expect(pg.securityContext).toEqual({ ...hardened, runAsNonRoot: true, runAsUser: 100, runAsGroup: 102 });
  expect(redis.securityContext).toEqual({ ...hardened, runAsNonRoot: true, runAsUser: 999, runAsGroup: 1000 });
  expect(pg).toMatchObject({
    image: 'drydock-service-postgres:17',
    imagePullPolicy: 'Never',
    args: ['-c', 'fsync=off'],
    env: [
      { name: 'POSTGRES_HOST_AUTH_METHOD', value: 'trust' },
      { name: 'POSTGRES_DB', value: 'app' },
    ],
    resources: {
      limits: { cpu: '1000m', memory: String(256 * MiB) },
      requests: { cpu: '100m', memory: String(256 * MiB) },
    },
    terminationMessagePolicy: 'FallbackToLogsOnError',
    readinessProbe: {
      exec: { command: ['pg_isready', '-h', '127.0.0.1'] },
      periodSeconds: 1,
      timeoutSeconds: 10,
      failureThreshold: 60,
      successThreshold: 1,
    },
  });
  expect(pg.command).toBeUndefined(); // the image's entrypoint
  expect(redis).toMatchObject({ command: ['redis-server'], workingDir: '/data' });
  expect(redis.args).toBeUndefined();
  expect(redis.readinessProbe).toBeUndefined();
  expect(redis.resources!.limits).toEqual({ cpu: '500m', memory: String(64 * MiB) });
});

test("a service's writable folders are on the pod's disk, filled from its image as its user; /tmp is memory", () => {
  const pod = sandboxPod({ ...spec, services: [db, cache] }, where);
  const s = pod.spec!;
  const volumes = Object.fromEntries(s.volumes!.map((v) => [v.name, v]));
  const [, pg, redis] = s.containers;
  const redisName = serviceContainerName('cache_2');
  expect(pg.volumeMounts).toEqual([
    { name: 'svc-db-tmp', mountPath: '/tmp' },
    { name: 'disk', mountPath: '/var/lib/postgresql/data', subPath: 'svc-db-0' },
    { name: 'disk', mountPath: '/run', subPath: 'svc-db-1' },
  ]);
  expect(volumes['svc-db-tmp'].emptyDir).toEqual({ medium: 'Memory', sizeLimit: String(64 * MiB) });
  expect(volumes.disk.emptyDir).toEqual({ sizeLimit: String(1024 * MiB) });
  // /run/redis is its own: /run stays the image's, read-only, under it.
  expect(redis.volumeMounts!.map((m) => [m.mountPath, m.subPath])).toEqual([
    ['/tmp', undefined],
    ['/data', `${redisName}-0`],
    ['/run/redis', `${redisName}-1`],
    ['/run', `${redisName}-2`],
  ]);
  // The fillers: one per image the folders come from, as the service's user and limits, the whole disk at hand.
  expect(s.initContainers!.map((c) => [c.name, c.image, c.args])).toEqual([
    [
      'svc-db-fill',
      'drydock-service-postgres:17',
      ['/var/lib/postgresql/data', '/drydock-disk/svc-db-0', '/run', '/drydock-disk/svc-db-1'],
    ],
    [`${redisName}-fill`, 'drydock-data-x:cache_2', ['/drydock-data/0/data', `/drydock-disk/${redisName}-0`]],
    [
      `${redisName}-fill-1`,
      'redis:8',
      ['/run/redis', `/drydock-disk/${redisName}-1`, '/run', `/drydock-disk/${redisName}-2`],
    ],
  ]);
  for (const [i, fill] of s.initContainers!.entries()) {
    const of = i === 0 ? pg : redis;
    expect(fill.securityContext).toEqual(of.securityContext);
    expect(fill.resources).toEqual(of.resources);
    expect(fill.volumeMounts).toEqual([{ name: 'disk', mountPath: '/drydock-disk' }]);
    expect(fill.command!.slice(0, 2)).toEqual(['sh', '-c']);
  }
  // The sandbox's own container sees none of it.
  expect(s.containers[0].volumeMounts!.filter((m) => m.name === 'disk').map((m) => m.subPath)).toEqual([
    'workspace',
    'home',
  ]);
});

test('no service runs as root: runAsNonRoot always, numeric ids where the image has a user by name (T4-M4)', () => {
  const hardened = { allowPrivilegeEscalation: false, privileged: false, readOnlyRootFilesystem: true };
  const contexts = (services: ServiceContainerSpec[]) =>
    sandboxPod({ ...spec, services }, where)
      .spec!.containers.slice(1)
      .map((c) => c.securityContext);
  // An image of anyone else's without a user: the kubelet runs it only if its USER is a non-root number.
  const other = { ...db, image: `ghcr.io/acme/pg@sha256:${'ab'.repeat(32)}`, folders: [] };
  expect(contexts([other])[0]).toEqual({ ...hardened, capabilities: { drop: ['ALL'] }, runAsNonRoot: true });
  expect(contexts([{ ...db, service: 'r', image: 'drydock/redis:8', folders: [] }])[0]).toMatchObject({
    runAsNonRoot: true,
    runAsUser: 100,
    runAsGroup: 101,
  });
  // A declared user wins over the known ids.
  expect(contexts([{ ...db, user: '70' }])[0]).toMatchObject({ runAsNonRoot: true, runAsUser: 70 });
  expect(contexts([{ ...db, user: '70' }])[0]!.runAsGroup).toBeUndefined();
});

test("a service's image is pulled only when pinned by digest; a tag, or a data image, never (T4-M4)", () => {
  const pinned = `ghcr.io/acme/pg@sha256:${'ab'.repeat(32)}`;
  const services: ServiceContainerSpec[] = [
    { ...db, image: pinned, folders: [{ path: '/data', from: { image: 'drydock-data-x:db', path: '/d/0/data' } }] },
    { ...cache, image: 'redis:8', folders: [] },
  ];
  const s = sandboxPod({ ...spec, services }, { ...where, imagePullPolicy: 'IfNotPresent' }).spec!;
  expect(s.containers.map((c) => [c.image, c.imagePullPolicy])).toEqual([
    ['drydock-base:abc', 'IfNotPresent'], // the operator's base image: the operator's policy
    [pinned, 'IfNotPresent'],
    ['redis:8', 'Never'],
  ]);
  expect(s.initContainers!.map((c) => [c.image, c.imagePullPolicy])).toEqual([
    ['drydock-data-x:db', 'Never'],
    [pinned, 'IfNotPresent'],
    ['redis:8', 'Never'],
  ]);
});

test('a service user by name or root is refused on Kubernetes, naming the service', () => {
  expect(() => sandboxPod({ ...spec, services: [{ ...db, user: 'postgres' }] }, where)).toThrow(
    /^service db: user postgres: on Kubernetes a service's user is a non-root uid or uid:gid/,
  );
  expect(() => sandboxPod({ ...spec, services: [{ ...db, user: '0:0' }] }, where)).toThrow(/service db: user 0:0/);
});

test("a service's state from its container's status: running, exited, out of memory, its health", () => {
  const probe = { periodSeconds: 1, failureThreshold: 3, timeoutSeconds: 2 };
  const now = Date.parse('2026-01-01T00:01:00Z');
  const status = (state: object, ready = false) => ({
    name: 'svc-db',
    image: 'i',
    imageID: '',
    restartCount: 0,
    ready,
    state,
  });
  const since = (s: number) => ({ running: { startedAt: new Date(now - s * 1000) } });
  expect(serviceStateOf(status(since(1)), undefined, now)).toEqual({ running: true, exitCode: 0, oomKilled: false });
  expect(serviceStateOf(status(since(100), true), probe, now).health).toBe('healthy');
  // Not ready within the probe's failures in a row (3 × 1 s + 2 s): starting; longer: unhealthy.
  expect(serviceStateOf(status(since(4)), probe, now).health).toBe('starting');
  expect(serviceStateOf(status(since(6)), probe, now).health).toBe('unhealthy');
  expect(serviceStateOf(status({ terminated: { exitCode: 137, reason: 'OOMKilled' } }), probe, now)).toEqual({
    running: false,
    exitCode: 137,
    oomKilled: true,
  });
  expect(serviceStateOf(undefined, probe, now)).toEqual({ running: false, exitCode: -1, oomKilled: false });
});

test("a service's container that cannot be made fails the pod, named; so does a filler that failed, with its log", () => {
  const stuck = pod({
    phase: 'Pending',
    containerStatuses: [
      { name: 'sandbox', image: 'i', imageID: '', ready: true, restartCount: 0, state: { running: {} } },
      {
        name: 'svc-db',
        image: 'i',
        imageID: '',
        ready: false,
        restartCount: 0,
        state: { waiting: { reason: 'ErrImageNeverPull', message: 'image "x" is not present' } },
      },
    ],
  });
  expect(runningState(stuck)).toEqual({
    phase: 'failed',
    why: 'container svc-db: ErrImageNeverPull: image "x" is not present',
  });
  const filler = pod({
    phase: 'Failed',
    initContainerStatuses: [
      {
        name: 'svc-db-fill',
        image: 'i',
        imageID: '',
        ready: false,
        restartCount: 0,
        state: { terminated: { exitCode: 1, message: "cp: cannot open '/x': Permission denied\n" } },
      },
    ],
  });
  expect(runningState(filler)).toEqual({
    phase: 'failed',
    why: "svc-db-fill exited 1: cp: cannot open '/x': Permission denied",
  });
});

test("an environment built for the cluster is pulled by its digest where the worker's policy is Never; its services keep theirs", () => {
  const built = `127.0.0.1:5000/drydock/drydock-env-r@sha256:${'cd'.repeat(32)}`;
  const s = sandboxPod(
    { ...spec, image: built, services: [{ ...cache, image: 'redis:8', folders: [] }] },
    { ...where, sandboxPullPolicy: 'IfNotPresent' },
  ).spec!;
  expect(s.containers.map((c) => [c.image, c.imagePullPolicy])).toEqual([
    [built, 'IfNotPresent'],
    ['redis:8', 'Never'],
  ]);
});

test('DRYDOCK_K8S_BUILD_REGISTRY: host[:port][/path], lower case; unset by default', () => {
  expect(loadConfig({}).DRYDOCK_K8S_BUILD_REGISTRY).toBeUndefined();
  expect(loadConfig({ DRYDOCK_K8S_BUILD_REGISTRY: '127.0.0.1:5000/drydock' }).DRYDOCK_K8S_BUILD_REGISTRY).toBe(
    '127.0.0.1:5000/drydock',
  );
  expect(loadConfig({ DRYDOCK_K8S_BUILD_REGISTRY: 'registry.example.com' }).DRYDOCK_K8S_BUILD_REGISTRY).toBe(
    'registry.example.com',
  );
  for (const bad of ['https://r.example.com', 'R.example.com', 'r.example.com/a b', 'r.example.com/'])
    expect(() => loadConfig({ DRYDOCK_K8S_BUILD_REGISTRY: bad })).toThrow(/DRYDOCK_K8S_BUILD_REGISTRY/);
});
