/**
 * The audit trail and the metrics, on the suite's real PostgreSQL server, on a
 * second server that is stopped in the middle of a session or of a write, and
 * on the embedded PGlite path.
 */
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client, Pool } from 'pg';
import { AuditTrail, canonicalJson, rowHash, type AuditRow } from '../../store/audit';
import { Redactor } from '../../platform/scrub';
import { openDatabase } from '../../store/db';
import { decide, type SessionStatus } from '../../workflows/api';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github';
import {
  approveAs,
  containersOf,
  freePort,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  remoteHasBranch,
  projectRoot,
  runCli,
  scriptedSession,
  startSession,
  startStack,
  testAuditKey,
  waitForStatus,
  type TestStack,
} from '../support/helpers';
import { PostgresServer } from '../support/postgres';

const TOKEN = `ghp_${randomBytes(18).toString('hex')}`;
const TOKEN_PATTERN = /gh[pousr]_[A-Za-z0-9]{20,}/;
let github: FakeGitHub;
let repo: { url: string; bare: string };
let stack: TestStack;
let pool: Pool;

beforeAll(async () => {
  github = await startFakeGitHub({ owner: 'acme', repo: 'app', token: TOKEN });
  repo = await makeFixtureRepo();
  stack = await startStack({ GITHUB_TOKEN: TOKEN, GITHUB_API_URL: github.url });
  pool = new Pool({ connectionString: process.env.DATABASE_URL });
});
afterAll(async () => {
  await stack?.stop();
  await github?.close();
  await pool?.end();
});

const approve = (action: 'push' | 'pull_request') => approveAs('rita', action);

const remoteHas = (branch: string) => remoteHasBranch(repo.bare, branch);

async function rowsOf(sessionId: string, db: Pool = pool) {
  return (await db.query('select * from audit_events where session_id = $1 order by seq', [sessionId])).rows;
}

/** What a superuser can do behind the append-only triggers: run `sql` with them off. */
async function behindTheTriggers(sql: string, params: unknown[]): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('set session_replication_role = replica');
    await client.query(sql, params);
    await client.query('set session_replication_role = origin');
  } finally {
    client.release();
  }
}

type RowContent = Omit<AuditRow, 'prevHash' | 'hash'>;
/** The hash of an unkeyed chain: sha256(prev_hash + "\n" + canonical content). */
const unkeyed = (prevHash: string, content: RowContent) =>
  createHash('sha256').update(prevHash).update('\n').update(canonicalJson(content)).digest('hex');

/** Edits row `seq`'s data and recomputes that row's hash and every later one with `hashOf`. */
async function forgeRow(
  sessionId: string,
  seq: number,
  data: Record<string, unknown>,
  hashOf: (prevHash: string, content: RowContent) => string,
): Promise<void> {
  let prev: string | undefined;
  for (const r of await rowsOf(sessionId)) {
    if (r.seq < seq) continue;
    const content: RowContent = {
      sessionId: r.session_id,
      seq: r.seq,
      key: r.event_key,
      kind: r.kind,
      at: r.at.toISOString(),
      actor: r.actor,
      host: r.host,
      activityId: r.activity_id,
      attempt: r.attempt,
      data: r.seq === seq ? data : r.data,
    };
    const prevHash = prev ?? r.prev_hash;
    prev = hashOf(prevHash, content);
    await behindTheTriggers('update audit_events set data = $1, prev_hash = $2, hash = $3 where id = $4', [
      JSON.stringify(content.data),
      prevHash,
      prev,
      r.id,
    ]);
  }
}

