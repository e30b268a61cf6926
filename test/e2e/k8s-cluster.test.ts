/**
 * The real single-node Kubernetes cluster built here (infra/k8s-cluster.sh): a
 * kubelet runs a pod of drydock's base image with a sandbox's hardening, the pod
 * has no network but loopback, a command runs in it through the API server, and
 * deleting the pod stops its processes.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { execInPod, podGone, podStarted, runCluster, sandboxPod, type TestCluster } from '../support/k8s-cluster';

const image = process.env.DRYDOCK_BASE_IMAGE!;
let cluster: TestCluster;

beforeAll(async () => {
  cluster = await runCluster([image]);
}, 15 * 60_000);

/** The node's running tasks (containers and pod sandboxes), as its containerd lists them. */
function runningTasks(): string[] {
  const out = execFileSync('ctr', ['--address', cluster.containerdSocket, '--namespace', 'k8s.io', 'tasks', 'ls'], {
    encoding: 'utf8',
  });
  return out.split('\n').filter((line) => /\sRUNNING\s*$/.test(line));
}

test('a kubelet runs a hardened pod of the base image; exec through the API; delete stops it', async () => {
  const name = `probe-${randomBytes(3).toString('hex')}`;
  const before = runningTasks().length;
  await cluster.core.createNamespacedPod({ namespace: 'default', body: sandboxPod(name, image) });
  expect(await podStarted(cluster, 'default', name)).toBe('Running');
  // The pod's sandbox (pause) and its container.
  expect(runningTasks().length).toBe(before + 2);

  const pod = { namespace: 'default', name, container: 'main' };
  const probe = await execInPod(cluster.kubeconfig, pod, [
    'sh',
    '-c',
    'id -u; ls /sys/class/net | tr "\\n" " "; echo; tail -n +2 /proc/net/route; grep CapEff /proc/self/status; ' +
      'touch /probe 2>/dev/null && echo root-writable; echo x > /tmp/x && echo tmp-writable',
  ]);
  expect(probe).toMatchObject({ exitCode: 0, stderr: '' });
  const [uid, interfaces, ...rest] = probe.stdout.trim().split('\n');
  expect(uid).toBe('1000');
  // Loopback only, and no route at all: as `docker run --network none`.
  expect(interfaces.trim()).toBe('lo');
  expect(rest.filter((line) => /^\S+\t[0-9A-F]{8}\t/.test(line))).toEqual([]);
  expect(rest).toContain('CapEff:\t0000000000000000');
  expect(rest).not.toContain('root-writable');
  expect(rest).toContain('tmp-writable');

  const failing = await execInPod(cluster.kubeconfig, pod, ['sh', '-c', 'echo oops >&2; exit 3']);
  expect(failing).toEqual({ exitCode: 3, stdout: '', stderr: 'oops\n' });

  // Not forced: the API forgets the pod once the kubelet has stopped it.
  await cluster.core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 1 });
  await podGone(cluster, 'default', name);
  expect(runningTasks().length).toBe(before);
});
