/**
 * Snapshots on real Temporal, Docker, git and Postgres: registration and its
 * schedule, refreshSnapshot's image and registry row, sessions that start from
 * a snapshot and catch up (bundle, setup rerun), failed builds, and garbage
 * collection. Setup here needs no network (it leaves a marker); the registry
 * through the egress proxy is in snapshot-egress.test.ts.
 */
import { WorkflowFailedError } from '@temporalio/client';
import { ScheduleOverlapPolicy } from '@temporalio/client';
import type { SnapshotBuildResult } from '../../sandbox/contract';
import { addRepo } from '../../cli/snapshots';
import { AuditTrail } from '../../store/audit';
import { openDatabase, type Database } from '../../store/db';
import { Redactor } from '../../platform/scrub';
import { SANDBOX_SNAPSHOT_LABEL, SnapshotRegistry, snapshotScheduleId, SNAPSHOT_LABELS } from '../../sandbox/snapshots';
import { decide, type SessionStatus } from '../../workflows/api';
import {
  approveAs,
  DEFAULT_SETUP,
  docker,
  git,
  inPhase,
  makeSnapshotRepo,
  newSessionId,
  openEmbeddedDatabase,
  runCli,
  runReaper,
  scheduledRunsEnded,
  scriptedSession,
  startSession,
  startStack,
  testAuditKey,
  waitForStatus,
  type TestStack,
} from '../support/helpers';
import { buildSnapshot, removeSnapshots } from '../support/snapshots';
import { inSandbox } from '../support/docker';
import { sandboxName } from '../../sandbox/activities/container';

let stack: TestStack;
let db: Database;
let registry: SnapshotRegistry;
const repos: string[] = [];

beforeAll(async () => {
  stack = await startStack();
  db = await openDatabase(stack.config);
  registry = new SnapshotRegistry(db.pool);
});
afterAll(async () => {
  if (stack) await removeSnapshots(stack, repos);
  await db?.close();
  await stack?.stop();
});

async function register(url: string, opts: { setup?: string; keep?: string; every?: string } = {}): Promise<void> {
  repos.push(url);
  await addRepo(stack.client, stack.config, url, { every: '1h', ...opts });
}

const build = (repo: string) => buildSnapshot(stack, repo);

/** A session whose one step prints what the sandbox holds: setup runs, installed lockfile, HEAD, README. */
const inspectingSession = (url: string, extra: Record<string, unknown> = {}) => ({
  repo: { url },
  task: 'inspect the workspace',
  agent: {
    steps: [
      {
        run:
          'echo "runs=$(wc -l < node_modules/.drydock/setup-runs)"; echo "lock=$(cat node_modules/.drydock/installed-lock)"; ' +
          'echo "head=$(git rev-parse HEAD)"; echo "readme=$(cat README.md)"',
      },
    ],
  },
  ...extra,
});

function stepOutput(s: SessionStatus): string {
  return s.timeline.find((t) => t.name.startsWith('step 1'))?.outputTail ?? '';
}

