/**
 * The single-node Kubernetes cluster of infra/k8s-cluster.sh, for tests: one
 * per test run, whichever suites use it (started by the first under a lock, one
 * cluster name per machine, so its images are imported once and reused;
 * stopped by the run's global teardown), a client for its API, and exec
 * through the API.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Writable } from 'node:stream';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { projectRoot } from './helpers';
import { freePortRange } from './ports';

const run = promisify(execFile);
const SCRIPT = 'infra/k8s-cluster.sh';

export interface TestCluster {
  name: string;
  kubeconfig: k8s.KubeConfig;
  /** The kubeconfig's path, for kubectl (KUBECONFIG). */
  kubeconfigFile: string;
  /** The kubectl built with the cluster. */
  kubectl: string;
  core: k8s.CoreV1Api;
  /** The node's containerd, for what the API does not show (a pod's tasks). */
  containerdSocket: string;
  stop(): Promise<void>;
}

export async function cluster(args: string[], env: NodeJS.ProcessEnv = {}): Promise<string> {
  const { stdout } = await run('bash', [SCRIPT, ...args], {
    cwd: projectRoot,
    env: { ...process.env, ...env },
    maxBuffer: 16 << 20,
  });
  return stdout.trim();
}

/** What the run's cluster left for the suites after the first and for global teardown (in DRYDOCK_TEST_DIR). */
interface RunCluster {
  name: string;
  kubeconfigFile: string;
  /** The process holding the machine's lock on the cluster's name. */
  lockPid: number;
}

const runClusterFile = () => path.join(process.env.DRYDOCK_TEST_DIR!, 'k8s-cluster.json');

/**
 * The test run's cluster with IMAGES loaded into its node: started by the
 * first suite that asks (after any other run on this machine has stopped
 * it), found by the others; the run's global teardown stops it
 * (stopRunCluster).
 */
export async function runCluster(images: string[], name = 'test'): Promise<TestCluster> {
  const file = runClusterFile();
  if (!existsSync(file)) {
    const lock = await holdLock(`/run/drydock-k8s-${name}.lock`);
    try {
      // At once when built; else waits for npm test's background build (or builds: a suite run alone on a fresh clone).
      await cluster(['build']);
      const kubeconfigFile = (await cluster(['up', name], { K8S_PORT: String(await freePortRange(4)) }))
        .split('\n')
        .pop()!;
      const started: RunCluster = { name, kubeconfigFile, lockPid: lock.pid! };
      writeFileSync(file, JSON.stringify(started));
    } catch (err) {
      release(lock);
      throw err;
    }
    // The lock outlives this suite (until global teardown, or this process's end).
    lock.unref();
    (lock.stdin as unknown as { unref?: () => void } | null)?.unref?.();
    (lock.stdout as unknown as { unref?: () => void } | null)?.unref?.();
  }
  const { name: running, kubeconfigFile } = JSON.parse(readFileSync(file, 'utf8')) as RunCluster;
  if (images.length) await cluster(['load', running, ...images]);
  return clusterOf(running, kubeconfigFile, async () => undefined);
}

/** Global teardown: stops the run's cluster, if a suite started one, and lets go of its lock. */
export async function stopRunCluster(): Promise<void> {
  const file = runClusterFile();
  if (!existsSync(file)) return;
  const { name, lockPid } = JSON.parse(readFileSync(file, 'utf8')) as RunCluster;
  try {
    await cluster(['down', name]);
  } finally {
    try {
      process.kill(-lockPid);
    } catch {
      // already gone
    }
  }
}

function clusterOf(name: string, file: string, stop: () => Promise<void>): TestCluster {
  const kubeconfig = new k8s.KubeConfig();
  kubeconfig.loadFromFile(file);
  return {
    name,
    kubeconfig,
    kubeconfigFile: file,
    kubectl: path.join(projectRoot, '.tools/kubernetes/kubectl'),
    core: kubeconfig.makeApiClient(k8s.CoreV1Api),
    containerdSocket: `/run/drydock-k8s-${name}/containerd.sock`,
    stop,
  };
}

/**
 * Starts the cluster NAME (default "test") with IMAGES loaded into its node,
 * after any other test run on this machine has stopped it: the lock is a
 * `flock` held by a child process, released when it ends or this process dies.
 */
export async function startTestCluster(images: string[], name = 'test'): Promise<TestCluster> {
  const lock = await holdLock(`/run/drydock-k8s-${name}.lock`);
  try {
    await cluster(['build']);
    const file = (await cluster(['up', name], { K8S_PORT: String(await freePortRange(4)) })).split('\n').pop()!;
    if (images.length) await cluster(['load', name, ...images]);
    return clusterOf(name, file, async () => {
      await cluster(['down', name]).finally(() => release(lock));
    });
  } catch (err) {
    release(lock);
    throw err;
  }
}

