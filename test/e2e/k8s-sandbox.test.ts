/**
 * The Kubernetes sandbox provider on the cluster built here
 * (infra/k8s-cluster.sh): a sandbox's pod as the API shows it and as it
 * looks from inside, the provider contract (exec and its streams through the
 * API, caps, copies in, a pod deleted mid-command: test/support/provider-contract.ts),
 * snapshots; then hostile scripted agents in
 * sessions run by an in-process worker whose sandboxes are pods (the
 * probes of hardening.test.ts: the injection, the limits, the egress proxy),
 * and a session whose PostgreSQL (built here) is a container of its pod;
 * VS Code (code-server from its read-only hostPath mount) in a worker's sandbox pod.
 */
import { execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, realpath } from 'node:fs/promises';
import { createServer, request, type Agent, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { EDITOR_MOUNT, EDITOR_PORT, SessionEditors } from '../../sandbox/editor';
import { KubernetesProvider } from '../../sandbox/kubernetes/provider';
import { startHostProvider } from '../../sandbox/host-provider';
import { podName, POD_LABELS } from '../../sandbox/kubernetes/pod';
import { addRepo } from '../../cli/snapshots';
import { deleteSnapshotSchedules } from '../../sandbox/snapshots';
import {
  LABELS,
  ProviderCheckFailed,
  SandboxDidNotStart,
  type SandboxSpec,
  type ServiceContainerSpec,
} from '../../sandbox/provider';
import { ensureServiceImage } from '../../sandbox-images/service-images';
import { configServices, PG_CLIENT } from '../support/service-clients';
import { hasTokenPattern } from '../../platform/scrub';
import { reject, status } from '../../workflows/api';
import { own } from '../support/leftovers';
import { execInPod, runCluster, type TestCluster } from '../support/k8s-cluster';
import { ImageRegistry } from '../support/image-registry';
import {
  git,
  inPhase,
  LISTENING_3128,
  makeFixtureRepo,
  newSessionId,
  scriptedSession,
  startSession,
  startStack,
  testConfig,
  waitForStatus,
  type TestStack,
} from '../support/helpers';
import { sandboxName } from '../../sandbox/activities/container';
import { MockActivityEnvironment } from '@temporalio/testing';
import pino from 'pino';
import { createActivities } from '../../activities';
import { Redactor } from '../../platform/scrub';
import type { Sandbox, StepResult } from '../../sandbox/contract';
import { providerContract } from '../support/provider-contract';
import { openDatabase, type Database } from '../../store/db';
import type { EgressRule } from '../../workflows/rules/egress';
import { EGRESS_PROBE, probeDeps } from '../support/hostile';

const image = process.env.DRYDOCK_BASE_IMAGE!;
const MiB = 1024 ** 2;
/**
 * How long a pod of this file may take to start: below the waits of its
 * tests and hooks, so that a cluster that cannot run pods fails them with
 * the provider's error (why, and where to look), not a jest time-out.
 */
const START_TIMEOUT_MS = 120_000;
let cluster: TestCluster;
let sandboxes: KubernetesProvider;
let dir: string;
const namespace = `drydock-t-${randomBytes(3).toString('hex')}`;
/** The PostgreSQL service image built here (sandbox-images/service-images.ts), loaded into the node. */
let postgres: string;

beforeAll(async () => {
  postgres = await ensureServiceImage('postgres');
  cluster = await runCluster([image, postgres]);
  await cluster.core.createNamespace({ body: { metadata: { name: namespace } } });
  dir = await mkdtemp(path.join(tmpdir(), 'drydock-k8s-'));
  own(dir);
  sandboxes = new KubernetesProvider({
    kubeconfig: cluster.kubeconfig,
    namespace,
    node: 'localhost',
    imagePullPolicy: 'Never',
    snapshotRoot: path.join(dir, 'snapshots'),
    startTimeoutMs: START_TIMEOUT_MS,
  });
}, 15 * 60_000);

afterAll(async () => {
  if (!sandboxes) return; // the cluster did not start: beforeAll's error says why
  const left = await cluster.core.listNamespacedPod({ namespace });
  await cluster.core.deleteNamespace({ name: namespace });
  // Each test removes what it made: a pod left is a leak.
  expect(left.items.map((p) => p.metadata?.name)).toEqual([]);
}, 120_000);

/**
 * For the nested hooks: jest runs them even when the file's beforeAll failed, and
 * what they start (stacks, servers, a database) would outlive the failed file.
 */
function clusterStarted(): void {
  if (!sandboxes) throw new Error("the cluster did not start: see this file's first error");
}

/** A sandbox spec as the worker makes them, with an egress folder of its own. */
async function specOf(name: string, extra: Partial<SandboxSpec> = {}): Promise<SandboxSpec> {
  const egressDir = path.join(dir, 'egress', name);
  await mkdir(egressDir, { recursive: true });
  return {
    name,
    image,
    labels: { [LABELS.session]: name, [LABELS.host]: 'k8s-test', [LABELS.expires]: new Date().toISOString() },
    cpus: 1,
    memoryBytes: 512 * MiB,
    pids: 256,
    tmpBytes: 16 * MiB,
    diskBytes: 1024 * MiB,
    egressDir,
    ...extra,
  };
}

/** Creates a sandbox for the test and removes it afterwards, whatever happened. */
async function withSandbox<T>(name: string, work: (name: string) => Promise<T>, extra?: Partial<SandboxSpec>) {
  await sandboxes.create(await specOf(name, extra));
  try {
    return await work(name);
  } finally {
    await sandboxes.destroy(name);
  }
}

const sh = async (name: string, script: string, opts = {}) => {
  const r = await sandboxes.exec(name, ['sh', '-c', script], opts);
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
};

describe('the provider contract (test/support/provider-contract.ts), as the Docker and the test-only providers pass it', () => {
  providerContract({ provider: () => sandboxes, spec: (name) => specOf(name) });
});

describe('a sandbox pod', () => {
  const name = `drydock-Hard_${randomBytes(2).toString('hex')}`;
  beforeAll(async () => {
    clusterStarted();
    await sandboxes.create(await specOf(name));
  });
  afterAll(async () => {
    await sandboxes?.destroy(name);
  });

  test('the API shows every hardening setting; a second create is a retry that finds it', async () => {
    expect(await sandboxes.create(await specOf(name))).toEqual({ id: podName(name), created: false });
    const pod = await cluster.core.readNamespacedPod({ namespace, name: podName(name) });
    const spec = pod.spec!;
    expect(spec.automountServiceAccountToken).toBe(false);
    expect([spec.hostNetwork, spec.hostPID, spec.hostIPC].map(Boolean)).toEqual([false, false, false]);
    expect(spec.securityContext).toEqual({ runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } });
    const [c] = spec.containers;
    expect(c.securityContext).toEqual({
      runAsUser: 1000,
      runAsGroup: 1000,
      allowPrivilegeEscalation: false,
      privileged: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
    expect(c.resources!.limits).toEqual({ cpu: '1', memory: String(512 * MiB) });
    // Only the egress folder from the node; no service account token volume was added.
    expect(spec.volumes!.map((v) => v.name).sort()).toEqual(['disk', 'egress', 'tmp']);
    expect(pod.status!.qosClass).toBe('Burstable');
    const info = await sandboxes.info(name);
    expect(info).toMatchObject({ id: podName(name), name, labels: { [LABELS.session]: name } });
    expect((await sandboxes.list('k8s-test')).map((s) => s.name)).toContain(name);
    expect((await sandboxes.list('another-host')).map((s) => s.name)).not.toContain(name);
  });

  test('inside: uid 1000, read-only system folders, loopback alone and no route, no token, /tmp of its size', async () => {
    const probe = await sh(
      name,
      'id -u; for f in /x /etc/x /usr/x /var/x; do touch $f 2>/dev/null && echo "wrote $f" || echo "refused $f"; done; ' +
        'touch /workspace/ok /tmp/ok ~/ok && echo writable; ls /sys/class/net; tail -n +2 /proc/net/route | wc -l; ' +
        'ls /var/run/secrets 2>&1 | head -1; grep CapEff /proc/self/status; df -k /tmp | tail -1 | awk "{print \\$2}"; ' +
        'git config --get-all safe.directory',
    );
    expect(probe.code).toBe(0);
    expect(probe.out.trim().split('\n')).toEqual([
      '1000',
      'refused /x',
      'refused /etc/x',
      'refused /usr/x',
      'refused /var/x',
      'writable',
      'lo',
      '0',
      "ls: cannot access '/var/run/secrets': No such file or directory",
      'CapEff:\t0000000000000000',
      String(16 * 1024),
      '/workspace',
    ]);
  });
});

test('a snapshot: /workspace as an archive on the node, a pod made from it starts with it, removable once unused', async () => {
  const tag = `drydock-snapshot-k8s-test:${randomBytes(4).toString('hex')}`;
  await withSandbox(`drydock-snapsrc-${randomBytes(2).toString('hex')}`, async (source) => {
    await sh(source, 'mkdir -p sub && echo kept > sub/file && ln -s sub/file link && chmod 700 sub');
    const made = await sandboxes.imageFromWorkspace(source, { baseImage: image, tag, labels: { 'drydock.x': '1' } });
    expect(made.sizeBytes).toBeGreaterThan(0);
    expect(await sandboxes.imageFromWorkspace(source, { baseImage: image, tag, labels: {} })).toEqual(made);
  });
  expect(await sandboxes.image(tag)).toMatchObject({
    id: expect.stringMatching(/^sha256:/),
    labels: { 'drydock.x': '1' },
  });
  expect(await sandboxes.image('drydock-snapshot-k8s-test:missing')).toBeUndefined();
  expect((await sandboxes.images(['drydock-snapshot-k8s-test'])).map((i) => i.tags)).toEqual([[tag]]);
  await withSandbox(
    `drydock-fromsnap-${randomBytes(2).toString('hex')}`,
    async (copy) => {
      expect((await sh(copy, 'cat link; stat -c "%a %u" sub; ls -A')).out).toBe('kept\n700 1000\nlink\nsub\n');
      expect(await sandboxes.removeImage(tag)).toBe('in_use');
    },
    { image: tag },
  );
  expect(await sandboxes.removeImage(tag)).toBe('removed');
  expect(await sandboxes.removeImage(tag)).toBe('gone');
});

test('a pod that cannot start is deleted when its start time is up, naming why and where to look', async () => {
  const within = (node: string) => new KubernetesProvider({ ...sandboxes.settings, node, startTimeoutMs: 15_000 });
  // Placed on its node, where the kubelet cannot mount a host folder that is not there.
  const unmountable = `drydock-nomount-${randomBytes(2).toString('hex')}`;
  const missing = path.join(dir, 'no-such-folder');
  // A node the cluster does not have: the scheduler never places it.
  const unplaced = `drydock-noplace-${randomBytes(2).toString('hex')}`;
  const [stuck, unscheduled] = await Promise.allSettled([
    within('localhost').create(await specOf(unmountable, { mounts: [{ source: missing, target: '/opt/x' }] })),
    within('no-such-node').create(await specOf(unplaced)),
  ]);
  expect(stuck.status === 'rejected' && stuck.reason).toBeInstanceOf(SandboxDidNotStart);
  expect((stuck as PromiseRejectedResult).reason.message).toMatch(
    new RegExp(
      `^the pod ${unmountable} did not start within 15 s \\(ContainerCreating; .*FailedMount: .*${missing}.*\\): ` +
        `node localhost has not started it: see its events \\(kubectl describe pod ${unmountable} -n ${namespace}\\)`,
    ),
  );
  expect(unscheduled.status === 'rejected' && unscheduled.reason).toBeInstanceOf(SandboxDidNotStart);
  expect((unscheduled as PromiseRejectedResult).reason.message).toMatch(
    new RegExp(
      `^the pod ${unplaced} did not start within 15 s \\(0/1 nodes are available: .*NodeAffinity.*\\): ` +
        'the scheduler did not place it on node no-such-node: see kubectl describe node no-such-node',
    ),
  );
  expect(await sandboxes.exists(unmountable)).toBe(false);
  expect(await sandboxes.exists(unplaced)).toBe(false);
});

test('what the provider cannot do, it refuses saying so', async () => {
  await expect(sandboxes.create({ ...(await specOf('drydock-late-browser')), companionOf: 'x' })).rejects.toThrow(
    /a pod's containers are fixed when it is created/,
  );
  await expect(sandboxes.layerImage()).rejects.toThrow(/builds no images/);
  expect(sandboxes.capabilities).toEqual({
    hostFolders: true,
    buildsImages: false,
    lateCompanions: false,
  });
  // A service's container is made with its pod; the pod of a sandbox made without one has none to start.
  await withSandbox(`drydock-nosvc-${randomBytes(2).toString('hex')}`, async (name) => {
    await expect(sandboxes.services.start({ ...dbService(name), image })).rejects.toThrow(
      /was made without service db: a pod's containers are fixed when it is created/,
    );
  });
  // It keeps no service's data in a snapshot: the part is absent (a snapshot build of such a repo is refused).
  expect('captureData' in sandboxes.services).toBe(false);
});

/** PostgreSQL beside a sandbox, as sandbox/services.ts makes its container. */
function dbService(sandbox: string): ServiceContainerSpec {
  return {
    sandbox,
    service: 'db',
    image: postgres,
    labels: {},
    env: ['POSTGRES_HOST_AUTH_METHOD=trust'],
    folders: [{ path: '/var/lib/postgresql/data', from: { image: postgres, path: '/var/lib/postgresql/data' } }],
    healthcheck: { test: ['pg_isready', '-h', '127.0.0.1'], intervalMs: 1_000, timeoutMs: 10_000, retries: 3 },
    cpus: 1,
    memoryBytes: 256 * MiB,
    pids: 128,
  };
}

test("a service whose container cannot be made fails the pod's start at once, naming it; no pod is left", async () => {
  const name = `drydock-badsvc-${randomBytes(2).toString('hex')}`;
  const missing = { ...dbService(name), image: 'drydock-no-such-service-image:1', folders: [] };
  await expect(sandboxes.create(await specOf(name, { services: [missing] }))).rejects.toThrow(
    new RegExp(`^the pod of ${name} cannot run: container svc-db(-fill(-\\d+)?)?: ErrImageNeverPull`),
  );
  expect(await sandboxes.exists(name)).toBe(false);
  // Never root (T4-M4): an image not drydock's own, given no numeric user, runs only with a numeric USER of its
  // own; here the filler of its folder runs PostgreSQL's image, whose USER is a name, as that service's user.
  const named = { ...dbService(name), image: 'drydock-no-such-service-image:1' };
  await expect(sandboxes.create(await specOf(name, { services: [named] }))).rejects.toThrow(
    new RegExp(`^the pod of ${name} cannot run: container svc-db-fill: CreateContainerConfigError: .*non-numeric user`),
  );
  expect(await sandboxes.exists(name)).toBe(false);
});

// ---------------------------------------------------------------- sessions with pods for sandboxes

describe("a session with a service: PostgreSQL built here, a container of the sandbox's pod", () => {
  let stack: TestStack;
  let repo: { url: string };
  beforeAll(async () => {
    clusterStarted();
    repo = await makeFixtureRepo({ 'pgq.js': PG_CLIENT, '.drydock/config.yaml': configServices({ postgres }) });
    stack = await startStack(k8sWorker());
  });
  afterAll(async () => {
    await stack?.stop();
  });

  test('a step creates a table in it on localhost and reads it back; the service is hardened, logged, and goes with the pod', async () => {
    const id = newSessionId('k8s-service');
    const handle = await startSession(
      stack,
      id,
      scriptedSession(repo.url, 'a table', [
        `node pgq.js "create table pod_rows (name text primary key); insert into pod_rows values ('from-a-pod')"`,
        'node pgq.js "select name from pod_rows" > rows.txt && cat rows.txt',
      ]),
    );
    const st = await waitForStatus(handle, inPhase('awaiting_approval'), 240_000);
    const output = (n: number) =>
      st.timeline
        .filter((t) => t.name.startsWith(`step ${n}`))
        .at(-1)
        ?.outputTail?.trim();
    expect([output(1), output(2)]).toEqual(['', 'from-a-pod']);
    const pod = podName(sandboxName(id));
    const spec = (await cluster.core.readNamespacedPod({ namespace, name: pod })).spec!;
    expect(spec.containers.map((c) => c.name)).toEqual(['sandbox', 'svc-db']);
    const db = spec.containers[1];
    // Never root: drydock's own image runs as its user's known ids (its USER is a name the kubelet cannot verify).
    expect(db.securityContext).toEqual({
      runAsNonRoot: true,
      runAsUser: 100,
      runAsGroup: 102,
      allowPrivilegeEscalation: false,
      privileged: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
    expect(db.resources!.limits).toEqual({ cpu: '1', memory: String(256 * MiB) });
    // From inside: its image's user (not root), no capabilities, a read-only root, its data folder its own.
    const inside = await execInPod(cluster.kubeconfig, { namespace, name: pod, container: 'svc-db' }, [
      'sh',
      '-c',
      'id -un; grep CapEff /proc/1/status; touch /x 2>/dev/null && echo wrote || echo refused; stat -c %U:%a "$PGDATA"',
    ]);
    expect(inside.stdout.trim().split('\n')).toEqual([
      'postgres',
      'CapEff:\t0000000000000000',
      'refused',
      'postgres:700',
    ]);
    expect(await sandboxes.services.list(sandboxName(id))).toEqual(['db']);
    expect(await sandboxes.services.log(sandboxName(id), 'db')).toMatch(/ready to accept connections/);
    await handle.signal(reject, { action: 'push', by: 'tester', comment: 'seen' });
    await handle.result();
    expect((await sandboxes.list()).filter((s) => s.labels[LABELS.session] === id)).toEqual([]);
  }, 300_000);

  test('a repo whose dev container needs a build is refused before anything is built, saying what to do (no build registry)', async () => {
    const built = await makeFixtureRepo({
      '.devcontainer/devcontainer.json': JSON.stringify({ build: { dockerfile: 'Dockerfile' } }),
      '.devcontainer/Dockerfile': 'FROM debian:trixie-slim\nRUN apt-get update\n',
    });
    const id = newSessionId('k8s-build');
    const handle = await startSession(stack, id, scriptedSession(built.url, 'needs a build', 'true'));
    const final = await waitForStatus(handle, inPhase('failed'), 120_000);
    expect(final.error).toContain(
      'the repo declares its environment (.devcontainer/devcontainer.json), and the kubernetes sandbox provider ' +
        'builds no images and runs none but DRYDOCK_BASE_IMAGE (no dev container, Dockerfile, feature or --environment image:<ref>): ' +
        "give the worker a registry its nodes pull from (DRYDOCK_K8S_BUILD_REGISTRY), where its Docker engine's isolated builder pushes the repo's environment, " +
        "or run the repo on that image with 'drydock repo add <url> --environment base'",
    );
    expect(final.error).toContain('DRYDOCK_SANDBOX_PROVIDER=docker');
    await expect(handle.result()).rejects.toThrow();
    expect((await sandboxes.list()).filter((s) => s.labels[LABELS.session] === id)).toEqual([]);
  }, 180_000);
});

describe("a repo whose Dockerfile has a RUN step: built by the isolated builder on the worker's Docker engine, pushed to a registry, run by digest", () => {
  let stack: TestStack;
  let registry: ImageRegistry;
  beforeAll(async () => {
    clusterStarted();
    // Debian's docker-registry on loopback: the worker's engine pushes to it, the node's containerd pulls from it.
    registry = await ImageRegistry.start();
    stack = await startStack({ ...k8sWorker(), DRYDOCK_K8S_BUILD_REGISTRY: `${registry.host}/drydock` });
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
    await registry?.stop();
  });

  test("the session's step sees what RUN made; the pod runs the pushed image by digest; a compose dev container stays refused", async () => {
    // This run's own content: built now, not an environment image an earlier run left on the engine.
    const run = randomBytes(4).toString('hex');
    const repo = await makeFixtureRepo({
      '.devcontainer/devcontainer.json': JSON.stringify({ build: { dockerfile: 'Dockerfile' } }),
      '.devcontainer/Dockerfile': [
        'FROM debian:trixie-slim',
        // As root in the builder: a file under /etc and a program on PATH, neither writable by the sandbox user.
        `RUN echo "made by RUN ${run} as uid $(id -u)" > /etc/drydock-run-proof && printf \'#!/bin/sh\\necho tool from RUN\\n\' > /usr/local/bin/run-tool && chmod 755 /usr/local/bin/run-tool`,
        '',
      ].join('\n'),
    });
    const id = newSessionId('k8s-dockerfile');
    const step =
      'cat /etc/drydock-run-proof > proof.txt && run-tool >> proof.txt && id -u >> proof.txt && cat proof.txt';
    const handle = await startSession(stack, id, scriptedSession(repo.url, 'what RUN made', step));
    const st = await waitForStatus(handle, inPhase('awaiting_approval'), 1_200_000);
    const output = st.timeline
      .filter((t) => t.name.startsWith('step 1'))
      .at(-1)
      ?.outputTail?.trim();
    expect(output).toBe(`made by RUN ${run} as uid 0\ntool from RUN\n1000`);
    // The pod's image: the registry's, by the digest the push returned, pulled by the node (the worker's default is Never).
    const pod = (await cluster.core.readNamespacedPod({ namespace, name: podName(sandboxName(id)) })).spec!;
    const sandbox = pod.containers.find((c) => c.name === 'sandbox')!;
    const ref = new RegExp(
      `^${registry.host.replace(/\./g, '\\.')}/drydock/drydock-env-[a-z0-9-]+@(sha256:[0-9a-f]{64})$`,
    );
    expect(sandbox.image).toMatch(ref);
    expect(sandbox.imagePullPolicy).toBe('IfNotPresent');
    const [, name, digest] = /^[^/]+\/(.+)@(sha256:.+)$/.exec(sandbox.image!)!;
    const manifest = await fetch(`http://${registry.host}/v2/${name}/manifests/${digest}`, {
      method: 'HEAD',
      headers: { accept: 'application/vnd.docker.distribution.manifest.v2+json' },
    });
    expect(manifest.status).toBe(200);
    await handle.signal(reject, { action: 'push', by: 'tester', comment: 'seen' });
    await handle.result();
    expect((await sandboxes.list()).filter((s) => s.labels[LABELS.session] === id)).toEqual([]);

    // A snapshot build: setup's /workspace archived on the node over the same pushed image; a session from it runs both.
    await addRepo(stack.client, stack.config, repo.url, { every: '1h', setup: 'echo setup ran > setup.txt' });
    try {
      const built = await stack.client.workflow.execute('refreshSnapshot', {
        workflowId: newSessionId('k8s-dockerfile-snap'),
        taskQueue: stack.config.DRYDOCK_TASK_QUEUE,
        args: [{ repo: repo.url }],
      });
      expect(built).toMatchObject({ status: 'ready' });
      const fromSnapshot = newSessionId('k8s-dockerfile-snap');
      const again = await startSession(
        stack,
        fromSnapshot,
        scriptedSession(repo.url, 'from the snapshot', `cat setup.txt && ${step}`),
      );
      const st2 = await waitForStatus(again, inPhase('awaiting_approval'), 600_000);
      const output2 = st2.timeline
        .filter((t) => t.name.startsWith('step 1'))
        .at(-1)
        ?.outputTail?.trim();
      expect(output2).toBe(`setup ran\nmade by RUN ${run} as uid 0\ntool from RUN\n1000`);
      const pod2 = await cluster.core.readNamespacedPod({ namespace, name: podName(sandboxName(fromSnapshot)) });
      expect(pod2.metadata!.labels![POD_LABELS.snapshot]).toBeTruthy();
      expect(pod2.spec!.containers.find((c) => c.name === 'sandbox')!.image).toBe(sandbox.image);
      await again.signal(reject, { action: 'push', by: 'tester', comment: 'seen' });
      await again.result();
    } finally {
      await deleteSnapshotSchedules(stack.client, repo.url, [stack.config.DRYDOCK_HOST_ID]);
      // The environment image this test built, on the engine under both its names (the registry goes with its folder).
      const local = name.slice(name.lastIndexOf('/') + 1);
      const tags = execFileSync('docker', ['images', '--format', '{{.Repository}}:{{.Tag}}'])
        .toString()
        .split('\n')
        .filter((t) => t.startsWith(`${local}:`) || t.startsWith(`${registry.host}/${name}:`));
      if (tags.length) execFileSync('docker', ['rmi', ...tags]);
    }

    // What still cannot work here is refused before anything is built, naming what to do.
    const compose = await makeFixtureRepo({
      '.devcontainer/devcontainer.json': JSON.stringify({ dockerComposeFile: 'compose.yaml', service: 'dev' }),
      '.devcontainer/compose.yaml': 'services:\n  dev:\n    build: .\n',
      '.devcontainer/Dockerfile': 'FROM debian:trixie-slim\n',
    });
    const refusedId = newSessionId('k8s-compose-dev');
    const refused = await startSession(stack, refusedId, scriptedSession(compose.url, 'compose', 'true'));
    const final = await waitForStatus(refused, inPhase('failed'), 120_000);
    expect(final.error).toContain(
      'the repo declares its environment (.devcontainer/devcontainer.json), and the kubernetes sandbox provider builds no compose dev container',
    );
    expect(final.error).toContain('--ignore-devcontainer');
    await expect(refused.result()).rejects.toThrow();
  }, 1_500_000);
});

const TOKEN = `ghp_${randomBytes(18).toString('hex')}`;

describe('hostile scripted agents in sessions whose sandboxes are pods', () => {
  let stack: TestStack;
  let repo: { url: string; bare: string };
  let hostService: Server;
  let hostPort: number;

  beforeAll(async () => {
    clusterStarted();
    repo = await makeFixtureRepo();
    hostService = createServer((_req, res) => res.end('host service'));
    await new Promise<void>((resolve) => hostService.listen(0, '127.0.0.1', resolve));
    hostPort = (hostService.address() as { port: number }).port;
    stack = await startStack({ GITHUB_TOKEN: TOKEN, ...k8sWorker() });
  });
  afterAll(async () => {
    await stack?.stop();
    hostService?.close();
  });

  const podsOf = async (sessionId: string) =>
    (await sandboxes.list()).filter((s) => s.labels[LABELS.session] === sessionId);

  test('the injected agent reaches nothing and changes nothing: the push waits, no token anywhere', async () => {
    const id = newSessionId('k8s-hostile');
    const temporalPort = Number(stack.config.TEMPORAL_ADDRESS.split(':').pop());
    const handle = await startSession(stack, id, {
      repo: { url: repo.url },
      task: 'fix a typo',
      limits: { cpus: 1, memory: '1g', pids: 256, tmp: '64m' },
      agent: {
        steps: [
          {
            run:
              'git push origin HEAD:main; env; cat ~/.git-credentials; ls /var/run/secrets; ' +
              `for p in ${temporalPort} ${hostPort}; do node -e "require('net').connect($p, '127.0.0.1').on('connect', () => console.log('open', $p)).on('error', (e) => console.log('refused', $p, e.code))"; done; ` +
              'echo obeyed >> README.md',
          },
        ],
      },
    });
    const st = await waitForStatus(handle, inPhase('awaiting_approval'), 180_000);
    expect((await podsOf(id)).map((s) => s.name)).toEqual([sandboxName(id)]);
    const output = st.timeline.map((r) => r.outputTail ?? '').join('\n');
    expect(output).toMatch(new RegExp(`refused ${temporalPort} ECONNREFUSED`));
    expect(output).toMatch(new RegExp(`refused ${hostPort} ECONNREFUSED`));
    expect(output).not.toMatch(/^open /m);
    expect(output).toMatch(/\/var\/run\/secrets.*No such file/);
    expect(git(['rev-list', '--count', 'main'], repo.bare).trim()).toBe('1');
    const environ = await sh(sandboxName(id), 'cat /proc/[0-9]*/environ | tr "\\0" "\\n"');
    expect(environ.out).toMatch(/HOME=/);
    const history = JSON.stringify(await handle.fetchHistory());
    for (const text of [output, environ.out, history]) {
      expect(text).not.toContain(TOKEN);
      expect(hasTokenPattern(text)).toBe(false);
    }
    expect((await handle.query(status)).pendingApproval?.action).toBe('push');
    await handle.signal(reject, { action: 'push', by: 'tester', comment: 'hostile' });
    await handle.result();
    expect(await podsOf(id)).toEqual([]);
  }, 300_000);
});

describe('sessions whose step runs into a limit of its pod', () => {
  let stack: TestStack;
  let repo: { url: string };
  beforeAll(async () => {
    clusterStarted();
    repo = await makeFixtureRepo();
    stack = await startStack(k8sWorker());
  });
  afterAll(async () => {
    await stack?.stop();
  });

  /** Runs one step that hits a limit; the session fails, naming it, and its pod is gone. */
  async function failedOn(name: string, limits: Record<string, unknown>, run: string, timeout = '2m') {
    const id = newSessionId(`k8s-${name}`);
    const handle = await startSession(stack, id, {
      repo: { url: repo.url },
      task: name,
      limits,
      agent: { steps: [{ run, timeout }] },
    });
    const final = await waitForStatus(handle, inPhase('failed'), 180_000);
    await expect(handle.result()).rejects.toThrow();
    expect((await sandboxes.list()).filter((s) => s.labels[LABELS.session] === id)).toEqual([]);
    return { final, step: final.timeline.find((r) => r.name.startsWith('step 1'))! };
  }

  test('a memory hog is OOM-killed and reported as out of memory', async () => {
    const { final, step } = await failedOn(
      'memhog',
      { memory: '128m' },
      `node -e "const a = []; for (;;) a.push(Buffer.alloc(1 << 20, 1))"`,
    );
    expect(final.error).toMatch(/ran out of memory \(limit 128m\)$/);
    expect(step).toMatchObject({ failure: 'oom', exitCode: 137 });
  }, 240_000);

  test('filling /tmp stops at its size and is reported as a full disk', async () => {
    const { final, step } = await failedOn(
      'filltmp',
      { tmp: '16m' },
      'dd if=/dev/zero of=/tmp/fill bs=1M count=200; code=$?; echo "size $(du -k /tmp/fill | cut -f1)"; exit $code',
    );
    expect(final.error).toMatch(
      /filled the disk \(No space left on device; \/workspace and home are limited to 10g, \/tmp to 16m\)$/,
    );
    expect(step.failure).toBe('disk_full');
    expect(Number(/size (\d+)/.exec(step.outputTail!)![1])).toBeLessThanOrEqual(16 * 1024);
  }, 240_000);

  test('a step past its time limit is killed and reported as timed out', async () => {
    const { final, step } = await failedOn('slow', {}, 'sleep 600', '2s');
    expect(final.error).toMatch(/^step 1: sleep 600 timed out \(limit 2s\)$/);
    expect(step).toMatchObject({ failure: 'timeout', exitCode: 124 });
  }, 240_000);

  test("a fork bomb stops at the node's limit of a pod's processes, and the host stays responsive", async () => {
    const { step } = await failedOn(
      'forkbomb',
      { pids: 64 },
      'bomb() { bomb | bomb & }; bomb; sleep 2; echo survived',
      '15s',
    );
    expect(execFileSync('sh', ['-c', 'echo alive']).toString()).toBe('alive\n');
    expect(step.failure).toBe('pids');
  }, 240_000);
});

describe('the runStep activity in a pod: the egress proxy, secrets, stray processes, forged answers, checkpoints', () => {
  const sessionId = newSessionId('k8s-egress');
  const requests: string[] = [];
  const logLines: string[] = [];
  const log = pino({ level: 'trace' }, { write: (line: string) => void logLines.push(line) });
  const MODEL_KEY = `sk-test-${randomBytes(16).toString('hex')}`;
  const env = new MockActivityEnvironment();
  let standIn: Server;
  let standInPort: number;
  let tunnelStandIn: Server;
  let tunnelPort: number;
  let db: Database;
  let activities: ReturnType<typeof createActivities>;
  let sandbox: string;
  let baseCommit: string;
  let dataDir: string;
  const provisionInput = {
    sessionId,
    repo: { url: '' },
    limits: { cpus: 1, memoryBytes: 512 * MiB, pids: 256, tmpBytes: 64 * MiB, diskBytes: 1024 * MiB },
    expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
  };
  const listen = async (name: string) => {
    const server = createServer((req, res) => {
      requests.push(`${name} ${req.method} ${req.url}`);
      res.end(`${name} ok`);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { server, port: (server.address() as { port: number }).port };
  };

  beforeAll(async () => {
    clusterStarted();
    ({ server: standIn, port: standInPort } = await listen('stand-in'));
    ({ server: tunnelStandIn, port: tunnelPort } = await listen('tunnel'));
    dataDir = await mkdtemp(path.join(tmpdir(), 'drydock-k8s-hard-'));
    own(dataDir);
    const config = testConfig();
    db = await openDatabase(config);
    const redactor = new Redactor([TOKEN, MODEL_KEY]);
    activities = createActivities(
      probeDeps({ sandboxes, dataDir, config, db, redactor, secrets: { MODEL_KEY }, token: TOKEN, log }),
    );
    provisionInput.repo.url = (await makeFixtureRepo()).url;
    const created: Sandbox = await env.run(activities.provisionSandbox, provisionInput);
    sandbox = created.name;
    baseCommit = created.baseCommit;
    await step('write-probe', '', { step: { write: { path: 'probe.js', content: EGRESS_PROBE } } });
  });
  afterAll(async () => {
    try {
      if (activities) await env.run(activities.destroySandbox, { sessionId });
    } finally {
      await db?.close();
      standIn?.close();
      tunnelStandIn?.close();
    }
  });

  const step = (key: string, run: string, extra: Record<string, unknown> = {}): Promise<StepResult> =>
    env.run(activities.runStep, {
      sandbox,
      sessionId,
      key,
      nonce: randomBytes(16).toString('hex'),
      timeoutMs: 60_000,
      step: { run, timeout: '1m' },
      ...extra,
    });

  test('allowlisted stand-in reachable through the socket from the node; everything else refused, and logged', async () => {
    const rules: EgressRule[] = [
      { host: '127.0.0.1', port: standInPort, methods: ['GET', 'HEAD'] },
      { host: '127.0.0.1', port: tunnelPort },
    ];
    const result = await step('egress', `node probe.js ${standInPort} ${tunnelPort} 5432`, { egress: rules });
    expect(result.outputTail.trim().split('\n')).toEqual([
      'proxy env http://127.0.0.1:3128',
      'GET allowed 200 stand-in ok',
      'POST on a GET-only rule 403 drydock egress refused: method POST not allowed for 127.0.0.1 (allowed: GET, HEAD)',
      'other host port 403 drydock egress refused: port 5432 not allowed for 127.0.0.1',
      'unlisted name 403 drydock egress refused: example.com is not on the allowlist',
      'private range 403',
      'CONNECT on a GET-only rule 403',
      'CONNECT allowed 200 tunnel ok',
    ]);
    expect(requests.sort()).toEqual(['stand-in GET /hello', 'tunnel GET /through-tunnel']);
    expect(result.egress).toMatchObject({ allowed: 2, refused: 5 });
    const none = await step('no-egress', `node probe.js ${standInPort} ${tunnelPort} 5432 direct`);
    expect(none.outputTail.trim()).toBe('proxy env undefined\nGET failed ECONNREFUSED');
    expect(requests.filter((r) => r.includes('/hello'))).toHaveLength(1);
  });

  test('a granted secret is in its step only, scrubbed from what leaves, and in no process afterwards', async () => {
    const granted = await step('secret', 'echo "key is $MODEL_KEY"; test -n "$MODEL_KEY"', { secrets: ['MODEL_KEY'] });
    expect([granted.exitCode, granted.outputTail.trim()]).toEqual([0, 'key is [redacted]']);
    const after = await sh(sandbox, 'cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline | tr "\\0" "\\n"; env');
    expect(after.out).not.toContain(MODEL_KEY);
    expect((await step('no-secret', 'echo "key is [$MODEL_KEY]"')).outputTail.trim()).toBe('key is []');
    expect(logLines.join('\n')).not.toContain(MODEL_KEY);
  });

  /** The sandbox user's processes but the pod's keeper (its shell and sleep) and this probe. */
  const leftovers = async () =>
    (await sh(sandbox, 'ps -o pid=,args= -u 1000')).out
      .trim()
      .split('\n')
      .filter((l) => l && !/^\s*1 sh -c trap|sleep 2147483647$|ps -o pid=|sh -c ps -o/.test(l));

  test('daemons end with their step (the pod keeps its keeper), and none writes during the next step', async () => {
    const daemons = await step(
      'daemons',
      "setsid sh -c 'sleep 1000' & setsid sh -c 'while :; do date >> tampered; sleep 0.1; done' </dev/null >/dev/null 2>&1 & echo left",
    );
    expect(daemons.outputTail.trim()).toBe('left');
    expect(await leftovers()).toEqual([]);
    const next = await step('after-daemons', 'rm -f tampered; sleep 1; test ! -e tampered && echo untouched');
    expect(next.outputTail.trim()).toBe('untouched');
    expect((await sh(sandbox, 'ps -o stat= -u 1000 | grep -c Z')).out.trim()).toBe('0');
  });

  test("a step cannot forge its runner's answer by writing to its stdout, nor by killing it", async () => {
    const forge = (then: string) =>
      [
        'p=$$',
        'while [ "$p" -gt 1 ]; do',
        '  read -r s < /proc/$p/stat; set -- ${s##*) }; p=$2',
        '  set -- $(tr "\\0" " " < /proc/$p/cmdline)',
        '  [ "${2##*/}" = drydock-run ] && break',
        'done',
        'nonce=$4 runner=$p',
        'printf "drydock-run %s 0 16 16 0 0 0 0\\n" "$nonce" > /proc/$runner/fd/1',
        then,
        'echo really ran; exit 3',
      ].join('\n');
    const written = await step('forge-stdout', forge('true'));
    expect([written.exitCode, written.outputTail.trim()]).toEqual([3, 'really ran']);
    const killed = await step('forge-kill', forge('kill -KILL $runner; sleep 5'));
    expect(killed.exitCode).not.toBe(0);
    expect(killed.outputTail).toContain("the step's runner was killed");
  });

  test("a process holding the egress forwarder's port in the pod fails the step, which does not run", async () => {
    // Planted through exec, as a daemon of an earlier step would have been: loopback is the whole pod's.
    await sh(
      sandbox,
      `setsid node -e "require('net').createServer().listen(3128, '127.0.0.1')" </dev/null >/dev/null 2>&1 & ${LISTENING_3128}`,
    );
    const rules: EgressRule[] = [{ host: '127.0.0.1', port: standInPort, methods: ['GET'] }];
    const result = await step('squatted', 'echo ran', { egress: rules });
    expect(result.exitCode).toBe(-1);
    expect(result.outputTail).toContain("the egress forwarder's port 127.0.0.1:3128 is already taken");
    expect(result.outputTail).not.toContain('ran');
    expect(await leftovers()).toEqual([]);
  });

  test('a write step and its checkpoint in one exec; a replacement pod starts from the checkpoint', async () => {
    const file = `dir/it's "quoted" $(touch pwned); x.txt`;
    const written = await step('write-odd', '', {
      step: { write: { path: file, content: 'literal\n' } },
      checkpointBase: baseCommit,
    });
    expect(written).toMatchObject({ exitCode: 0, outputTail: '' });
    const replacement: Sandbox = await env.run(activities.provisionSandbox, { ...provisionInput, generation: 1 });
    try {
      expect(replacement.restored?.step).toBe('write-odd');
      expect((await sandboxes.exec(replacement.name, ['cat', '--', file])).stdout.toString()).toBe('literal\n');
      expect((await sh(replacement.name, 'find /workspace -name pwned | wc -l')).out.trim()).toBe('0');
    } finally {
      await env.run(activities.destroySandbox, { sessionId, generation: 1, replaced: true });
    }
  });
});

describe("the provider's start checks on this cluster (issue 47: a missing namespace showed at the first session)", () => {
  const missing = `drydock-t-missing-${randomBytes(3).toString('hex')}`;
  const need = { baseImage: image, baseImageSetting: 'DRYDOCK_BASE_IMAGE' };

  test('a worker whose namespace exists and whose identity may make pods there starts', async () => {
    const provider = await startHostProvider(testConfig(k8sWorker()), need);
    expect(provider.name).toBe('kubernetes');
  });

  test('a namespace that does not exist stops the worker at start, in one line naming DRYDOCK_K8S_NAMESPACE', async () => {
    const config = testConfig({ ...k8sWorker(), DRYDOCK_K8S_NAMESPACE: missing });
    const err = await startHostProvider(config, need).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProviderCheckFailed);
    expect((err as Error).message).toBe(
      `DRYDOCK_K8S_NAMESPACE: namespace "${missing}" does not exist; create it ` +
        '(kubectl apply -f infra/k8s/pods/sandboxes.yaml makes drydock-sandboxes) or name one that does',
    );
  });

  test("the provider's own API errors are one line, not the client's dump with its headers", async () => {
    const elsewhere = new KubernetesProvider({ ...sandboxes.settings, namespace: missing });
    const err = await elsewhere
      .create(await specOf(`drydock-missing-${randomBytes(2).toString('hex')}`))
      .catch((e) => e);
    expect((err as Error).message).toBe(`Kubernetes API 404 NotFound: namespaces "${missing}" not found`);
    expect(err).toMatchObject({ code: 404 });
  });
});

describe('a session whose pod cannot start', () => {
  let stack: TestStack;
  let repo: { url: string };
  beforeAll(async () => {
    clusterStarted();
    repo = await makeFixtureRepo();
    stack = await startStack({ ...k8sWorker(), DRYDOCK_K8S_NODE: 'no-such-node', DRYDOCK_K8S_START_TIMEOUT: 15_000 });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  test('fails once its start time is up, naming why and where to look, with no retry and no pod left', async () => {
    const id = newSessionId('k8s-nostart');
    const handle = await startSession(stack, id, {
      repo: { url: repo.url },
      task: 'never starts',
      agent: { steps: [{ run: 'true' }] },
    });
    const final = await waitForStatus(handle, inPhase('failed'), 120_000);
    expect(final.error).toMatch(
      new RegExp(
        `^provisionSandbox: kubernetes: the pod ${sandboxName(id)} did not start within 15 s \\(0/1 nodes are available: .*NodeAffinity.*\\): ` +
          'the scheduler did not place it on node no-such-node: see kubectl describe node no-such-node',
      ),
    );
    await expect(handle.result()).rejects.toThrow();
    const attempts = (await handle.fetchHistory()).events!.filter(
      (e) => e.activityTaskStartedEventAttributes && e.activityTaskStartedEventAttributes.attempt !== 1,
    );
    expect(attempts).toEqual([]);
    expect((await sandboxes.list()).filter((s) => s.labels[LABELS.session] === id)).toEqual([]);
  });
});

/** A worker's configuration whose sandboxes are pods of the run's cluster, in this file's namespace. */
function k8sWorker() {
  return {
    DRYDOCK_SANDBOX_PROVIDER: 'kubernetes' as const,
    DRYDOCK_K8S_KUBECONFIG: cluster.kubeconfigFile,
    DRYDOCK_K8S_NAMESPACE: namespace,
    DRYDOCK_K8S_NODE: 'localhost',
    DRYDOCK_K8S_IMAGE_PULL_POLICY: 'Never' as const,
    DRYDOCK_K8S_START_TIMEOUT: START_TIMEOUT_MS,
  };
}

describe("VS Code in a worker's sandbox pod: code-server from its read-only hostPath mount, over drydock-port execs", () => {
  const sessionId = newSessionId('k8s-editor');
  const env = new MockActivityEnvironment();
  let db: Database;
  let activities: ReturnType<typeof createActivities>;
  let sandbox: string;
  let editorDir: string;

  beforeAll(async () => {
    clusterStarted();
    // The editor the worker mounts: built once per host (cached in .tools/code-server).
    const built = await promisify(execFile)('bash', [path.join(__dirname, '../../infra/code-server.sh')], {
      timeout: 20 * 60_000,
    });
    editorDir = await realpath(built.stdout.trim().split('\n').pop()!);
    const dataDir = await mkdtemp(path.join(tmpdir(), 'drydock-k8s-editor-'));
    own(dataDir);
    const config = testConfig();
    db = await openDatabase(config);
    const log = pino({ level: 'silent' });
    const deps = probeDeps({
      sandboxes,
      dataDir,
      config,
      db,
      redactor: new Redactor([TOKEN]),
      secrets: {},
      token: TOKEN,
      log,
    });
    activities = createActivities({ ...deps, editorDir });
    const created: Sandbox = await env.run(activities.provisionSandbox, {
      sessionId,
      repo: { url: (await makeFixtureRepo()).url },
      // The editor is a process of the sandbox, in its limits: a Node.js server and its /tmp state.
      limits: { cpus: 1, memoryBytes: 1024 * MiB, pids: 512, tmpBytes: 256 * MiB, diskBytes: 1024 * MiB },
      expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
    });
    sandbox = created.name;
  }, 20 * 60_000);
  afterAll(async () => {
    try {
      if (activities) await env.run(activities.destroySandbox, { sessionId });
    } finally {
      await db?.close();
    }
  });

  /** One GET to the editor through its connections (execs of drydock-port in the pod). */
  const get = (agent: Agent, pathname: string) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request({ agent, path: pathname, headers: { host: `localhost:${EDITOR_PORT}` } }, (res) => {
        let body = '';
        res.on('data', (chunk: Buffer) => (body += chunk.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject).end();
    });
  const editorProcesses = async () =>
    (
      await sh(
        sandbox,
        'for p in /proc/[0-9]*; do [ "${p#/proc/}" = "$$" ] || tr "\\0" " " <$p/cmdline 2>/dev/null; echo; done',
      )
    ).out
      .split('\n')
      .filter((l) => l.includes(`${EDITOR_MOUNT}/`));

  test('it starts in the pod, answers the workbench, cannot be written, and stopping it leaves no process', async () => {
    const pod = await cluster.core.readNamespacedPod({ namespace, name: podName(sandbox) });
    expect(pod.spec!.volumes).toContainEqual(
      expect.objectContaining({ hostPath: { path: editorDir, type: 'Directory' } }),
    );
    expect((await sh(sandbox, `touch ${EDITOR_MOUNT}/x 2>/dev/null && echo wrote || echo refused`)).out).toBe(
      'refused\n',
    );
    const listed = (await sh(sandbox, 'ls -A /workspace')).out;
    const editors = new SessionEditors(sandboxes);
    const { holder, started } = await editors.hold(sessionId, sandbox, 'alice');
    expect(started).toBe(true);
    const page = await get(editors.live(sessionId, 'alice')!.agent, '/?folder=/workspace');
    expect(page.status).toBe(200);
    expect(page.body).toMatch(/workbench/);
    // Its state is in /tmp, none of it in /workspace (not part of the change).
    expect((await sh(sandbox, 'ls -A /workspace')).out).toBe(listed);
    expect((await editorProcesses()).length).toBeGreaterThan(0);
    expect(await editors.release(sessionId, holder)).toBe(true);
    expect(await editorProcesses()).toEqual([]);
  }, 600_000);
});
