/**
 * drydock deployed on the cluster built here from infra/k8s: PostgreSQL, the
 * Temporal server on it (its schema and set-up Jobs), drydock serve and the
 * pods layout's worker, from the images infra/images.sh builds, loaded onto
 * the node (test/support/k8s-deployment.ts says what this cluster without a
 * pod network needs besides the files). A session goes through serve's API;
 * its sandbox is a pod made by the worker pod through the API, with the
 * repo's PostgreSQL service as a container of it; the pod is killed in the
 * middle of a step, and the session completes on a replacement (whose
 * PostgreSQL answers the step that was cut), approved through serve and
 * pushed once.
 */
import { execFile } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { sandboxName } from '../../sandbox/activities/container';
import { podName } from '../../sandbox/kubernetes/pod';
import { git, makeFixtureRepo, newSessionId, projectRoot } from '../support/helpers';
import { runCluster, type TestCluster } from '../support/k8s-cluster';
import { deploy, prepareFolders, until, type Deployment } from '../support/k8s-deployment';
import { own } from '../support/leftovers';
import { ensureServiceImage } from '../../sandbox-images/service-images';
import { PG_CLIENT, PG_READY } from '../support/service-clients';

const run = promisify(execFile);
let cluster: TestCluster;
let deployment: Deployment;
let fixture: Awaited<ReturnType<typeof makeFixtureRepo>>;

beforeAll(async () => {
  const { stdout } = await run('bash', [path.join(projectRoot, 'infra/images.sh')], { maxBuffer: 16 << 20 });
  const [drydock, temporal, postgresql] = stdout.trim().split('\n');
  const baseImage = process.env.DRYDOCK_BASE_IMAGE!;
  const service = await ensureServiceImage('postgres');
  cluster = await runCluster([baseImage, drydock, temporal, postgresql, service]);
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-k8s-deploy-'));
  own(dir);
  const uid = Number(
    (await run('docker', ['run', '--rm', '--network', 'none', '--entrypoint', 'id', postgresql, '-u'])).stdout.trim(),
  );
  await prepareFolders(dir, uid);
  // The repo's PostgreSQL, started empty in each pod: the Kubernetes provider keeps no service's data in a snapshot.
  fixture = await makeFixtureRepo({
    'pgq.js': PG_CLIENT,
    '.drydock/config.yaml': `services:
  db:
    image: ${service}
    environment: { POSTGRES_HOST_AUTH_METHOD: trust, POSTGRES_DB: app }
    data: [/var/lib/postgresql/data]
    healthcheck: { test: "${PG_READY}", interval: 200ms, retries: 150 }
`,
  });
  // The bare repo records every update of its refs: how many pushes a branch had.
  git(['config', 'core.logAllRefUpdates', 'always'], fixture.bare);
  deployment = await deploy(cluster, {
    dir,
    images: { drydock, baseImage },
    repos: `acme/fixture=${fixture.url}`,
    hostFolders: [path.dirname(fixture.bare)],
  });
}, 30 * 60_000);

afterAll(async () => {
  if (!deployment) return;
  for (const ns of [deployment.namespace, deployment.sandboxes]) await deployment.kubectl('delete', 'namespace', ns);
}, 300_000);

async function api(route: string, token: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(`${deployment.serveUrl}${route}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = { status: response.status, body: await response.json() };
  if (answer.status >= 500) {
    // serve's own words: the answer says only "internal error"
    const log = await deployment.kubectl('-n', deployment.namespace, 'logs', 'deploy/drydock-serve', '--tail=30');
    throw new Error(`${route} answered ${answer.status} ${JSON.stringify(answer.body)}; serve's log:\n${log}`);
  }
  return answer;
}

const phaseOf = async (id: string) => (await api(`/api/sessions/${id}`, deployment.tokens.bob)).body;

test('a session with a service through serve: its sandbox pod killed mid-step, it completes on a replacement, approved and pushed once', async () => {
  const sessionId = newSessionId('k8s-deploy');
  const created = await api('/api/sessions', deployment.tokens.alice, {
    sessionId,
    repo: 'acme/fixture',
    task: 'say hello twice',
    agent: {
      steps: [
        { run: `node pgq.js "select 'hello'" >> README.md` },
        { run: `touch /tmp/second-started; sleep 20; node pgq.js "select 'again'" >> README.md` },
      ],
    },
    verify: { test: 'sh check.sh' },
  });
  expect(created.status).toBe(201);
  const pod = podName(sandboxName(sessionId));
  const inPod = (...argv: string[]) => deployment.kubectl('-n', deployment.sandboxes, 'exec', pod, '--', ...argv);
  const secondStep = await until(
    'the second step running in the sandbox pod',
    async () => {
      const { phase, error } = await phaseOf(sessionId);
      if (/failed|cancelled|rejected|completed/.test(phase)) return `the session ${phase}: ${error}`;
      return (await inPod('test', '-e', '/tmp/second-started')) === '' ? 'running' : undefined;
    },
    300,
  );
  expect(secondStep).toBe('running');
  await deployment.kubectl('-n', deployment.sandboxes, 'delete', 'pod', pod, '--grace-period=1');

  const waiting = await until(
    'the session awaiting approval or ended',
    async () => {
      const body = await phaseOf(sessionId);
      // A status from the memo (no worker answered the query within 2 s) names no change: ask again.
      if (body.unanswered) return undefined;
      return /awaiting_approval|failed|cancelled|rejected|completed/.test(body.phase) ? body : undefined;
    },
    300,
  );
  expect(waiting).toMatchObject({ phase: 'awaiting_approval', restarts: 1 });
  const pods = await deployment.kubectl('-n', deployment.sandboxes, 'get', 'pods', '-o', 'name');
  expect(pods.trim()).toBe(`pod/${pod}-r1`);
  const approved = await api(`/api/sessions/${sessionId}/decide`, deployment.tokens.bob, {
    decision: 'approve',
    change: waiting.pendingApproval?.change,
  });
  expect(approved).toMatchObject({ status: 200, body: { decision: 'approve', action: 'push', by: 'machine:bob' } });
  const done = await until('the session completed', async () => {
    const body = await phaseOf(sessionId);
    return body.phase === 'completed' ? body : undefined;
  });
  const branch = `drydock/${sessionId}`;
  expect(git(['rev-parse', branch], fixture.bare).trim()).toBe(done.pushed.commit);
  expect(git(['show', `${branch}:README.md`], fixture.bare)).toBe('# fixture\nhello\nagain\n');
  // One push: the branch was written once.
  expect(git(['reflog', 'show', '--format=%H', branch], fixture.bare).trim().split('\n')).toEqual([done.pushed.commit]);
  await until('the sandbox pods gone', async () =>
    (await deployment.kubectl('-n', deployment.sandboxes, 'get', 'pods', '-o', 'name')).trim() === ''
      ? true
      : undefined,
  );
}, 900_000);