test('repo add (CLI) creates the schedule and registration; snapshot build (CLI) yields a labelled image and a registry row', async () => {
  const repo = await makeSnapshotRepo();
  repos.push(repo.url);
  const env = {
    TEMPORAL_ADDRESS: stack.config.TEMPORAL_ADDRESS,
    DATABASE_URL: stack.config.DATABASE_URL!,
    DRYDOCK_TASK_QUEUE: stack.config.DRYDOCK_TASK_QUEUE,
  };
  const addArgs = ['repo', 'add', repo.url, '--every', '45m', '--keep', '2', '--allow', '127.0.0.1:4873'];
  const addedAt = Date.now();
  const added = await runCli(addArgs, env);
  expect(added).toMatchObject({ code: 0, stderr: '' });
  // The stack's worker recorded its host at start: the repo gets a refresh schedule there.
  const host = stack.config.DRYDOCK_HOST_ID;
  const scheduleHandle = stack.client.schedule.getHandle(snapshotScheduleId(repo.url, host));
  const schedule = await scheduleHandle.describe();
  // Its first refresh one period after `repo add`, not at the epoch's next 45-minute mark (where
  // every repo's would be), give or take the server's rounding to the second and its jitter.
  const period = 45 * 60_000;
  expect(schedule.info.nextActionTimes[0].getTime()).toBeGreaterThanOrEqual(addedAt + period - 2_000);
  expect(schedule.info.nextActionTimes[0].getTime()).toBeLessThanOrEqual(Date.now() + period + 2_000);
  // Added again (as a worker's start makes it again), it keeps its phase.
  expect(await runCli(addArgs, env)).toMatchObject({ code: 0, stderr: '' });
  expect((await scheduleHandle.describe()).spec.intervals).toEqual(schedule.spec.intervals);
  expect(schedule.action).toMatchObject({
    type: 'startWorkflow',
    workflowType: 'refreshSnapshot',
    args: [{ repo: repo.url, hostQueue: `${stack.config.DRYDOCK_TASK_QUEUE}@${host}` }],
    taskQueue: stack.config.DRYDOCK_TASK_QUEUE,
  });
  expect(schedule.spec.intervals).toMatchObject([{ every: 45 * 60_000 }]);
  expect(schedule.policies.overlap).toBe(ScheduleOverlapPolicy.SKIP);
  expect(await registry.repo(repo.url)).toEqual({
    repo: repo.url,
    everyMs: 45 * 60_000,
    keep: 2,
    setupTimeoutMs: 30 * 60_000,
    egress: [{ host: '127.0.0.1', port: 4873 }],
    registries: [],
  });

  const listed = await runCli(['repo', 'list', '--json'], env);
  expect(JSON.parse(listed.stdout).map((r: { repo: string }) => r.repo)).toContain(repo.url);

  const built = await runCli(['snapshot', 'build', repo.url, '--json'], env);
  expect(built.code).toBe(0);
  const result: SnapshotBuildResult = JSON.parse(built.stdout);
  const head = (await import('../support/helpers')).git(['rev-parse', 'main'], repo.bare).trim();
  expect(result).toMatchObject({ status: 'ready', repo: repo.url, commit: head });
  expect(result.image).toMatch(new RegExp(`^drydock-snapshot-remote-[0-9a-f]{8}:${head.slice(0, 12)}-[0-9a-f]{8}$`));

  const image = await docker.getImage(result.image!).inspect();
  const labels = image.Config.Labels;
  expect(labels).toMatchObject({
    [SNAPSHOT_LABELS.image]: 'snapshot',
    [SNAPSHOT_LABELS.repo]: repo.url,
    [SNAPSHOT_LABELS.commit]: head,
    [SNAPSHOT_LABELS.setupHash]: expect.stringMatching(/^[0-9a-f]{64}$/),
  });
  expect(Date.parse(labels[SNAPSHOT_LABELS.created])).toBeGreaterThan(Date.now() - 10 * 60_000);
  // The image is the base image plus /workspace: the user and the command are the sandbox's.
  expect(image.Config.User).toBe('1000:1000');

  const [row] = await registry.ready(repo.url, stack.config.DRYDOCK_HOST_ID);
  expect(row).toMatchObject({
    status: 'ready',
    commit: head,
    image: result.image,
    setupHash: labels[SNAPSHOT_LABELS.setupHash],
    sizeBytes: image.Size,
  });
  expect(row.durationMs).toBeGreaterThan(0);
  const audit = await new AuditTrail(db.pool, 'test', new Redactor([]), testAuditKey()).events(`snapshot:${repo.url}`);
  expect(audit.at(-1)).toMatchObject({
    kind: 'snapshot.build',
    actor: 'drydock',
    data: { outcome: 'ready', image: result.image, commit: head },
  });
  // The build container is gone.
  expect(await docker.listContainers({ all: true, filters: { label: [`drydock.session=${row.id}`] } })).toEqual([]);

  const snapshots = await runCli(['snapshot', 'list', repo.url], env);
  expect(snapshots.stdout).toContain(`ready ${head.slice(0, 12)}`);
});

