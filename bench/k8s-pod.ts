/**
 * bench/k8s-pod: how fast a sandbox starts on the single-node cluster built
 * here (infra/k8s-cluster.sh) against its floor and against Docker, median of RUNS:
 *   pod        the Kubernetes provider's create (a sandbox's pod: non-root,
 *              read-only root, no capabilities, seccomp, limits, emptyDirs, the
 *              egress folder from the node) until a first exec through the API answered
 *   snapshot   the same from a stored snapshot (Debian's Node.js modules as a
 *              stand-in for node_modules: 26,000 files, 157 MB, unpacked into the
 *              pod's /workspace before create returns)
 *   floor      `kubectl run` of the same image and `kubectl wait` for Ready
 *   docker     the Docker provider's create of the same sandbox until a first exec answered
 *   docker run `docker run -d --network none`, same image (Docker's floor)
 *   service    a pod with PostgreSQL 17 (built here) as a service, a container of
 *              the pod, until the service is ready (pg_isready by exec in it, its
 *              first start's initdb included) and a first exec in the sandbox answered
 *   docker svc the same through the Docker provider (a sandbox and a service container)
 * and the ratios. The cluster is the tests' one (test/support/k8s-cluster.ts):
 * started if need be, stopped at the end.
 *
 *   npx tsx bench/k8s-pod.ts     (RUNS=5 by default)
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import {
  DockerProvider,
  LABELS,
  type SandboxProvider,
  type SandboxSpec,
  serviceContainers,
  startServices,
  type RunnableService,
} from '../sandbox';
import { KubernetesProvider } from '../sandbox/kubernetes/provider';
import { ensureBaseImage } from '../sandbox-images/base-image';
import { ensureServiceImage } from '../sandbox-images/service-images';
import { startTestCluster, type TestCluster } from '../test/support/k8s-cluster';
import { atExit, benchMain, tempDir } from './stack';
import { median, ratioTable, runsFromEnv, say, timingTable, type Row } from './table';

const run = promisify(execFile);
const RUNS = runsFromEnv(5);
const MiB = 1024 ** 2;

async function main(): Promise<string> {
  const image = await ensureBaseImage();
  const postgres = await ensureServiceImage('postgres');
  say('starting the cluster (and loading the base and PostgreSQL images into its node)');
  const cluster = await startTestCluster([image, postgres]);
  atExit(() => cluster.stop());
  const dir = await tempDir('k8s');
  const pods = new KubernetesProvider({
    kubeconfig: cluster.kubeconfig,
    namespace: 'default',
    node: 'localhost',
    imagePullPolicy: 'Never',
    snapshotRoot: path.join(dir, 'snapshots'),
  });
  const docker = new DockerProvider(undefined, path.join(dir, 'docker-storage'));
  const spec = specMaker(dir, image);
  const snapshot = await makeSnapshot(pods, await spec('bench-snapsrc'));
  const rows = {
    pod: { name: 'pod: the provider creates it → first exec answered', ms: [] as number[] },
    snapshot: { name: 'pod from a snapshot (26,000 files, 157 MB) → first exec', ms: [] as number[] },
    floor: { name: 'floor: kubectl run + kubectl wait --for=condition=Ready', ms: [] as number[] },
    docker: { name: 'docker: the provider creates it → first exec answered', ms: [] as number[] },
    dockerRun: { name: 'docker run -d --network none', ms: [] as number[] },
    service: { name: 'pod with a PostgreSQL service → it is ready, first exec', ms: [] as number[] },
    dockerService: { name: 'docker: sandbox + PostgreSQL service → ready, first exec', ms: [] as number[] },
  } satisfies Record<string, Row>;
  for (let i = 0; i < RUNS; i++) {
    say(`run ${i + 1} of ${RUNS}`);
    rows.pod.ms.push(await startToExec(pods, await spec(`bench-pod-${i}`)));
    rows.snapshot.ms.push(await startToExec(pods, { ...(await spec(`bench-snap-${i}`)), image: snapshot }));
    rows.floor.ms.push(await kubectlRun(cluster, image));
    rows.docker.ms.push(await startToExec(docker, await spec(`bench-docker-${i}-${randomBytes(2).toString('hex')}`)));
    rows.dockerRun.ms.push(await dockerRun(image));
    rows.service.ms.push(await startWithService(pods, await spec(`bench-svc-${i}`), postgres));
    const dockerName = `bench-docker-svc-${i}-${randomBytes(2).toString('hex')}`;
    rows.dockerService.ms.push(await startWithService(docker, await spec(dockerName), postgres));
  }
  await pods.removeImage(snapshot);
  const m = (r: Row) => median(r.ms);
  return [
    timingTable(Object.values(rows)),
    ratioTable([
      { name: 'pod / floor (kubectl run)', value: m(rows.pod) / m(rows.floor) },
      { name: 'pod from a snapshot / pod', value: m(rows.snapshot) / m(rows.pod) },
      { name: 'pod / docker provider', value: m(rows.pod) / m(rows.docker) },
      { name: 'floor (kubectl run) / docker run', value: m(rows.floor) / m(rows.dockerRun) },
      { name: 'pod with a service / pod', value: m(rows.service) / m(rows.pod) },
      { name: 'pod with a service / docker with a service', value: m(rows.service) / m(rows.dockerService) },
    ]),
  ].join('\n\n');
}

/** Specs of small sandboxes of `image`, each with an egress folder of its own (as the worker makes them). */
function specMaker(dir: string, image: string) {
  return async (name: string): Promise<SandboxSpec> => {
    const egressDir = path.join(dir, 'egress', name);
    await mkdir(egressDir, { recursive: true });
    return {
      name,
      image,
      labels: { [LABELS.session]: name, [LABELS.host]: 'bench', [LABELS.expires]: new Date().toISOString() },
      cpus: 1,
      memoryBytes: 512 * MiB,
      pids: 256,
      tmpBytes: 64 * MiB,
      diskBytes: 1024 * MiB,
      egressDir,
    };
  };
}

