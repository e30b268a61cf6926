/**
 * Fixing its own pull request (docs/webhooks.md, CI on a drydock pull request)
 * on real Temporal, Docker and git, against the GitHub stand-in and the model
 * stand-in: CI failing on the pull request a session opened becomes one more
 * round of that session (the failure's annotations and log tail in the
 * agent's next turn, fenced), which verifies again and waits at the gate;
 * with DRYDOCK_CI_FIX_ROUNDS=1 the next failure is refused and said on the
 * pull request. A person's follow-up wins: a CI failure queued while a round
 * runs is replaced by a person's `/drydock` comment that comes after it, and
 * the next round is the person's alone.
 */
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { sign } from '@octokit/webhooks-methods';
import type { WorkflowHandle } from '@temporalio/client';
import { decide, type SessionStatus } from '../../workflows/api';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github';
import { startFakeProviders, lastUserMessage, type FakeProviders, type Turn } from '../support/fake-providers';
import { actionable, EXAMPLE_REPO } from '../support/github-examples';
import {
  approveAs,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  startServe,
  startSession,
  startStack,
  waitForStatus,
  type TestStack,
} from '../support/helpers';

const SECRET = 'ci-followup-webhook-secret';
const TOKEN = `ghp_${randomBytes(18).toString('hex')}`;
const KEY = `sk-test-${randomBytes(12).toString('hex')}`;
let github: FakeGitHub;
let model: FakeProviders;
let stack: TestStack;
let serve: Awaited<ReturnType<typeof startServe>>;
let repo: { url: string; bare: string };

beforeAll(async () => {
  const [owner, name] = EXAMPLE_REPO.split('/');
  github = await startFakeGitHub({ owner, repo: name, token: TOKEN });
  model = await startFakeProviders({ apiKey: KEY });
  repo = await makeFixtureRepo();
  stack = await startStack({
    GITHUB_TOKEN: TOKEN,
    GITHUB_API_URL: github.url,
    DRYDOCK_MODEL_BASE_URL: model.baseUrl,
    DRYDOCK_MODEL_API: 'anthropic',
    DRYDOCK_MODEL_API_KEY: KEY,
  });
  github.state.permissions.Codertocat = 'write';
  serve = await startServe(stack, {
    DRYDOCK_WEBHOOK_SECRETS: [SECRET],
    DRYDOCK_CI_FIX_ROUNDS: 1,
    DRYDOCK_REPOS: [`${EXAMPLE_REPO}=${repo.url}`],
  });
});
afterAll(async () => {
  await serve?.close();
  await stack?.stop();
  await github?.close();
  await model?.close();
});