test('a session starts from the snapshot without rerunning setup, sees later commits, and reruns setup when the lockfile changed', async () => {
  const repo = await makeSnapshotRepo();
  await register(repo.url);
  const snapshot = await build(repo.url);

  // Two commits after the snapshot: the session brings them in as a bundle.
  await repo.commit({ 'README.md': '# app\nfirst change\n' });
  const head = await repo.commit({ 'src/index.ts': 'export {};\n' });
  const id = newSessionId('warm');
  const warm = (await (await startSession(stack, id, inspectingSession(repo.url))).result()) as SessionStatus;
  expect(warm.phase).toBe('completed');
  expect(warm.snapshot).toEqual({
    image: snapshot.image,
    commit: snapshot.commit,
    ageMs: expect.any(Number),
    behind: 2,
  });
  expect(warm.sandbox!.image).toBe(snapshot.image);
  expect(warm.timeline.map((t) => t.name)).not.toContainEqual(expect.stringMatching(/^setup/));
  const out = stepOutput(warm);
  expect(out).toContain('runs=1\n'); // the snapshot's own setup run; none in the session
  expect(out).toContain(`head=${head}\n`);
  expect(out).toContain('readme=# app\nfirst change');

  // A lockfile change: setup runs again in the session, before the agent.
  const lockHead = await repo.commit({ 'package-lock.json': '{ "lockfileVersion": 3, "generation": 2 }\n' });
  const rerun = (await (
    await startSession(stack, newSessionId('lock'), inspectingSession(repo.url))
  ).result()) as SessionStatus;
  expect(rerun.phase).toBe('completed');
  expect(rerun.snapshot).toMatchObject({ image: snapshot.image, behind: 3 });
  const setup = rerun.timeline.find((t) => t.name.startsWith('setup'));
  expect(setup).toMatchObject({ name: 'setup (changed since the snapshot: package-lock.json)', ok: true });
  expect(rerun.timeline.indexOf(setup!)).toBeLessThan(rerun.timeline.findIndex((t) => t.name.startsWith('step 1')));
  const rerunOut = stepOutput(rerun);
  expect(rerunOut).toContain('runs=2\n');
  expect(rerunOut).toContain('"generation": 2');
  expect(rerunOut).toContain(`head=${lockHead}\n`);

  // A session whose policy forbids setup's egress fails, saying why, rather than running it.
  const forbidden = await startSession(stack, newSessionId('forbid'), {
    ...inspectingSession(repo.url),
    limits: { setupEgress: false },
  });
  const err: WorkflowFailedError = await forbidden.result().then(
    () => {
      throw new Error('expected the session to fail');
    },
    (e) => e,
  );
  const details = (err.cause as { details?: SessionStatus[] }).details![0];
  expect(details.phase).toBe('failed');
  expect(details.error).toMatch(
    /setup must run \(changed since the snapshot: package-lock\.json\) and reach registry\.npmjs\.org through the egress proxy, but this session forbids it \(limits\.setupEgress: false\)/,
  );
  expect(details.timeline.map((t) => t.name)).not.toContainEqual(expect.stringMatching(/^step 1/));
});

