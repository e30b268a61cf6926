/**
 * The multi-host drills, on two real Docker engines (this machine's and a second
 * dockerd of infra/docker-host.sh: its own socket, data root, exec root and
 * containerd) and Temporal on PostgreSQL (infra/temporal-pg.sh: the server built
 * from Go modules), each host with its own worker process and host id:
 *
 * - a host lost: its worker killed; the session re-provisions on the other host
 *   from its checkpoint, and the lost host's reaper removes the old sandbox when
 *   the host comes back;
 * - a host drained: its worker gets SIGTERM during a step; the step finishes there
 *   and the worker exits 0, a session started meanwhile goes to the other host, and
 *   the drained session goes on on its host when the host's new worker starts.
 *
 * Each drill prints its times, and its history must replay on the current code.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import type Docker from 'dockerode';
import { status, type SessionStatus } from '../../workflows/api';
import { containersOn, secondDockerHost } from '../support/docker-hosts';
import {
  activityRuns,
  approveAll,
  firstRun,
  pushesOf,
  recoveryMs,
  recoveryTable,
  replays,
  session,
  gate,
  STEP_2,
  stopGates,
} from '../support/drills';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github';
import { connectClient, docker, git, makeFixtureRepo, newSessionId, startSession } from '../support/helpers';
import { own } from '../support/leftovers';
import { startTemporalPg, type TemporalPg } from '../support/temporal-pg';
import { killWorkerProcesses, newQueue, startWorkerProcess, workerEnv, type WorkerEnv } from '../support/workers';

const TOKEN = `ghp_${randomBytes(18).toString('hex')}`;
let github: FakeGitHub;
let temporal: TemporalPg | undefined;
let client: Client;
const recoveries = recoveryTable();

beforeAll(async () => {
  github = await startFakeGitHub({ owner: 'acme', repo: 'app', token: TOKEN });
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-multihost-'));
  own(dir);
  temporal = await startTemporalPg(dir);
  client = await connectClient(temporal.address);
}, 20 * 60_000); // the first run on a machine builds the Temporal server (minutes)

afterAll(async () => {
  await client?.connection.close();
  await temporal?.stop();
  await github?.close();
});
afterEach(killWorkerProcesses);
afterEach(stopGates);

interface Host {
  env: WorkerEnv;
  engine: Docker;
}

/**
 * Hosts `<queue>-a` (this machine's engine) and `<queue>-b` (the second engine),
 * both on the PostgreSQL-backed Temporal, each with a worker process polling.
 */
async function twoHosts(extra: Record<string, string> = {}) {
  const queue = newQueue('multihost');
  const second = await secondDockerHost();
  const hosts = new Map<string, Host>();
  for (const [h, engine] of [
    ['a', docker],
    ['b', second.docker],
  ] as const) {
    const env = await workerEnv(queue, {
      TEMPORAL_ADDRESS: temporal!.address,
      GITHUB_TOKEN: TOKEN,
      GITHUB_API_URL: github.url,
      DRYDOCK_HOST_ID: `${queue}-${h}`,
      ...(h === 'b' ? { DOCKER_HOST: second.dockerHost } : {}),
      ...extra,
    });
    hosts.set(env.DRYDOCK_HOST_ID, { env, engine });
  }
  // `bin/drydock worker`, as deployed: its signal handling is what the drain drill tests.
  const workers = new Map([...hosts].map(([id, h]) => [id, startWorkerProcess(h.env, { cli: true })]));
  await Promise.all([...workers.values()].map((w) => w.ready));
  const start = (id: string, input: Record<string, unknown>) =>
    startSession({ client, config: { DRYDOCK_TASK_QUEUE: queue } }, id, input);
  const other = (host: string) => [...hosts.keys()].find((h) => h !== host)!;
  return { queue, hosts, workers, start, other };
}

/** Both hosts' engines: a session's sandbox may be on either. */
const engines = (hosts: Map<string, Host>) => [...hosts.values()].map((h) => h.engine);

/** The end of a session's first timeline entry named `name`, in ms since the epoch. */
function endOf(s: SessionStatus, name: string): number {
  const entry = s.timeline.find((t) => t.name === name && t.durationMs !== undefined)!;
  return Date.parse(entry.startedAt) + entry.durationMs!;
}

