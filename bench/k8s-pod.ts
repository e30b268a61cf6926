/**
 * bench/k8s-pod: how fast a pod of the base image runs a first command on the
 * single-node cluster built here (infra/k8s-cluster.sh), median of RUNS:
 *   pod       a sandbox's pod (non-root, read-only root, no capabilities,
 *             seccomp, limits, a tmpfs) created through the API, until a first
 *             exec through the API has answered
 *   floor     `kubectl run` of the same image and `kubectl wait` for Ready
 *   docker    `docker run -d --network none` of the same image (today's provider's floor)
 * and the ratios pod/floor and floor/docker. The cluster is the tests' one
 * (test/support/k8s-cluster.ts): started if need be, stopped at the end.
 *
 *   npx tsx bench/k8s-pod.ts     (RUNS=5 by default)
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { ensureBaseImage } from '../sandbox-images/base-image';
import {
  execInPod,
  podGone,
  podStarted,
  sandboxPod,
  startTestCluster,
  type TestCluster,
} from '../test/support/k8s-cluster';
import { atExit, benchMain } from './stack';
import { median, ratioTable, runsFromEnv, say, timingTable, type Row } from './table';

const run = promisify(execFile);
const RUNS = runsFromEnv(5);

async function main(): Promise<string> {
  const image = await ensureBaseImage();
  say('starting the cluster (and loading the base image into its node)');
  const cluster = await startTestCluster([image]);
  atExit(() => cluster.stop());
  const kubectl = (...args: string[]) =>
    run(cluster.kubectl, args, { env: { ...process.env, KUBECONFIG: cluster.kubeconfigFile } });
  const pod: Row = { name: 'pod: create through the API → first exec answered', ms: [] };
  const floor: Row = { name: 'floor: kubectl run + kubectl wait --for=condition=Ready', ms: [] };
  const docker: Row = { name: 'docker run -d --network none', ms: [] };
  for (let i = 0; i < RUNS; i++) {
    say(`run ${i + 1} of ${RUNS}`);
    pod.ms.push(await podStart(cluster, image));
    const name = `floor-${randomBytes(3).toString('hex')}`;
    let t = Date.now();
    await kubectl(
      'run',
      name,
      `--image=${image}`,
      '--image-pull-policy=Never',
      '--restart=Never',
      '--command',
      '--',
      'sleep',
      'infinity',
    );
    await kubectl('wait', '--for=condition=Ready', `pod/${name}`, '--timeout=120s');
    floor.ms.push(Date.now() - t);
    await kubectl('delete', 'pod', name, '--grace-period=1', '--wait=true');
    t = Date.now();
    const { stdout } = await run('docker', ['run', '-d', '--network', 'none', image, 'sleep', 'infinity']);
    docker.ms.push(Date.now() - t);
    await run('docker', ['rm', '-f', stdout.trim()]);
  }
  return [
    timingTable([pod, floor, docker]),
    ratioTable([
      { name: 'pod / floor (kubectl run)', value: median(pod.ms) / median(floor.ms) },
      { name: 'floor (kubectl run) / docker run', value: median(floor.ms) / median(docker.ms) },
    ]),
  ].join('\n\n');
}

/** Milliseconds from creating a sandbox's pod to the answer of a first exec in it. */
async function podStart(cluster: TestCluster, image: string): Promise<number> {
  const name = `bench-${randomBytes(3).toString('hex')}`;
  const t = Date.now();
  await cluster.core.createNamespacedPod({ namespace: 'default', body: sandboxPod(name, image) });
  const phase = await podStarted(cluster, 'default', name);
  if (phase !== 'Running') throw new Error(`pod ${name}: ${phase}`);
  const first = await execInPod(cluster.kubeconfig, { namespace: 'default', name, container: 'main' }, ['true']);
  const ms = Date.now() - t;
  if (first.exitCode !== 0) throw new Error(`exec in ${name}: ${JSON.stringify(first)}`);
  await cluster.core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 1 });
  await podGone(cluster, 'default', name);
  return ms;
}

benchMain('Kubernetes: a sandbox pod against kubectl run (the floor)', main);
