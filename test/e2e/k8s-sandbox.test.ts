/**
 * The Kubernetes sandbox provider on the cluster built here
 * (infra/k8s-cluster.sh): a sandbox's pod as the API shows it and as it
 * looks from inside, exec and its streams through the API, copies in,
 * snapshots, a pod deleted mid-command; then hostile scripted agents in
 * sessions run by an in-process worker whose sandboxes are pods (the
 * probes of hardening.test.ts: the injection, the limits, the egress proxy).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { KubernetesProvider } from '../../sandbox/kubernetes/provider';
import { podName } from '../../sandbox/kubernetes/pod';
import { LABELS, SandboxNotFound, type SandboxSpec } from '../../sandbox/provider';
import { hasTokenPattern } from '../../platform/scrub';
import { reject, status } from '../../workflows/api';
import { own } from '../support/leftovers';
import { runCluster, type TestCluster } from '../support/k8s-cluster';
import {
  git,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  startSession,
  startStack,
  waitForStatus,
  type TestStack,
} from '../support/helpers';
import { sandboxName } from '../../sandbox/activities/container';

const image = process.env.DRYDOCK_BASE_IMAGE!;
const MiB = 1024 ** 2;
let cluster: TestCluster;
let sandboxes: KubernetesProvider;
let dir: string;
const namespace = `drydock-t-${randomBytes(3).toString('hex')}`;

beforeAll(async () => {
  cluster = await runCluster([image]);
  await cluster.core.createNamespace({ body: { metadata: { name: namespace } } });
  dir = await mkdtemp(path.join(tmpdir(), 'drydock-k8s-'));
  own(dir);
  sandboxes = new KubernetesProvider({
    kubeconfig: cluster.kubeconfig,
    namespace,
    node: 'localhost',
    imagePullPolicy: 'Never',
    snapshotRoot: path.join(dir, 'snapshots'),
  });
}, 15 * 60_000);

afterAll(async () => {
  const left = await cluster?.core.listNamespacedPod({ namespace });
  await cluster?.core.deleteNamespace({ name: namespace });
  // Each test removes what it made: a pod left is a leak.
  expect(left?.items.map((p) => p.metadata?.name)).toEqual([]);
}, 120_000);

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

describe('a sandbox pod', () => {
  const name = `drydock-Hard_${randomBytes(2).toString('hex')}`;
  beforeAll(async () => {
    await sandboxes.create(await specOf(name));
  });
  afterAll(async () => {
    await sandboxes.destroy(name);
  });

  test('the API shows every hardening setting; a second create is a retry that finds it', async () => {
    expect(await sandboxes.create(await specOf(name))).toEqual({ id: podName(name), created: false });
    const pod = await cluster.core.readNamespacedPod({ namespace, name: podName(name) });
    const spec = pod.spec!;
    expect(spec.automountServiceAccountToken).toBe(false);
    expect([spec.hostNetwork, spec.hostPID, spec.hostIPC].map(Boolean)).toEqual([false, false, false]);
    expect(spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000 });
    expect(spec.securityContext!.seccompProfile).toEqual({ type: 'RuntimeDefault' });
    const [c] = spec.containers;
    expect(c.securityContext).toEqual({
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

  test('exec: stdout and stderr apart, exit codes, stdin, extra environment through stdin and never argv', async () => {
    expect(await sh(name, 'echo out; echo err >&2; exit 3')).toEqual({ code: 3, out: 'out\n', err: 'err\n' });
    const missing = await sandboxes.exec(name, ['no-such-command']);
    expect(missing.exitCode).toBe(127);
    expect(missing.stderr.toString()).toMatch(/not found/);
    const secret = `s3cr3t-${randomBytes(8).toString('hex')}`;
    const value = `a\\b\nc ${secret}`;
    const seen = await sh(name, 'printf "[%s]" "$V"; echo; cat; cat /proc/[0-9]*/cmdline | tr "\\0" " "', {
      env: [`V=${value}`, 'EMPTY='],
      stdin: 'the input\n',
    });
    const [first, second, ...rest] = seen.out.split('\n');
    expect(`${first}\n${second}`).toBe(`[${value}]`);
    expect(rest[0]).toBe('the input');
    expect(rest.slice(1).join('\n')).not.toContain(secret);
  });

  test('output past its cap throws, to memory or to a file; a file gets it all below', async () => {
    const cap = { bytes: MiB, what: 'the test output' };
    await expect(
      sandboxes.exec(name, ['head', '-c', String(2 * MiB), '/dev/zero'], { stdoutCap: cap }),
    ).rejects.toThrow(/the test output is over/);
    const file = path.join(dir, 'out.bin');
    await expect(sandboxes.execToFile(name, ['head', '-c', String(2 * MiB), '/dev/zero'], file, cap)).rejects.toThrow(
      /over/,
    );
    const ok = await sandboxes.execToFile(name, ['head', '-c', String(MiB - 1), '/dev/urandom'], file, cap);
    expect(ok).toMatchObject({ exitCode: 0, bytes: MiB - 1 });
  });

  test('a tar copied in, a helper attached in lines, a shell on a TTY', async () => {
    const tar = spawn('tar', ['-C', path.join(__dirname, '..', 'fixtures'), '-cf', '-', '.']).stdout;
    await sandboxes.copyIn(name, tar, '/workspace');
    expect((await sh(name, 'ls /workspace | head -1; stat -c %u /workspace/histories')).out).toMatch(/^\S+\n1000\n$/);

    const helper = await sandboxes.attach(name, ['sh', '-c', 'while read -r l; do echo "got $l"; done']);
    const lines: string[] = [];
    helper.stdout.on('data', (c: Buffer) => lines.push(...c.toString().trim().split('\n')));
    helper.stdin.write('one\ntwo\n');
    await waitUntil(() => lines.length === 2);
    helper.close();
    expect(lines).toEqual(['got one', 'got two']);

    const shell = await sandboxes.shell(name, { cols: 100, rows: 30, term: 'xterm' });
    let screen = '';
    shell.stream.on('data', (c: Buffer) => (screen += c.toString()));
    await shell.resize({ cols: 120, rows: 40 });
    shell.stream.write('stty size; echo "$TERM $(id -u) $(pwd)"; exit 7\n');
    expect(await shell.exitCode()).toBe(7);
    expect(screen).toMatch(/40 120/);
    expect(screen).toMatch(/xterm 1000 \/workspace/);
  });
});