test("a refresh after a one-file commit takes the snapshot's setup result, caught up; a manifest's or a lockfile's change runs setup again", async () => {
  const repo = await makeSnapshotRepo();
  await register(repo.url);
  const first = await build(repo.url);
  expect(first.notes ?? []).not.toContainEqual(expect.stringMatching(/setup did not run/));

  const head = await repo.commit({ 'src/one.ts': 'export const one = 1;\n' });
  const refreshed = await build(repo.url);
  expect(refreshed).toMatchObject({ status: 'ready', commit: head });
  expect(refreshed.image).not.toBe(first.image);
  expect(refreshed.notes).toContainEqual(
    expect.stringMatching(new RegExp(`^setup did not run: .* the snapshot at ${first.commit.slice(0, 12)}, `)),
  );
  // Its sessions start at the new commit with no catching up, on setup's one run (the first build's).
  const warm = (await (
    await startSession(stack, newSessionId('reused'), inspectingSession(repo.url))
  ).result()) as SessionStatus;
  expect(warm.snapshot).toMatchObject({ image: refreshed.image, commit: head, behind: 0 });
  expect(stepOutput(warm)).toContain('runs=1\n');
  expect(stepOutput(warm)).toContain(`head=${head}\n`);
  const labels = (await docker.getImage(refreshed.image!).inspect()).Config.Labels;
  expect(labels[SNAPSHOT_LABELS.setupAt]).toBe(
    (await docker.getImage(first.image!).inspect()).Config.Labels[SNAPSHOT_LABELS.setupAt],
  );

  // A manifest changed (what `npm install` reads where no lockfile pins it): the refresh runs setup.
  await repo.commit({ 'package.json': '{ "name": "app", "dependencies": { "left-pad": "1.3.0" } }\n' });
  expect((await build(repo.url)).notes ?? []).not.toContainEqual(expect.stringMatching(/setup did not run/));

  // The lockfile changed: the refresh runs setup, on a fresh copy of the repo.
  const lockHead = await repo.commit({ 'package-lock.json': '{ "lockfileVersion": 3, "generation": 2 }\n' });
  const rebuilt = await build(repo.url);
  expect(rebuilt).toMatchObject({ status: 'ready', commit: lockHead });
  expect(rebuilt.notes ?? []).not.toContainEqual(expect.stringMatching(/setup did not run/));
  const after = (await (
    await startSession(stack, newSessionId('rebuilt'), inspectingSession(repo.url))
  ).result()) as SessionStatus;
  expect(after.snapshot).toMatchObject({ image: rebuilt.image, behind: 0 });
  expect(stepOutput(after)).toContain('runs=1\n'); // this build's own run, on a fresh copy
  expect(stepOutput(after)).toContain('"generation": 2');
});

test("setup's files are not the agent's change: a lockfile setup made and a file it rewrote are never pushed", async () => {
  // Setup as `npm install` in a repo without a lockfile: it writes one, and rewrites a tracked file.
  const repo = await makeSnapshotRepo(
    `${DEFAULT_SETUP}echo '{ "made": "by setup" }' > yarn.lock\nprintf '{\n  "rewritten": true\n}\n' > config.json\n`,
  );
  await repo.commit({ 'config.json': '{"rewritten":false}\n' });
  await register(repo.url);
  await build(repo.url);
  const id = newSessionId('setupfiles');
  const handle = await startSession(
    stack,
    id,
    scriptedSession(repo.url, 'add a line to the README', 'echo "the agent was here" >> README.md', {
      publish: { openFor: '1s' },
    }),
  );
  const waiting = await waitForStatus(handle, inPhase('awaiting_approval'));
  expect(waiting.agent!.diffstat).toMatch(/^ README\.md \| 1 \+\n 1 file changed/);
  expect(waiting.agent!.setupFiles).toBe('yarn.lock');
  expect(waiting.pendingApproval!.evidence.setupFiles).toBe('yarn.lock');
  // The sandbox keeps what setup wrote: only the change leaves it out.
  expect(await inSandbox(sandboxName(id), 'cat /workspace/yarn.lock')).toContain('by setup');

  await handle.executeUpdate(decide, approveAs('alice', 'push'));
  expect(((await handle.result()) as SessionStatus).phase).toBe('completed');
  const pushed = git(['diff', '--name-only', 'main', `drydock/${id}`], repo.bare).trim();
  expect(pushed).toBe('README.md');
});