test('a full session writes each event once, in order, even when an activity is retried; no token in any row', async () => {
  const id = newSessionId('audit-full');
  github.failNext(1, 503); // the pull request activity's first attempt fails after recording its intent
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'greet in the README',
    requestedBy: 'sam',
    // A token-shaped string in a command: the trail must not keep it.
    agent: { steps: [{ run: `echo "ghp_${'x'.repeat(36)}" > /dev/null; echo hello >> README.md` }] },
    verify: { test: 'sh check.sh' },
    publish: { pullRequest: { repo: 'acme/app' }, openFor: '1s' }, // not open for follow-ups a week
    approval: { separateGates: true },
  });
  await waitForStatus(handle, inPhase('awaiting_approval'));
  await handle.executeUpdate(decide, approve('push'));
  await waitForStatus(handle, (s) => s.pendingApproval?.action === 'pull_request');
  await handle.executeUpdate(decide, approve('pull_request'));
  const final = (await handle.result()) as SessionStatus;
  expect(final.phase).toBe('completed');

  const rows = await rowsOf(id);
  expect(rows.map((r) => `${r.kind}${r.data.stage ? `:${r.data.stage}` : ''}`)).toEqual([
    'sandbox.provisioned',
    'command',
    'command',
    'verification',
    'approval',
    'push:intent',
    'push:done',
    'approval',
    'pull_request:intent',
    'pull_request:done',
    // Parked for follow-ups: the sandbox goes (its checkpoint stays); then the session's own teardown.
    'teardown',
    'teardown',
  ]);
  expect(rows.filter((r) => r.kind === 'teardown').map((r) => r.data.replaced ?? false)).toEqual([true, false]);
  expect(rows.map((r) => r.seq)).toEqual(rows.map((_, i) => i + 1));
  const prDone = rows.find((r) => r.kind === 'pull_request' && r.data.stage === 'done');
  expect(prDone.attempt).toBe(2);
  expect(prDone.data.url).toBe(final.pullRequest!.url);
  const approval = rows.find((r) => r.kind === 'approval');
  expect(approval).toMatchObject({ actor: 'rita', data: { action: 'push', decision: 'approve' } });
  expect(approval.data.change).toBe(final.decisions[0].change);
  expect(rows.find((r) => r.kind === 'command').data.command).toContain('[redacted]');

  const text = JSON.stringify(rows);
  expect(text).not.toMatch(TOKEN_PATTERN);
  expect(text).not.toContain(TOKEN);

  const verified = await runCli(['audit', 'verify', id], {});
  expect(verified).toMatchObject({ code: 0 });
  expect(verified.stdout).toContain('ok: 12 events in 1 session chain(s)');

  const metrics = (await pool.query('select * from session_metrics where session_id = $1', [id])).rows[0];
  expect(metrics).toMatchObject({ outcome: 'completed', approved: true, pr_url: final.pullRequest!.url, retries: 1 });
  expect(Number(metrics.time_to_ready_ms)).toBeGreaterThan(0);
  expect(Number(metrics.review_wait_ms)).toBeGreaterThan(0);
  // Decided through the update with no console or CLI view: waiting is measured, review time is not.
  expect(metrics).toMatchObject({ review_active_ms: null, decisions_unmeasured: 2 });
  expect(approval.data.review).toBe('unmeasured');
});

test('UPDATE and DELETE are refused; a row edited behind the trigger is named by audit verify', async () => {
  const id = newSessionId('audit-tamper');
  const trail = new AuditTrail(pool, 'test-host', new Redactor(), testAuditKey());
  for (const [i, kind] of (['sandbox.provisioned', 'command', 'teardown'] as const).entries()) {
    await trail.append({ sessionId: id, key: `e${i}`, kind, actor: 'drydock', data: { i } });
  }
  await expect(pool.query("update audit_events set actor = 'mallory' where session_id = $1", [id])).rejects.toThrow(
    /append-only: UPDATE refused/,
  );
  await expect(pool.query('delete from audit_events where session_id = $1', [id])).rejects.toThrow(
    /append-only: DELETE refused/,
  );
  await expect(pool.query('truncate audit_events')).rejects.toThrow(/append-only: TRUNCATE refused/);
  expect((await runCli(['audit', 'verify', id], {})).code).toBe(0);

  // A superuser disables triggers for the session and edits row 2.
  await behindTheTriggers(`update audit_events set data = '{"i": 99}' where session_id = $1 and seq = 2`, [id]);
  const result = await runCli(['audit', 'verify', id], {});
  expect(result.code).toBe(1);
  expect(result.stdout).toContain(`BROKEN: session ${id}, row 2`);
  expect(result.stdout).toContain('edited');
});