/** A stored snapshot of a workspace holding many small files; its first pod also does the provider's one network check. */
async function makeSnapshot(pods: KubernetesProvider, spec: SandboxSpec): Promise<string> {
  await pods.create(spec);
  try {
    const copied = await pods.exec(spec.name, [
      'sh',
      '-c',
      'cp -r /usr/share/nodejs /workspace/node_modules && find /workspace | wc -l',
    ]);
    say(`snapshot of ${copied.stdout.toString().trim()} files`);
    const tag = `drydock-snapshot-bench:${randomBytes(4).toString('hex')}`;
    await pods.imageFromWorkspace(spec.name, { baseImage: spec.image, tag, labels: {} });
    return tag;
  } finally {
    await pods.destroy(spec.name);
  }
}

/** Milliseconds from asking the provider for a sandbox to the answer of a first exec in it. */
async function startToExec(provider: SandboxProvider, spec: SandboxSpec): Promise<number> {
  const t = Date.now();
  await provider.create(spec);
  const first = await provider.exec(spec.name, ['true']);
  const ms = Date.now() - t;
  await provider.destroy(spec.name);
  if (first.exitCode !== 0) throw new Error(`exec in ${spec.name}: ${first.stderr.toString()}`);
  return ms;
}

/** PostgreSQL as a repo declares it (trust, a database, checked over TCP), with its first start's initdb. */
function postgresService(image: string): RunnableService {
  return {
    name: 'db',
    image,
    environment: { POSTGRES_HOST_AUTH_METHOD: 'trust', POSTGRES_DB: 'app' },
    healthcheck: {
      test: ['pg_isready', '-U', 'postgres', '-h', '127.0.0.1'],
      intervalMs: 200,
      timeoutMs: 10_000,
      retries: 150,
      startPeriodMs: 0,
    },
    ports: [],
    data: ['/var/lib/postgresql/data'],
    dependsOn: [],
    limits: {},
    source: 'services.db',
  };
}

/** Milliseconds from asking for a sandbox with a PostgreSQL service to the service ready and a first exec answered. */
async function startWithService(provider: SandboxProvider, spec: SandboxSpec, postgres: string): Promise<number> {
  const services = [postgresService(postgres)];
  const shares = { db: { cpus: 1, memoryBytes: 256 * MiB, pids: 128 } };
  const t = Date.now();
  const containers = await serviceContainers(provider, spec.name, services, { shares, labels: spec.labels });
  await provider.create({ ...spec, services: containers });
  try {
    await startServices(provider, spec.name, services, containers);
    const first = await provider.exec(spec.name, ['true']);
    if (first.exitCode !== 0) throw new Error(`exec in ${spec.name}: ${first.stderr.toString()}`);
    return Date.now() - t;
  } finally {
    await provider.destroy(spec.name);
  }
}

async function kubectlRun(cluster: TestCluster, image: string): Promise<number> {
  const kubectl = (...args: string[]) =>
    run(cluster.kubectl, args, { env: { ...process.env, KUBECONFIG: cluster.kubeconfigFile } });
  const name = `floor-${randomBytes(3).toString('hex')}`;
  const t = Date.now();
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
  const ms = Date.now() - t;
  await kubectl('delete', 'pod', name, '--grace-period=0', '--force');
  return ms;
}

async function dockerRun(image: string): Promise<number> {
  const t = Date.now();
  const { stdout } = await run('docker', ['run', '-d', '--network', 'none', image, 'sleep', 'infinity']);
  const ms = Date.now() - t;
  await run('docker', ['rm', '-f', stdout.trim()]);
  return ms;
}

benchMain('Kubernetes: a sandbox pod against kubectl run (the floor) and the Docker provider', main);