test('a host lost → the session moves to the other engine; the lost host reaps its sandbox when it returns', async () => {
  // A lost host is noticed after the heartbeat timeout (10 s) and this much of silence on its queue.
  const { queue, hosts, workers, start, other } = await twoHosts({ DRYDOCK_HOST_TIMEOUT: '10s' });
  const repo = await makeFixtureRepo();
  const id = newSessionId('multihost-lost');
  const handle = await start(id, session(repo.url));
  const step2 = gate(id, STEP_2, engines(hosts));
  await step2.reached;
  const running = await handle.query(status);
  const owner = running.sandbox!.host;
  const survivor = other(owner);
  // The sandbox is on its host's own engine, and only there.
  expect(await containersOn(hosts.get(owner)!.engine, id)).toHaveLength(1);
  expect(await containersOn(hosts.get(survivor)!.engine, id)).toHaveLength(0);
  await workers.get(owner)!.kill();
  const faultAt = Date.now();
  step2.open(); // on the survivor, where step 2 runs again
  const final = await approveAll(handle);
  recoveries['host lost (worker killed, 10 s host timeout) → next step on the other host'] = recoveryMs(final, faultAt);

  expect(final.phase).toBe('completed');
  expect(final.restarts).toBe(1);
  expect(final.sandbox!.host).toBe(survivor);
  expect(final.timeline.find((t) => t.name.startsWith('re-provision'))!.name).toContain(`host ${owner} did not`);
  const branch = `drydock/${id}`;
  expect(git(['show', `${branch}:ONE.md`], repo.bare)).toBe('one\n');
  expect(git(['show', `${branch}:TWO.md`], repo.bare)).toBe('two\n');
  expect(pushesOf(repo.bare, branch)).toBe(1);
  expect(github.pulls.filter((p) => p.head === branch)).toHaveLength(1);

  // Every sandbox activity went to the queue of the host that owned the sandbox at the time.
  const sandboxActivities = new Set(['runStep', 'commitChanges', 'pushBranch', 'destroySandbox']);
  const queues = new Set<string>();
  for (const e of (await firstRun(handle).fetchHistory()).events!) {
    const s = e.activityTaskScheduledEventAttributes;
    if (s && sandboxActivities.has(s.activityType!.name!)) queues.add(s.taskQueue!.name!);
  }
  expect([...queues].sort()).toEqual([`${queue}@${owner}`, `${queue}@${survivor}`].sort());

  // The lost host's container outlives it; when the host comes back its reaper removes it.
  const lostEngine = hosts.get(owner)!.engine;
  expect((await containersOn(lostEngine, id)).map((c) => c.Labels['drydock.host'])).toEqual([owner]);
  const backAt = Date.now();
  await startWorkerProcess(hosts.get(owner)!.env, { cli: true }).ready;
  await client.schedule.getHandle(`drydock-reaper-${owner}`).trigger();
  const deadline = Date.now() + 60_000;
  while ((await containersOn(lostEngine, id)).length > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 500));
  }
  expect(await containersOn(lostEngine, id)).toHaveLength(0);
  recoveries['host back → its reaper removed the lost sandbox (worker start + reaper run)'] = Date.now() - backAt;
  await replays(handle, 'host-lost');
}, 300_000);

test('a host drained with SIGTERM → its step finishes there and the worker exits 0; new work goes to the other host', async () => {
  const { hosts, workers, start, other } = await twoHosts({ DRYDOCK_SHUTDOWN_GRACE: '60s' });
  const repo = await makeFixtureRepo();
  const id = newSessionId('multihost-drain');
  const handle = await start(id, session(repo.url));
  const step2 = gate(id, STEP_2, engines(hosts));
  await step2.reached;
  const owner = (await handle.query(status)).sandbox!.host;
  const drained = workers.get(owner)!;
  const signalledAt = Date.now();
  drained.child.kill('SIGTERM');
  // Its two workers (the shared queue's and the host's) stopped polling.
  await drained.logged(/"state":"DRAINING"[\s\S]*"state":"DRAINING"/);
  step2.open(); // the step under way at the signal ends on the draining host
  // New work while the host drains: only the other host takes it.
  const laterId = newSessionId('multihost-drain-later');
  const later = await start(laterId, session(repo.url, { agent: { steps: [{ run: 'echo hello >> README.md' }] } }));
  expect(await drained.exited).toBe(0);
  recoveries['drain: SIGTERM → step finished on the draining host, worker exited 0'] = Date.now() - signalledAt;
  // Step 2 ended on the draining worker, at its first attempt.
  expect(await activityRuns(handle, 'runStep')).toEqual({ started: [1, 1], completed: 2 });

  const laterFinal = await approveAll(later);
  expect(laterFinal.phase).toBe('completed');
  expect(laterFinal.sandbox!.host).toBe(other(owner));
  expect(await containersOn(hosts.get(owner)!.engine, laterId)).toHaveLength(0);
  recoveries['drain: SIGTERM → a new session ready on the other host'] = endOf(laterFinal, 'provision') - signalledAt;

  // The host's next worker (an upgrade's new version) takes its queue over: the session goes on there.
  const restartedAt = Date.now();
  startWorkerProcess(hosts.get(owner)!.env, { cli: true });
  const final = await approveAll(handle);
  recoveries["drain: the host's new worker started → the drained session's next step"] = recoveryMs(final, restartedAt);
  expect(final.phase).toBe('completed');
  expect(final.restarts).toBeUndefined(); // no replacement: the sandbox waited on its host
  expect(final.sandbox!.host).toBe(owner);
  expect(git(['show', `drydock/${id}:RUNS.txt`], repo.bare)).toBe('ran\n');
  expect(pushesOf(repo.bare, `drydock/${id}`)).toBe(1);
  for (const h of hosts.values()) expect(await containersOn(h.engine, id)).toHaveLength(0);
  await replays(handle, 'drain');
}, 300_000);