test('a row edited with every later hash recomputed (unkeyed SHA-256) is named by audit verify: the chain is keyed', async () => {
  const id = newSessionId('audit-forge');
  const trail = new AuditTrail(pool, 'test-host', new Redactor(), testAuditKey());
  for (const [i, kind] of (['sandbox.provisioned', 'command', 'teardown'] as const).entries()) {
    await trail.append({ sessionId: id, key: `e${i}`, kind, actor: 'drydock', data: { i } });
  }
  await forgeRow(id, 2, { i: 99 }, unkeyed);
  const rows = await rowsOf(id);
  expect(rows[1].data).toEqual({ i: 99 });
  expect(rows[2].prev_hash).toBe(rows[1].hash); // the forged chain links up

  const result = await runCli(['audit', 'verify', id], {});
  expect(result.code).toBe(1);
  expect(result.stdout).toContain(`BROKEN: session ${id}, row 2`);
  expect(result.stdout).toContain('edited');
});

test("a session's last rows removed are named by audit verify against the end its Temporal result records", async () => {
  const id = newSessionId('audit-truncate');
  const handle = await startSession(stack, id, scriptedSession(repo.url, 'greet', 'echo hello >> README.md'));
  await waitForStatus(handle, inPhase('awaiting_approval'));
  await handle.executeUpdate(decide, approve('push'));
  const final = (await handle.result()) as SessionStatus;
  const rows = await rowsOf(id);
  expect(final.audit).toEqual({ events: rows.length, head: rows[rows.length - 1].hash });
  const whole = await runCli(['audit', 'verify', id], {});
  expect(whole.stdout).toContain(`ok: ${rows.length} events in 1 session chain(s); 1 closed session(s) end`);

  // With the key, a rewritten chain verifies by its hashes, but no longer ends where Temporal says.
  const key = testAuditKey();
  await forgeRow(id, 2, { command: 'true' }, (prevHash, content) => rowHash(key, { ...content, prevHash }));
  const rewritten = await runCli(['audit', 'verify', id], {});
  expect(rewritten.code).toBe(1);
  expect(rewritten.stdout).toContain(
    `BROKEN: session ${id}, row ${rows.length} (id ${rows[rows.length - 1].id}): its hash is not the head`,
  );

  // The push's "done" row and the teardown go: what is left is a whole chain, one push short.
  await behindTheTriggers('delete from audit_events where session_id = $1 and seq > $2', [id, rows.length - 2]);
  const result = await runCli(['audit', 'verify', id], {});
  expect(result.code).toBe(1);
  expect(result.stdout).toContain(
    `BROKEN: session ${id}, row ${rows.length}: the session's Temporal result records ${rows.length} events, the trail has ${rows.length - 2}`,
  );
  // Across all sessions too.
  const all = await runCli(['audit', 'verify'], {});
  expect(all.code).toBe(1);
  expect(all.stdout).toContain(`BROKEN: session ${id}, row ${rows.length}`);
});

test('with the audit database stopped, the approved push waits; once it is back the session completes and the trail is whole', async () => {
  const server = new PostgresServer(await mkdtemp(path.join(tmpdir(), 'drydock-pg-outage-')), await freePort());
  await server.start();
  const outageStack = await startStack({ DATABASE_URL: server.url });
  const db = new Pool({ connectionString: server.url });
  db.on('error', () => {});
  try {
    const id = newSessionId('audit-outage');
    const handle = await startSession(outageStack, id, scriptedSession(repo.url, 'greet', 'echo hello >> README.md'));
    await waitForStatus(handle, inPhase('awaiting_approval'));
    await server.stop();
    await handle.executeUpdate(decide, approve('push'));
    // Long enough for the approval record and the push to have happened, were they not waiting.
    await new Promise((r) => setTimeout(r, 5_000));
    expect(remoteHas(`drydock/${id}`)).toBe(false);
    expect((await handle.describe()).status.name).toBe('RUNNING');

    await server.start();
    const final = (await handle.result()) as SessionStatus;
    expect(final.phase).toBe('completed');
    expect(remoteHas(`drydock/${id}`)).toBe(true);
    const kinds = (await rowsOf(id, db)).map((r) => r.kind);
    expect(kinds).toEqual(['sandbox.provisioned', 'command', 'approval', 'push', 'push', 'teardown']);
    expect((await runCli(['audit', 'verify', id], { DATABASE_URL: server.url })).code).toBe(0);
    expect(await containersOf(id)).toHaveLength(0);
  } finally {
    await db.end();
    await outageStack.stop();
    await server.stop();
  }
});

