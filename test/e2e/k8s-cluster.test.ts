/**
 * The real single-node Kubernetes cluster built here (infra/k8s-cluster.sh): a
 * kubelet runs a pod of drydock's base image with a sandbox's hardening, the pod
 * has no network but loopback, a command runs in it through the API server, and
 * deleting the pod stops its processes. A disk others fill never makes the
 * kubelet evict (nor delete the node's images), and a pause image removed
 * anyway is imported again.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { request } from 'node:https';
import {
  cluster as clusterScript,
  execInPod,
  podGone,
  podStarted,
  runCluster,
  sandboxPod,
  type TestCluster,
} from '../support/k8s-cluster';

const image = process.env.DRYDOCK_BASE_IMAGE!;
let cluster: TestCluster;

beforeAll(async () => {
  cluster = await runCluster([image]);
}, 15 * 60_000);

/** ctr against the node's containerd, in the kubelet's namespace. */
const ctr = (...args: string[]) =>
  execFileSync('ctr', ['--address', cluster.containerdSocket, '--namespace', 'k8s.io', ...args], { encoding: 'utf8' });

/** The node's running tasks (containers and pod sandboxes), as its containerd lists them. */
function runningTasks(): string[] {
  return ctr('tasks', 'ls')
    .split('\n')
    .filter((line) => /\sRUNNING\s*$/.test(line));
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

/** The kubelet's configuration as it runs (its /configz, asked with the admin's certificate). */
async function kubeletConfig(): Promise<{ evictionHard: Record<string, string> }> {
  const node = await cluster.core.readNode({ name: 'localhost' });
  const opts: { cert?: Buffer; key?: Buffer; ca?: Buffer } = {};
  await cluster.kubeconfig.applyToHTTPSOptions(opts);
  const port = node.status!.daemonEndpoints!.kubeletEndpoint!.Port;
  const body = await new Promise<string>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/configz', servername: 'localhost', ...opts }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => (res.statusCode === 200 ? resolve(text) : reject(new Error(`${res.statusCode}: ${text}`))));
    });
    req.on('error', reject);
    req.end();
  });
  return (JSON.parse(body) as { kubeletconfig: { evictionHard: Record<string, string> } }).kubeletconfig;
}

test('a disk others fill never makes the kubelet evict or delete images; a pause image removed is imported again', async () => {
  // "0%" turns a signal off: no disk-pressure taint, and no deleting of the images no pod uses (the pause image too).
  expect((await kubeletConfig()).evictionHard).toEqual({
    'memory.available': '100Mi',
    'nodefs.available': '0%',
    'nodefs.inodesFree': '0%',
    'imagefs.available': '0%',
    'imagefs.inodesFree': '0%',
  });
  // Removed anyway (an operator's prune), the pause image is back with the next load, and pods start again.
  ctr('images', 'rm', 'drydock.local/pause:1');
  expect(ctr('images', 'ls', '-q').split('\n')).not.toContain('drydock.local/pause:1');
  await clusterScript(['load', cluster.name]);
  expect(ctr('images', 'ls', '-q').split('\n')).toContain('drydock.local/pause:1');
  const name = `after-prune-${randomBytes(3).toString('hex')}`;
  await cluster.core.createNamespacedPod({ namespace: 'default', body: sandboxPod(name, image) });
  try {
    expect(await podStarted(cluster, 'default', name)).toBe('Running');
  } finally {
    await cluster.core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 0 });
  }
});