/** A signed GitHub delivery to drydock serve. */
async function deliver(event: string, payload: unknown): Promise<{ status: number; body: any }> {
  const body = JSON.stringify(payload);
  const headers = {
    'content-type': 'application/json',
    'x-github-event': event,
    'x-github-delivery': `${process.env.DRYDOCK_TEST_RUN}-${randomBytes(6).toString('hex')}`,
    'x-hub-signature-256': await sign(SECRET, body),
  };
  return new Promise((resolve, reject) => {
    const req = request(`${serve.url}/webhooks/github`, { method: 'POST', headers }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, body: text ? JSON.parse(text) : undefined }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** The failed workflow run `runId` at `sha` on the session's branch, with one failed job and its evidence. */
function failedRun(sessionId: string, runId: number, sha: string) {
  const jobId = runId * 10;
  github.state.workflowRuns[runId] = [jobId];
  github.state.jobs[jobId] = {
    name: 'test (node 20)',
    conclusion: 'failure',
    steps: [{ name: 'Run npm test', number: 3, conclusion: 'failure' }],
    annotations: [
      {
        path: 'README.md',
        start_line: 2,
        end_line: 2,
        annotation_level: 'failure',
        title: 'lint › greeting',
        message: `the greeting must end with "!" (run ${runId})`,
      },
    ],
    log: `2026-12-05T02:00:00.0000000Z FAIL lint: README.md line 2 (run ${runId})\n`,
  };
  const run = actionable('workflow_run');
  Object.assign(run.workflow_run, { id: runId, head_sha: sha, head_branch: `drydock/${sessionId}`, name: 'CI' });
  run.workflow_run.conclusion = 'failure';
  run.workflow_run.head_repository.full_name = EXAMPLE_REPO;
  return run;
}

/** Approves whatever the gate asks until the session waits for follow-ups (its pull request open). */
async function throughTheGate(handle: WorkflowHandle): Promise<SessionStatus> {
  for (;;) {
    const s = await waitForStatus(
      handle,
      (x) => x.phase === 'awaiting_followup' || (x.phase === 'awaiting_approval' && !!x.pendingApproval),
      120_000,
    );
    if (s.phase === 'awaiting_followup') return s;
    await handle.executeUpdate(decide, approveAs('alice', s.pendingApproval!.action, s.pendingApproval!.change));
  }
}

const edit = (from: string, to: string) => ({
  name: 'edit_file',
  arguments: { path: 'README.md', old_string: from, new_string: to },
});

test('CI failing on the pull request a session opened gives it one more round; the cap refuses the next', async () => {
  const id = newSessionId('cifix');
  model.script([{ toolCalls: [edit('# fixture\n', '# fixture\nhello\n')] }, { text: 'Greeted.' }]);
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'greet in the README',
    requestedBy: 'rita',
    agent: { kind: 'openai', model: 'fake-1' },
    verify: { test: 'sh check.sh' },
    publish: { pullRequest: { repo: EXAMPLE_REPO } },
  });
  try {
    await fixesOnce(id, handle);
  } finally {
    await handle.cancel().catch(() => undefined);
    await handle.result().catch(() => undefined); // torn down before the test ends
  }
});

async function fixesOnce(id: string, handle: WorkflowHandle): Promise<void> {
  const opened = await throughTheGate(handle);
  expect(opened.pullRequest).toMatchObject({ created: true });
  const firstCommit = opened.rounds!.at(-1)!.commit!;

  // 1. CI fails on the pull request: the session gets the failure as its next round.
  const before = model.requests.length;
  model.script([{ toolCalls: [edit('hello\n', 'hello!\n')] }, { text: 'Fixed the greeting.' }]);
  const sent = await deliver('workflow_run', failedRun(id, 9101, firstCommit));
  expect(sent).toMatchObject({ status: 202, body: { sessionId: id, round: 2 } });
  // It verifies again and waits at the gate with the new change.
  const atGate = await waitForStatus(handle, (s) => s.round === 2 && s.phase === 'awaiting_approval', 120_000);
  expect(atGate.ciRounds).toBe(1);
  expect(atGate.rounds!.at(-1)).toMatchObject({ round: 2, by: 'drydock (CI)' });
  expect(atGate.verification).toMatchObject({ passed: true });
  const heard = lastUserMessage(model.requests[before]);
  expect(heard).toMatch(/^CI failed on your pull request #\d+: "CI" failed at /);
  expect(heard).toMatch(/=== BEGIN GITHUB DATA [0-9a-f]{16}: /);
  expect(heard).toContain('the greeting must end with "!" (run 9101)');
  expect(heard).toContain('FAIL lint: README.md line 2 (run 9101)');
  const fixed = await throughTheGate(handle);
  const secondCommit = fixed.rounds!.at(-1)!.commit!;
  expect(secondCommit).not.toBe(firstCommit);

  // A failure of the commit the session has moved on from is not sent.
  const stale = await deliver('workflow_run', failedRun(id, 9103, firstCommit));
  expect(stale).toMatchObject({ status: 202, body: { ignored: expect.stringMatching(/is not the head/) } });

  // 2. CI failing again is past the cap (1 round): refused, said once on the pull request.
  const requests = model.requests.length;
  const again = await deliver('workflow_run', failedRun(id, 9102, secondCommit));
  expect(again).toMatchObject({ status: 202, body: { ignored: expect.stringMatching(/at most 1 automatic rounds/) } });
  const pr = fixed.pullRequest!.number;
  expect(github.state.comments.filter((c) => c.issue === pr && c.body.includes('will not fix CI'))).toHaveLength(1);
  const still = await waitForStatus(handle, inPhase('awaiting_followup'));
  expect(still).toMatchObject({ round: 2, ciRounds: 1 });
  expect(model.requests.length).toBe(requests); // the agent heard nothing more
}

/** A person's `/drydock` comment (GitHub's example, by Codertocat) on pull request `number`. */
function personComment(number: number, id: number, text: string) {
  const payload = actionable('issue_comment');
  payload.comment.body = `/drydock ${text}`;
  payload.comment.id = id;
  payload.issue.number = number;
  payload.issue.pull_request = { url: `https://api.github.com/repos/${EXAMPLE_REPO}/pulls/${number}` };
  return payload;
}

test("a person's follow-up wins: a CI failure queued while a round runs is replaced by a person's comment", async () => {
  const id = newSessionId('ciwins');
  model.script([{ toolCalls: [edit('# fixture\n', '# fixture\nhello\n')] }, { text: 'Greeted.' }]);
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'greet in the README',
    requestedBy: 'github:Codertocat',
    agent: { kind: 'openai', model: 'fake-1' },
    verify: { test: 'sh check.sh' },
    publish: { pullRequest: { repo: EXAMPLE_REPO } },
  });
  try {
    await personWins(id, handle);
  } finally {
    await handle.cancel().catch(() => undefined);
    await handle.result().catch(() => undefined);
  }
});

