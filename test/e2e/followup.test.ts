/**
 * Follow-ups after the pull request opened, end to end (real Temporal, Docker,
 * git; GitHub is the local fake): the session waits without a sandbox, a
 * follow-up re-provisions it from snapshot plus checkpoint, keeps round 1's
 * change, and its approved commit goes on top of the pushed one, updating the
 * same branch and pull request without a force-push.
 */
import { randomBytes } from 'node:crypto';
import { decide, followup, pullRequestClosed, type SessionStatus } from '../../workflows/api';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github';
import {
  approveAs,
  containersOf,
  git,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  startSession,
  startStack,
  waitForStatus,
  type TestStack,
} from '../support/helpers';

const TOKEN = `ghp_${randomBytes(18).toString('hex')}`;
let github: FakeGitHub;
let repo: { url: string; bare: string };
let stack: TestStack;

beforeAll(async () => {
  github = await startFakeGitHub({ owner: 'acme', repo: 'app', token: TOKEN });
  repo = await makeFixtureRepo();
  stack = await startStack({ GITHUB_TOKEN: TOKEN, GITHUB_API_URL: github.url });
});
afterAll(async () => {
  await stack?.stop();
  await github?.close();
});

test('a follow-up after the PR opened: re-provisioned from snapshot + checkpoint, round 1 kept, a second commit on the same PR', async () => {
  const id = newSessionId('follow');
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'greet in the README',
    requestedBy: 'rita',
    agent: { steps: [{ run: 'echo hello >> README.md' }] },
    verify: { test: 'sh check.sh' },
    publish: { pullRequest: { repo: 'acme/app' } },
  });
  const first = await waitForStatus(handle, inPhase('awaiting_approval'));
  await handle.executeUpdate(decide, approveAs('alice', 'pull_request', first.pendingApproval!.change));
  const parked = await waitForStatus(handle, inPhase('awaiting_followup'));
  const round1 = parked.pushed!.commit;
  const branch = parked.branch!;
  expect(git(['rev-parse', `refs/heads/${branch}`], repo.bare).trim()).toBe(round1);
  expect(await containersOf(id)).toEqual([]); // no container while it waits

  // Someone who is neither an approver nor the requester is refused.
  const refused = await handle
    .executeUpdate(followup, { args: [{ by: 'mallory', steps: [{ run: 'echo evil >> README.md' }] }] })
    .then(
      () => undefined,
      (err: Error & { cause?: Error }) => err,
    );
  expect(refused?.cause?.message).toMatch(/mallory may not send follow-ups/);

  const asked = Date.now();
  const accepted = await handle.executeUpdate(followup, {
    args: [{ by: 'rita', steps: [{ run: 'echo bye >> README.md' }] }],
  });
  expect(accepted).toEqual({ round: 2, queued: 1 });
  const second = await waitForStatus(
    handle,
    (s) => s.phase === 'awaiting_approval' && s.pendingApproval?.evidence.commit !== round1,
    300_000,
  );
  const reviewMs = Date.now() - asked;
  console.log(`follow-up → new change awaiting review: ${reviewMs} ms`); // the measurement, not asserted
  expect(second.pendingApproval!.change).not.toBe(first.pendingApproval!.change);
  await handle.executeUpdate(decide, approveAs('alice', 'pull_request', second.pendingApproval!.change));
  const again = await waitForStatus(handle, (s) => s.phase === 'awaiting_followup' && s.pushed?.commit !== round1);
  const round2 = again.pushed!.commit;

  // The branch moved forward by one commit on top of round 1's: nothing force-pushed.
  expect(git(['rev-parse', `refs/heads/${branch}`], repo.bare).trim()).toBe(round2);
  expect(git(['rev-parse', `${round2}^`], repo.bare).trim()).toBe(round1);
  // Round 1's change is kept: both lines are in the pushed README.
  expect(git(['show', `${round2}:README.md`], repo.bare)).toMatch(/hello\nbye\n$/);
  expect(git(['diff', '--stat', round1, round2], repo.bare)).toMatch(/README\.md \| 1 \+/);
  // The same pull request, not a second one.
  expect(github.pulls.filter((p) => p.head === branch)).toHaveLength(1);
  expect(again.pullRequest!.url).toBe(parked.pullRequest!.url);
  expect(again.rounds?.map((r) => [r.round, r.by, r.commit])).toEqual([
    [1, 'rita', round1],
    [2, 'rita', round2],
  ]);

  // The pull request is merged: the session ends.
  await handle.signal(pullRequestClosed, { merged: true, by: 'bob' });
  const final = (await handle.result()) as SessionStatus;
  expect(final.phase).toBe('completed');
  expect(final.closedBy).toEqual({ merged: true, by: 'bob' });
  expect(await containersOf(id)).toEqual([]);
});