test('no snapshot yet: the cold path clones and runs setup in the session, and starts a build for next time', async () => {
  const repo = await makeSnapshotRepo();
  await register(repo.url);
  const cold = (await (
    await startSession(stack, newSessionId('cold'), inspectingSession(repo.url))
  ).result()) as SessionStatus;
  expect(cold.phase).toBe('completed');
  expect(cold.snapshot).toBeUndefined();
  expect(cold.sandbox!.image).toBe(stack.config.DRYDOCK_BASE_IMAGE);
  expect(cold.timeline.find((t) => t.name.startsWith('setup'))).toMatchObject({
    name: 'setup (no snapshot yet)',
    ok: true,
  });
  expect(stepOutput(cold)).toContain('runs=1\n');
  // The schedule was triggered: a snapshot becomes ready without anyone asking.
  const deadline = Date.now() + 120_000;
  while ((await registry.ready(repo.url, stack.config.DRYDOCK_HOST_ID)).length === 0) {
    if (Date.now() > deadline) throw new Error('no snapshot was built after the cold start');
    await new Promise((r) => setTimeout(r, 500));
  }
  // Let that build finish its teardown before the suite checks for leaked containers.
  // Only this repo's: other suites' schedules may start builds on queues whose workers are gone.
  await scheduledRunsEnded(stack.client, snapshotScheduleId(repo.url, stack.config.DRYDOCK_HOST_ID));
});

test('a failed setup keeps the previous snapshot in service and says why', async () => {
  const repo = await makeSnapshotRepo();
  await register(repo.url);
  const good = await build(repo.url);
  await repo.commit({ '.drydock/setup.sh': 'echo "cannot reach the registry" >&2\nexit 3\n' });

  const err: WorkflowFailedError = await build(repo.url).then(
    () => {
      throw new Error('expected the build to fail');
    },
    (e) => e,
  );
  expect(err.cause?.message).toMatch(
    /setup exited with 3 \(setup from \.drydock\/setup\.sh: sh \.drydock\/setup\.sh\): cannot reach the registry/,
  );
  const [failed] = await registry.builds({ repo: repo.url, limit: 1 });
  expect(failed).toMatchObject({
    status: 'failed',
    error: expect.stringMatching(
      /setup exited with 3 \(setup from \.drydock\/setup\.sh: sh \.drydock\/setup\.sh\): cannot reach the registry/,
    ),
  });
  const ready = await registry.ready(repo.url, stack.config.DRYDOCK_HOST_ID);
  expect(ready.map((r) => r.image)).toEqual([good.image]);
  expect(await docker.getImage(good.image!).inspect()).toBeTruthy();

  // Sessions keep starting from the good one (the new setup script's change makes them rerun setup, which fails).
  const session = await startSession(stack, newSessionId('after-fail'), inspectingSession(repo.url));
  const outcome: SessionStatus = await session.result().then(
    (s) => s as SessionStatus,
    (e: WorkflowFailedError) => (e.cause as unknown as { details: SessionStatus[] }).details[0],
  );
  expect(outcome.snapshot?.image).toBe(good.image);
  expect(outcome.timeline.find((t) => t.name.startsWith('setup'))).toMatchObject({
    name: 'setup (changed since the snapshot: .drydock/setup.sh)',
    ok: false,
    exitCode: 3,
  });
});

test('garbage collection keeps the newest K and never removes a snapshot a sandbox uses', async () => {
  const repo = await makeSnapshotRepo();
  await register(repo.url, { keep: '2' });
  const first = await build(repo.url);
  const id = newSessionId('holds-first');
  const holder = await startSession(stack, id, scriptedSession(repo.url, 'hold the sandbox', 'sleep 300'));
  await waitForStatus(holder, inPhase('agent'));
  const [sandbox] = await docker.listContainers({ filters: { label: [`drydock.session=${id}`] } });
  expect(sandbox.Labels[SANDBOX_SNAPSHOT_LABEL]).toBe(first.image);

  const second = await build(repo.url);
  const third = await build(repo.url);
  expect(third.removed).toEqual([]); // first is beyond K=2 but in use
  const fourth = await build(repo.url);
  expect(fourth.removed).toEqual([second.image]);
  const images = async () =>
    (await docker.listImages({ filters: { label: [`${SNAPSHOT_LABELS.repo}=${repo.url}`] } }))
      .flatMap((i) => i.RepoTags ?? [])
      .sort();
  expect(await images()).toEqual([first.image, third.image, fourth.image].sort());
  expect((await registry.ready(repo.url, stack.config.DRYDOCK_HOST_ID)).map((r) => r.image)).toEqual([
    fourth.image,
    third.image,
    first.image,
  ]);

  await holder.cancel();
  await holder.result().catch(() => undefined);
  // Once no sandbox uses it, the host's reaper removes it, without waiting for the next build.
  await runReaper(stack);
  expect(await images()).toEqual([third.image, fourth.image].sort());
  const fifth = await build(repo.url);
  expect(fifth.removed).toEqual([third.image]);
  expect(await images()).toEqual([fourth.image, fifth.image].sort());
});