async function personWins(id: string, handle: WorkflowHandle): Promise<void> {
  const opened = await throughTheGate(handle);
  const pr = opened.pullRequest!.number;
  const pushed = opened.rounds!.at(-1)!.commit!;
  // Round 2 (a person's comment) holds in its first model call until the test lets it go.
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const turns: (Turn | (() => Promise<Turn>))[] = [
    async () => {
      await held;
      return { toolCalls: [edit('hello\n', 'hello there\n')] };
    },
    { text: 'Said more.' },
    { toolCalls: [edit('hello there\n', 'hello there, friend\n')] },
    { text: 'Greeted a friend.' },
  ];
  model.script(async () => {
    const next = turns.shift() ?? { text: 'done' };
    return typeof next === 'function' ? next() : next;
  });
  const before = model.requests.length;
  const base = 7_000_000 + (Date.now() % 1_000_000);
  expect(await deliver('issue_comment', personComment(pr, base, 'say more than hello'))).toMatchObject({
    status: 202,
    body: { sessionId: id, round: 2 },
  });
  await waitForStatus(handle, (s) => s.round === 2 && s.phase === 'agent' && model.requests.length > before, 120_000);

  // While round 2 runs, CI fails on the pushed commit: queued for round 3 ...
  const ci = await deliver('workflow_run', failedRun(id, 9201, pushed));
  expect(ci).toMatchObject({ status: 202, body: { sessionId: id, round: 3, queued: 1 } });
  // ... until a person's follow-up comes: it takes the CI failure's place (still one waiting).
  const person = await deliver('issue_comment', personComment(pr, base + 1, 'greet a friend'));
  expect(person).toMatchObject({ status: 202, body: { sessionId: id, round: 3, queued: 1 } });
  // Another failed run of the same commit is the same follow-up (keyed by the commit): it does not come back.
  const again = await deliver('workflow_run', failedRun(id, 9202, pushed));
  expect(again).toMatchObject({ status: 202, body: { sessionId: id, round: 3, queued: 1 } });
  release();

  const done = await throughTheGate(handle);
  expect(done.rounds!.map((r) => [r.round, r.by])).toEqual([
    [1, 'github:Codertocat'],
    [2, 'github:Codertocat'],
    [3, 'github:Codertocat'],
  ]);
  expect(done.rounds!.at(-1)!.request).toBe('github:Codertocat: greet a friend');
  expect(done.ciRounds ?? 0).toBe(0);
  // The agent heard the person, never the CI failure.
  const heard = model.requests.slice(before).map(lastUserMessage);
  expect(heard).toContain('greet a friend');
  expect(heard.join('\n')).not.toContain('CI failed');
  expect(github.state.comments.filter((c) => c.issue === pr && c.body.includes('did not take'))).toHaveLength(0);
}