async function holdLock(file: string): Promise<ChildProcess> {
  // Its own process group, so that global teardown can end it whole (flock and the cat holding the lock).
  const holder = spawn('flock', ['--exclusive', file, 'sh', '-c', 'echo locked && exec cat'], {
    stdio: ['pipe', 'pipe', 'inherit'],
    detached: true,
  });
  const [line] = (await Promise.race([once(holder.stdout!, 'data'), once(holder, 'exit')])) as [unknown];
  if (!Buffer.isBuffer(line)) throw new Error(`could not take the lock ${file}`);
  return holder;
}

function release(holder: ChildProcess): void {
  holder.stdin?.end();
}

export interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** Runs COMMAND in a pod's container through the API server (the kubelet streams it). */
export async function execInPod(
  kubeconfig: k8s.KubeConfig,
  pod: { namespace: string; name: string; container: string },
  command: string[],
): Promise<ExecResult> {
  const stdout = collector();
  const stderr = collector();
  const status = await new Promise<k8s.V1Status>((resolve, reject) => {
    new k8s.Exec(kubeconfig)
      .exec(pod.namespace, pod.name, pod.container, command, stdout.stream, stderr.stream, null, false, resolve)
      .catch(reject);
  });
  return { exitCode: exitCodeOf(status), stdout: stdout.text(), stderr: stderr.text() };
}

/** The exec's exit code: Success, or a Failure whose cause "ExitCode" carries it. */
function exitCodeOf(status: k8s.V1Status): number {
  if (status.status === 'Success') return 0;
  const code = status.details?.causes?.find((c) => c.reason === 'ExitCode')?.message;
  if (code === undefined) throw new Error(`exec failed: ${status.message ?? JSON.stringify(status)}`);
  return Number(code);
}

function collector(): { stream: Writable; text(): string } {
  const chunks: Buffer[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk);
      done();
    },
  });
  return { stream, text: () => Buffer.concat(chunks).toString('utf8') };
}

/** A pod as a sandbox is: non-root, read-only root, no capabilities, seccomp, limits, no token. */
export function sandboxPod(name: string, image: string): k8s.V1Pod {
  return {
    metadata: { name, labels: { 'drydock.test': 'k8s' } },
    spec: {
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 1,
      securityContext: {
        runAsNonRoot: true,
        runAsUser: 1000,
        runAsGroup: 1000,
        seccompProfile: { type: 'RuntimeDefault' },
      },
      containers: [
        {
          name: 'main',
          image,
          imagePullPolicy: 'Never',
          command: ['sleep', 'infinity'],
          securityContext: {
            allowPrivilegeEscalation: false,
            readOnlyRootFilesystem: true,
            capabilities: { drop: ['ALL'] },
          },
          resources: { limits: { cpu: '1', memory: '256Mi' } },
          volumeMounts: [{ name: 'tmp', mountPath: '/tmp' }],
        },
      ],
      volumes: [{ name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: '64Mi' } }],
    },
  };
}

/**
 * Resolves with the pod's phase once it has left Pending (Running, or Failed and
 * so on), watching the API rather than polling it; rejects after TIMEOUTMS.
 */
export async function podStarted(
  cluster: TestCluster,
  namespace: string,
  name: string,
  timeoutMs = 120_000,
): Promise<string> {
  let stop: AbortController | undefined;
  let timer: NodeJS.Timeout | undefined;
  try {
    return await new Promise<string>((resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`pod ${name}: still pending after ${timeoutMs} ms`)), timeoutMs);
      const seen = (_type: string, pod: k8s.V1Pod) => {
        const phase = pod.status?.phase;
        if (phase && phase !== 'Pending') resolve(phase);
      };
      const ended = (err: unknown) => reject(err instanceof Error ? err : new Error(`watch of pod ${name} ended`));
      new k8s.Watch(cluster.kubeconfig)
        .watch(`/api/v1/namespaces/${namespace}/pods`, { fieldSelector: `metadata.name=${name}` }, seen, ended)
        .then((controller) => (stop = controller), reject);
    });
  } finally {
    clearTimeout(timer);
    stop?.abort();
  }
}

/** Resolves once the API no longer has the pod (a non-forced delete waits for the kubelet). */
export async function podGone(
  cluster: TestCluster,
  namespace: string,
  name: string,
  timeoutMs = 120_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await cluster.core.readNamespacedPod({ namespace, name });
    } catch (err) {
      if ((err as { code?: number }).code === 404) return;
      throw err;
    }
    if (Date.now() > deadline) throw new Error(`pod ${name}: still there after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
