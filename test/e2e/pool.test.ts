/**
 * The warm pool on real Temporal, Docker, git and Postgres: a snapshot build
 * fills a repo's pool on the host; sessions claim its sandboxes (two racing
 * for the last one never share it), catch up the commits since the snapshot,
 * and leave pooled sandboxes to teardown and the reaper like any other; a
 * pool sandbox of an outdated snapshot is never handed out, and the reaper's
 * run replaces it.
 */
import { addRepo } from '../../cli/snapshots';
import { openDatabase, type Database } from '../../store/db';
import { POOL_LABEL, POOL_LIMITS, PoolRegistry } from '../../sandbox/pool-registry';
import { SANDBOX_SNAPSHOT_LABEL } from '../../sandbox/snapshots';
import type { SessionStatus } from '../../workflows/api';
import {
  docker,
  makeSnapshotRepo,
  newSessionId,
  runReaper,
  startSession,
  startStack,
  type TestStack,
} from '../support/helpers';
import { buildSnapshot, removeSnapshots } from '../support/snapshots';

let stack: TestStack;
let db: Database;
let pools: PoolRegistry;
const repos: string[] = [];

beforeAll(async () => {
  stack = await startStack();
  db = await openDatabase(stack.config);
  pools = new PoolRegistry(db.pool);
});
afterAll(async () => {
  if (stack) {
    // Pools of size 0: the reaper's fill retires their sandboxes, storage included.
    for (const repo of repos) await pools.setSize(repo, 0);
    await runReaper(stack);
    await removeSnapshots(stack, repos);
  }
  await db?.close();
  await stack?.stop();
});

const headSession = (url: string) => ({
  repo: { url },
  task: 'print HEAD',
  agent: { steps: [{ run: 'echo "head=$(git rev-parse HEAD)"' }] },
});

async function run(url: string): Promise<SessionStatus> {
  return (await (await startSession(stack, newSessionId('pool'), headSession(url))).result()) as SessionStatus;
}

/** This host's pool containers of `repo`, by name, with their snapshot label. */
async function poolContainers(repo: string): Promise<Map<string, string>> {
  const list = await docker.listContainers({ all: true, filters: { label: [`${POOL_LABEL}=${repo}`] } });
  return new Map(list.map((c) => [c.Names[0].replace(/^\//, ''), c.Labels[SANDBOX_SNAPSHOT_LABEL]]));
}

test('a build fills the pool; two sessions racing for its last sandbox get one each or one provisions; drift is caught up', async () => {
  const repo = await makeSnapshotRepo();
  repos.push(repo.url);
  await addRepo(stack.client, stack.config, repo.url, { every: '1h', pool: '1' });
  const snapshot = await buildSnapshot(stack, repo.url);

  const idle = await pools.idle(stack.config.DRYDOCK_HOST_ID, repo.url);
  expect(idle.map((r) => r.image)).toEqual([snapshot.image]);
  expect(idle[0].limits).toEqual(POOL_LIMITS);
  const [pooled] = idle.map((r) => r.name);
  expect(await poolContainers(repo.url)).toEqual(new Map([[pooled, snapshot.image]]));

  // Two claims of the one idle sandbox at once: exactly one gets it.
  const claim = (sessionId: string) =>
    pools.claim({
      sessionId,
      repo: repo.url,
      host: stack.config.DRYDOCK_HOST_ID,
      image: snapshot.image!,
      limits: POOL_LIMITS,
      expiresAt: new Date(Date.now() + 60_000).toISOString(),
    });
  const claims = await Promise.all([claim('race-a'), claim('race-b')]);
  expect(claims.filter(Boolean)).toEqual([pooled]);
  await db.pool.query(
    'update pool_sandboxes set claimed_by = null, claimed_at = null, expires_at = null where name = $1',
    [pooled],
  );

  // Two sessions at once, a commit after the snapshot: both complete at HEAD in sandboxes of their own.
  const head = await repo.commit({ 'README.md': '# app\nafter the snapshot\n' });
  const [a, b] = await Promise.all([run(repo.url), run(repo.url)]);
  for (const s of [a, b]) {
    expect(s.phase).toBe('completed');
    expect(s.snapshot).toMatchObject({ image: snapshot.image, behind: 1 });
    expect(s.timeline.find((t) => t.name.startsWith('step 1'))?.outputTail).toContain(`head=${head}`);
  }
  expect(a.sandbox!.name).not.toBe(b.sandbox!.name);
  // The one pooled sandbox went to exactly one of them (the other may have had the refill's, or provisioned).
  expect([a.sandbox!.name, b.sandbox!.name].filter((n) => n === pooled)).toHaveLength(1);
  // Teardown removed both, pooled or not.
  const names = await poolContainers(repo.url);
  expect(names.has(a.sandbox!.name) || names.has(b.sandbox!.name)).toBe(false);
});

test('a pool sandbox of an outdated snapshot is never handed out; the reaper replaces it and refills', async () => {
  const repo = await makeSnapshotRepo();
  repos.push(repo.url);
  await addRepo(stack.client, stack.config, repo.url, { every: '1h', pool: '2' });
  const first = await buildSnapshot(stack, repo.url);
  await repo.commit({ 'README.md': '# app\nsecond\n' });
  const second = await buildSnapshot(stack, repo.url);
  const host = stack.config.DRYDOCK_HOST_ID;
  // The build moved the pool to the new snapshot.
  expect((await pools.idle(host, repo.url)).map((r) => r.image)).toEqual([second.image, second.image]);

  // As if the refill after the build had failed: the idle sandboxes say they are of the first snapshot.
  const stale = (await pools.idle(host, repo.url)).map((r) => r.name);
  await db.pool.query('update pool_sandboxes set image = $2 where repo = $1', [repo.url, first.image]);
  const s = await run(repo.url);
  expect(s.phase).toBe('completed');
  expect(s.snapshot).toMatchObject({ image: second.image });
  expect(stale).not.toContain(s.sandbox!.name);
  expect((await pools.idle(host, repo.url)).map((r) => r.name).sort()).toEqual([...stale].sort());

  // The reaper's run retires them and refills from the newest snapshot.
  await runReaper(stack);
  const refilled = await pools.idle(host, repo.url);
  expect(refilled.map((r) => r.image)).toEqual([second.image, second.image]);
  expect(refilled.map((r) => r.name).filter((n) => stale.includes(n))).toEqual([]);
  const containers = await poolContainers(repo.url);
  expect([...containers.keys()].sort()).toEqual(refilled.map((r) => r.name).sort());

  // A claimed pool sandbox whose session is gone (teardown never ran) is reaped like any sandbox.
  const [victim] = refilled;
  await db.pool.query(`update pool_sandboxes set claimed_by = 'pool-gone-session' where name = $1`, [victim.name]);
  const reaped = await runReaper(stack);
  expect(reaped).toContainEqual(expect.objectContaining({ sandbox: victim.name, sessionId: 'pool-gone-session' }));
  expect(await pools.get(victim.name)).toBeUndefined();
  // …and the same run refilled the pool to its size.
  expect(await pools.idle(host, repo.url)).toHaveLength(2);
});

test('--pool is bounded and names the flag', async () => {
  const repo = await makeSnapshotRepo();
  await expect(addRepo(stack.client, stack.config, repo.url, { pool: '17' })).rejects.toThrow(
    /--pool: expected a whole number from 0 to 16/,
  );
  await expect(addRepo(stack.client, stack.config, repo.url, { pool: 'x' })).rejects.toThrow(/--pool/);
});
