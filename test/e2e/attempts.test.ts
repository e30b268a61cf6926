/**
 * Parallel attempts end to end on real Temporal, Docker, git and PostgreSQL,
 * with the local GitHub for the pull request: three attempts at one task,
 * side by side; one picked through the API, pushed and its pull request
 * opened; two ended without a push; one approval in the audit trail. A
 * follow-up sent to the parallel session goes to the picked one.
 */
import { AuditTrail } from '../../store/audit';
import { openDatabase, type Database } from '../../store/db';
import { Redactor } from '../../platform/scrub';
import { attemptsOf } from '../../platform/attempts';
import { startSession } from '../../platform/sessions';
import { decide, pullRequestClosed, status, type AttemptsStatus, type SessionStatus } from '../../workflows/api';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github';
import { personalTokens } from '../support/identity';
import {
  git,
  makeFixtureRepo,
  newSessionId,
  remoteHasBranch,
  startServe,
  startStack,
  testAuditKey,
  testConfig,
  pollUntil,
  type FixtureRepo,
  type TestStack,
} from '../support/helpers';

const TOKEN = 'ghp_attempts000000000000000000000000000';
let github: FakeGitHub;
let stack: TestStack;
let serve: Awaited<ReturnType<typeof startServe>>;
let repo: FixtureRepo;
let db: Database;
let alice: string;

beforeAll(async () => {
  github = await startFakeGitHub({ owner: 'acme', repo: 'app', token: TOKEN });
  stack = await startStack({ GITHUB_TOKEN: TOKEN, GITHUB_API_URL: github.url });
  serve = await startServe(stack);
  repo = await makeFixtureRepo();
  ({ alice } = await personalTokens('alice'));
  db = await openDatabase(testConfig());
});
afterAll(async () => {
  await db?.close();
  await serve?.close();
  await stack?.stop();
  await github?.close();
});

const api = (path: string, body: unknown) =>
  fetch(`${serve.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${alice}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

const until = <T>(read: () => Promise<T>, ready: (t: T) => boolean, what: string) =>
  pollUntil(read, ready, what, 240_000);

test('three attempts: one picked and pushed with its pull request, two end without a push, one approval; a follow-up goes to the picked', async () => {
  const id = newSessionId('attempts');
  const step = (line: string) => ({ kind: 'script' as const, steps: [{ run: `echo '${line}' >> README.md` }] });
  await startSession(
    stack.client,
    {
      repo: { url: repo.url },
      task: 'Greet the reader',
      requestedBy: 'carol',
      verify: { test: 'sh check.sh' },
      publish: { pullRequest: { repo: 'acme/app' }, openFor: '10m' },
      approval: { approvers: ['alice'] },
      attempts: [{ agent: step('hello there') }, { agent: step('hello, reader') }, { agent: step('hello!') }],
    } as never,
    { sessionId: id, taskQueue: stack.config.DRYDOCK_TASK_QUEUE },
  );
  const shown = await until(
    () => attemptsOf(stack.client, id),
    (s) => s.attempts.length === 3 && s.attempts.every((a) => a.progress?.phase === 'awaiting_approval'),
    'three attempts at their gate',
  );
  expect(shown.phase).toBe('awaiting_pick');
  expect(shown.attempts.map((a) => a.progress?.verification?.passed)).toEqual([true, true, true]);
  const second = shown.attempts[1].progress!;
  // A pick of a change that is not the attempt's is refused; the reviewed one is taken.
  const stale = await api(`/api/sessions/${id}/pick`, {
    attempt: 2,
    change: shown.attempts[0].progress!.pending!.change,
  });
  expect(stale.status).toBe(409);
  // A prefix, even of the right change, is not a change named (T4-L1).
  const prefix = await api(`/api/sessions/${id}/pick`, { attempt: 2, change: second.pending!.change.slice(0, 12) });
  expect(prefix.status).toBe(400);
  const picked = await api(`/api/sessions/${id}/pick`, { attempt: 2, change: second.pending!.change });
  expect(picked.status).toBe(200);
  expect(await picked.json()).toMatchObject({ attempt: 2, by: 'alice', change: second.pending!.change });

  const children = shown.attempts.map((a) => stack.client.workflow.getHandle(a.sessionId));
  const open = await until(
    () => children[1].query(status),
    (s) => s.phase === 'awaiting_followup',
    'the picked attempt published and waiting for follow-ups',
  );
  const aside = (await Promise.all([children[0].result(), children[2].result()])) as SessionStatus[];
  expect(aside.map((s) => [s.phase, s.failureCause, s.pushed])).toEqual([
    ['cancelled', 'not_picked', undefined],
    ['cancelled', 'not_picked', undefined],
  ]);
  // One branch, the picked change's; one pull request; one approval among the three trails.
  const branch = `drydock/${id}`;
  expect(remoteHasBranch(repo.bare, branch)).toBe(true);
  expect(git(['show', `${branch}:README.md`], repo.bare)).toContain('hello, reader');
  expect(
    git(['reflog', 'show', '--format=%H', `refs/heads/${branch}`], repo.bare)
      .trim()
      .split('\n'),
  ).toHaveLength(1);
  expect(github.pulls.map((p) => p.head)).toEqual([branch]);
  expect(open.pullRequest?.url).toBe(github.pulls[0].html_url);
  const trail = new AuditTrail(db.pool, 'h', new Redactor(), testAuditKey());
  const kinds = async (sessionId: string) => (await trail.events(sessionId)).map((e) => e.kind);
  const approvals = (await Promise.all(shown.attempts.map((a) => trail.events(a.sessionId))))
    .flat()
    .filter((e) => e.kind === 'approval');
  expect(approvals.map((e) => [e.sessionId, e.actor, e.data.decision, e.data.change])).toEqual([
    [shown.attempts[1].sessionId, 'alice', 'approve', second.pending!.change],
  ]);
  for (const a of [shown.attempts[0], shown.attempts[2]]) {
    expect(await kinds(a.sessionId)).not.toContain('push');
    expect(await kinds(a.sessionId)).toContain('teardown');
  }

  // A follow-up to the parallel session is the picked one's next round.
  const followup = await api(`/api/sessions/${id}/followups`, { steps: [{ run: "echo 'and welcome' >> README.md" }] });
  expect({ status: followup.status, body: await followup.json() }).toMatchObject({ status: 202, body: { round: 2 } });
  const round2 = await until(
    () => children[1].query(status),
    (s) => s.phase === 'awaiting_approval' && s.round === 2,
    'the follow-up round at its gate',
  );
  await children[1].executeUpdate(decide, { args: [{ decision: 'approve', action: 'pull_request', by: 'alice' }] });
  await until(
    () => children[1].query(status),
    (s) => s.phase === 'awaiting_followup' && s.round === 2,
    'round 2 published',
  );
  expect(git(['show', `${branch}:README.md`], repo.bare)).toContain('and welcome');
  expect(round2.rounds?.at(-1)?.by).toBe('alice');
  await children[1].signal(pullRequestClosed, { merged: true, by: 'bob' });
  const parent = (await stack.client.workflow.getHandle(id).result()) as AttemptsStatus;
  expect([parent.phase, parent.picked?.attempt]).toEqual(['completed', 2]);
});