test('a PostgreSQL restart in the middle of an audit write fails only that try: the write waits for the server, and the process goes on', async () => {
  const server = new PostgresServer(await mkdtemp(path.join(tmpdir(), 'drydock-pg-restart-')), await freePort());
  await server.start();
  const db = await openDatabase({
    DATABASE_URL: server.url,
    DRYDOCK_DATA_DIR: await mkdtemp(path.join(tmpdir(), 'd-')),
  });
  // Another connection holds the table against writes (reads pass), so the write's insert is waiting when the server goes.
  const holder = new Client({ connectionString: server.url });
  holder.on('error', () => {});
  await holder.connect();
  try {
    const audit = new AuditTrail(db.pool, 'restart-test', new Redactor([]), testAuditKey());
    const id = newSessionId('audit-restart');
    await holder.query('begin');
    await holder.query('lock table audit_events in exclusive mode');
    const written = audit.append({ sessionId: id, key: 'step-1/command', kind: 'command', actor: 'agent', data: {} });
    const waiting = async () =>
      (await holder.query("select count(*)::int as n from pg_locks where locktype = 'relation' and not granted"))
        .rows[0].n;
    while ((await waiting()) === 0) await new Promise((r) => setTimeout(r, 100));
    await server.stop();
    await server.start();
    // Before the fix, the checked-out client's unheard 'error' ended this process here.
    expect((await written).seq).toBe(1);
    expect((await audit.verify(id)).broken).toEqual([]);
  } finally {
    await db.close();
    await server.stop();
  }
});

test('appends racing for one session keep one linear chain, each event once, in two statements each (no transaction, no lock)', async () => {
  const db = await openDatabase({
    DATABASE_URL: process.env.DATABASE_URL,
    DRYDOCK_DATA_DIR: await mkdtemp(path.join(tmpdir(), 'd-')),
  });
  // Counted at the client: what one append costs in round trips to the database.
  let statements = 0;
  const counted = Object.assign(Object.create(db.pool) as Pool, {
    query: (...args: Parameters<Pool['query']>) => {
      statements++;
      return (db.pool.query as (...a: unknown[]) => unknown)(...args);
    },
    connect: (...args: Parameters<Pool['connect']>) => {
      statements += 100; // a checked-out client: a transaction
      return (db.pool.connect as (...a: unknown[]) => unknown)(...args);
    },
  });
  try {
    const id = newSessionId('audit-race');
    const writers = [0, 1, 2].map(() => new AuditTrail(counted, 'race-test', new Redactor([]), testAuditKey()));
    const event = (i: number) => ({
      sessionId: id,
      key: `step-${i}/command`,
      kind: 'command' as const,
      actor: 'agent',
      data: { i },
    });
    await writers[0].append(event(0));
    expect(statements).toBe(2);
    // Twelve events, each written by three writers at once (a retried activity beside the first try).
    await Promise.all(Array.from({ length: 12 }, (_, i) => writers.map((w) => w.append(event(i + 1)))).flat());
    const rows = await rowsOf(id);
    expect(rows.map((r) => r.seq)).toEqual(Array.from({ length: 13 }, (_, i) => i + 1));
    expect(new Set(rows.map((r) => r.event_key)).size).toBe(13);
    expect((await writers[0].verify(id)).broken).toEqual([]);
  } finally {
    await db.close();
  }
});