async function waitUntil(ok: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}

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

test('a pod deleted mid-command: the command ends as SandboxNotFound, and so does every later call', async () => {
  const name = `drydock-gone-${randomBytes(2).toString('hex')}`;
  await sandboxes.create(await specOf(name));
  const running = sandboxes.exec(name, ['sh', '-c', 'echo started; sleep 60']);
  await new Promise((r) => setTimeout(r, 1_000));
  expect(await sandboxes.destroy(name)).toBe(true);
  await expect(running).rejects.toBeInstanceOf(SandboxNotFound);
  await expect(sandboxes.exec(name, ['true'])).rejects.toBeInstanceOf(SandboxNotFound);
  await expect(sandboxes.attach(name, ['cat'])).rejects.toBeInstanceOf(SandboxNotFound);
  await expect(sandboxes.copyIn(name, new PassThrough().end(), '/workspace')).rejects.toBeInstanceOf(SandboxNotFound);
  expect(await sandboxes.destroy(name)).toBe(false);
  expect(await sandboxes.exists(name)).toBe(false);
});

test('what the provider cannot do, it refuses saying so', async () => {
  await expect(sandboxes.create({ ...(await specOf('drydock-late-browser')), companionOf: 'x' })).rejects.toThrow(
    /a pod's containers are fixed when it is created/,
  );
  await expect(sandboxes.buildImage()).rejects.toThrow(/builds no images/);
  expect(sandboxes.capabilities).toEqual({
    snapshots: true,
    buildsImages: false,
    lateCompanions: false,
    diskLimit: false,
    pidsLimit: false,
  });
});

// ---------------------------------------------------------------- sessions with pods for sandboxes

const TOKEN = `ghp_${randomBytes(18).toString('hex')}`;

describe('hostile scripted agents in sessions whose sandboxes are pods', () => {
  let stack: TestStack;
  let repo: { url: string; bare: string };
  let hostService: Server;
  let hostPort: number;

  beforeAll(async () => {
    repo = await makeFixtureRepo();
    hostService = createServer((_req, res) => res.end('host service'));
    await new Promise<void>((resolve) => hostService.listen(0, '127.0.0.1', resolve));
    hostPort = (hostService.address() as { port: number }).port;
    stack = await startStack({
      GITHUB_TOKEN: TOKEN,
      DRYDOCK_SANDBOX_PROVIDER: 'kubernetes',
      DRYDOCK_K8S_KUBECONFIG: cluster.kubeconfigFile,
      DRYDOCK_K8S_NAMESPACE: namespace,
      DRYDOCK_K8S_NODE: 'localhost',
      DRYDOCK_K8S_IMAGE_PULL_POLICY: 'Never',
    });
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