describe.each([
  ['a real PostgreSQL server', () => openDatabase({ DATABASE_URL: process.env.DATABASE_URL, DRYDOCK_DATA_DIR: '' })],
  ['embedded PGlite (served by another process, reached with pg)', () => openEmbeddedDatabase()],
])('the snapshot registry on %s', (_name, open) => {
  let own: Database;
  beforeAll(async () => {
    own = await open();
  });
  afterAll(() => own?.close());

  test('registrations, builds, the newest ready first, failures and removals', async () => {
    const reg = new SnapshotRegistry(own.pool);
    const repo = `file:///tmp/registry-${Math.random().toString(36).slice(2)}.git`;
    await reg.upsertRepo({
      repo,
      everyMs: 60_000,
      keep: 2,
      setupTimeoutMs: 5_000,
      egress: [{ host: 'registry.npmjs.org' }],
    });
    await reg.upsertRepo({ repo, setup: 'npm ci', everyMs: 120_000, keep: 3, setupTimeoutMs: 5_000, egress: [] });
    expect(await reg.repo(repo)).toEqual({
      repo,
      setup: 'npm ci',
      everyMs: 120_000,
      keep: 3,
      setupTimeoutMs: 5_000,
      egress: [],
      registries: [],
    });
    expect((await reg.repos()).map((r) => r.repo)).toContain(repo);

    const start = await reg.startBuild({ id: `${repo}#1`, repo, host: 'h1' });
    expect(start).toMatchObject({ status: 'building', host: 'h1' });
    // A retry of the start finds the same row.
    expect(await reg.startBuild({ id: `${repo}#1`, repo, host: 'h1' })).toEqual(start);
    await reg.finishBuild(`${repo}#1`, {
      status: 'ready',
      commit: 'a'.repeat(40),
      setupHash: 'h',
      image: 'img:1',
      sizeBytes: 10,
    });
    await reg.startBuild({ id: `${repo}#2`, repo, host: 'h1' });
    const failed = await reg.finishBuild(`${repo}#2`, {
      status: 'failed',
      commit: 'b'.repeat(40),
      error: 'setup exited with 1',
    });
    expect(failed).toMatchObject({ status: 'failed', error: 'setup exited with 1' });
    await reg.startBuild({ id: `${repo}#3`, repo, host: 'h1' });
    await reg.finishBuild(`${repo}#3`, {
      status: 'ready',
      commit: 'c'.repeat(40),
      setupHash: 'h',
      image: 'img:3',
      sizeBytes: 30,
    });
    await reg.startBuild({ id: `${repo}#4`, repo, host: 'h2' });
    await reg.finishBuild(`${repo}#4`, {
      status: 'ready',
      commit: 'd'.repeat(40),
      setupHash: 'h',
      image: 'img:4',
      sizeBytes: 40,
    });
    // A finished build is not finished again (a retried activity).
    await reg.finishBuild(`${repo}#3`, { status: 'failed', error: 'late' });

    expect((await reg.ready(repo, 'h1')).map((b) => b.image)).toEqual(['img:3', 'img:1']);
    expect((await reg.ready(repo, 'h2')).map((b) => b.image)).toEqual(['img:4']);
    await reg.markRemoved(`${repo}#1`);
    expect((await reg.ready(repo, 'h1')).map((b) => b.image)).toEqual(['img:3']);
    const history = await reg.builds({ repo });
    expect(history.map((b) => b.status)).toEqual(['ready', 'ready', 'failed', 'removed']);
    expect(history[1]).toMatchObject({ commit: 'c'.repeat(40), sizeBytes: 30, durationMs: expect.any(Number) });
  });
});
