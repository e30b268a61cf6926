/**
 * A sandbox's pod as sandbox/kubernetes/pod.ts makes it (every hardening
 * setting, the volumes, the placement), its name from the sandbox's, and
 * the state sandbox/kubernetes/pod-state.ts reads from what the API says,
 * with the error of a pod that did not start in time and how long it may take.
 */
import type { CoreV1Event, V1Pod } from '@kubernetes/client-node';
import { loadConfig } from '../../platform/config';
import { KEEPER, podName, POD_ANNOTATIONS, POD_LABELS, sandboxPod } from '../../sandbox/kubernetes/pod';
import { notStartedMessage, runningState, warningsOf } from '../../sandbox/kubernetes/pod-state';
import type { SandboxSpec } from '../../sandbox/provider';

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
  expect(s.securityContext).toEqual({
    runAsNonRoot: true,
    runAsUser: 1000,
    runAsGroup: 1000,
    seccompProfile: { type: 'RuntimeDefault' },
  });
  expect(s.containers).toHaveLength(1);
  const [c] = s.containers;
  expect(c.securityContext).toEqual({
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