test('report on seeded metrics gives the expected figures', async () => {
  const repoUrl = `file:///seed-${randomBytes(3).toString('hex')}`;
  const day = 24 * 3600_000;
  const seed = [
    // [id, outcome, cause, ready ms, cost, wait min, review min (null: unmeasured), unmeasured decisions, approved, merged, age in days]
    ['a', 'completed', null, 2000, 0.5, 10, 2, 0, true, true, 1],
    ['b', 'completed', null, 4000, 1.0, 20, 4, 0, true, false, 2],
    ['f', 'completed', null, 4000, 0, 30, null, 1, true, false, 2], // approved by a signal
    ['c', 'rejected', 'rejected', 3000, 0.25, 5, 1, 0, false, null, 3],
    ['d', 'failed', 'verification_failed', null, 0, 0, null, 0, false, null, 1],
    ['e', 'completed', null, 1000, 9, 1, 1, 0, true, true, 30], // outside --since 7d
  ] as const;
  for (const [id, outcome, cause, ready, cost, wait, review, unmeasured, approved, merged, age] of seed) {
    const started = new Date(Date.now() - age * day);
    await pool.query(
      `insert into session_metrics (session_id, repo, started_at, ended_at, outcome, failure_cause, time_to_ready_ms,
         cost_usd, review_wait_ms, review_active_ms, decisions_unmeasured, approved, merged)
         values ($1, $2, $3, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
      [
        `${repoUrl}-${id}`,
        repoUrl,
        started,
        outcome,
        cause,
        ready,
        cost,
        wait * 60_000,
        review === null ? null : review * 60_000,
        unmeasured,
        approved,
        merged,
      ],
    );
  }
  const json = await runCli(['report', '--since', '7d', '--repo', repoUrl, '--format', 'json'], {});
  expect(json.code).toBe(0);
  expect(JSON.parse(json.stdout)).toMatchObject({
    sessions: 5,
    completed: 3,
    approved: 3,
    merged: 1,
    acceptanceRate: 0.75,
    medianTimeToReadySeconds: 3.5,
    // a and b: 2 accepted changes in 6 measured minutes; f was approved without a measurement.
    acceptedChangesPerReviewMinute: 0.333,
    reviewMinutes: 7,
    medianReviewMinutesPerAcceptedChange: 3,
    acceptedUnmeasured: 1,
    medianWaitForReviewMinutes: 15,
    totalCostUsd: 1.75,
    costPerMergedPrUsd: 1.75,
    failuresByCause: { rejected: 1, verification_failed: 1 },
  });
  const csv = await runCli(['report', '--repo', repoUrl, '--format', 'csv'], {});
  expect(csv.stdout.split('\n')).toEqual(
    expect.arrayContaining([
      'metric,value',
      'sessions,5',
      'accepted changes per review minute,0.333',
      'median wait for review (min),15',
      'failures: rejected,1',
    ]),
  );
  const bad = await runCli(['report', '--since', 'last week'], {});
  expect(bad).toMatchObject({ code: 1 });
  expect(bad.stderr).toContain('--since: expected a duration');
});

test('the embedded PGlite path: migrations, the chain, the append-only trigger and a second process sharing it', async () => {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'drydock-pglite-'));
  const run = spawnSync(
    path.join(projectRoot, 'node_modules', '.bin', 'tsx'),
    ['test/support/embedded-db.ts', dataDir],
    {
      cwd: projectRoot,
      encoding: 'utf8',
    },
  );
  expect(run.stderr).toBe('');
  const seen = JSON.parse(run.stdout);
  expect(seen.descriptions).toEqual([
    `PGlite in ${dataDir}/pglite`,
    `PGlite in ${dataDir}/pglite (served by another drydock process)`,
  ]);
  expect(seen.events).toEqual([
    [1, 'command', 'echo [redacted]'],
    [2, 'teardown', null],
  ]);
  expect(seen.verifiedBefore.broken).toEqual([]);
  expect(seen.deleteError).toMatch(/append-only: DELETE refused/);
  expect(seen.verifiedAfter.broken).toEqual([
    expect.objectContaining({ seq: 1, reason: expect.stringContaining('edited') }),
  ]);
  expect(seen.sessions).toBe(0);
});
