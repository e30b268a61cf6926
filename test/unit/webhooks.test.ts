/** Webhook signatures and what each GitHub event means, without a server. */
import { sign } from '@octokit/webhooks-methods';
import { parseTokens, loadApiTokens } from '../../lib/access';
import { parseRepoList, repoNameOf } from '../../lib/repos';
import { routeGitHubEvent, signatureMatches } from '../../lib/webhooks';
import { example, EXAMPLE_REPO } from '../github-examples';

test("GitHub's known-answer vector verifies, and nothing else does", async () => {
  // From GitHub's docs, "Validating webhook deliveries".
  const secret = "It's a Secret to Everybody";
  const body = Buffer.from('Hello, World!');
  const expected = 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17';
  expect(await sign(secret, 'Hello, World!')).toBe(expected);
  expect(await signatureMatches([secret], body, expected)).toBe(true);
  expect(await signatureMatches([secret], Buffer.from('Hello, World?'), expected)).toBe(false);
  expect(await signatureMatches(['another secret'], body, expected)).toBe(false);
  expect(await signatureMatches([secret], body, expected.replace('sha256=', 'sha1='))).toBe(false);
  expect(await signatureMatches([secret], body, undefined)).toBe(false);
  expect(await signatureMatches([], body, expected)).toBe(false);
});

test('during a rotation a delivery signed with the old secret still verifies', async () => {
  const body = Buffer.from('{"zen":"Keep it logically awesome."}');
  const signed = await sign('old-secret-123456', body.toString());
  expect(await signatureMatches(['new-secret-123456', 'old-secret-123456'], body, signed)).toBe(true);
  expect(await signatureMatches(['new-secret-123456'], body, signed)).toBe(false);
});

test('a body that is not UTF-8 never verifies (two such bodies could decode to one string)', async () => {
  const secret = 's3cret-s3cret-s3cret';
  const text = '{"a":"\uFFFD"}';
  const signature = await sign(secret, text);
  expect(await signatureMatches([secret], Buffer.from(text), signature)).toBe(true);
  expect(
    await signatureMatches([secret], Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]), signature),
  ).toBe(false);
});

test('an issue labelled drydock starts a session with title and body as the task', () => {
  const payload = example('issues', (p) => p.action === 'labeled');
  payload.label.name = 'drydock';
  expect(routeGitHubEvent('issues', 'ABC-123', payload)).toEqual({
    kind: 'start',
    sessionId: 'gh-abc-123',
    repo: EXAMPLE_REPO,
    task: "Spelling error in the README file\n\nIt looks like you accidently spelled 'commit' with two 't's.",
    requestedBy: 'Codertocat',
    source: 'issue #1 labelled drydock',
  });
  payload.label.name = 'bug';
  expect(routeGitHubEvent('issues', 'x', payload)).toMatchObject({ kind: 'ignore' });
  expect(
    routeGitHubEvent(
      'issues',
      'x',
      example('issues', (p) => p.action === 'opened'),
    ),
  ).toMatchObject({
    kind: 'ignore',
  });
});

test('/drydock comments: the task, the PR head for PR comments, only from collaborators', () => {
  const payload = example('issue_comment', (p) => p.action === 'created');
  payload.comment.body = '/drydock fix the spelling\nin README.md';
  expect(routeGitHubEvent('issue_comment', 'd1', payload)).toMatchObject({
    kind: 'start',
    sessionId: 'gh-d1',
    task: expect.stringMatching(
      /^fix the spelling\nin README.md\n\n\(asked on https:\/\/github.com\/Codertocat\/Hello-World\/issues\/1: Spelling error/,
    ),
    requestedBy: 'Codertocat',
  });
  payload.issue.pull_request = { url: 'https://api.github.com/repos/Codertocat/Hello-World/pulls/1' };
  expect(routeGitHubEvent('issue_comment', 'd2', payload)).toMatchObject({ kind: 'start', ref: 'refs/pull/1/head' });
  payload.comment.author_association = 'NONE';
  expect(routeGitHubEvent('issue_comment', 'd3', payload)).toMatchObject({
    kind: 'ignore',
    reason: expect.stringMatching(/not a collaborator/),
  });
  payload.comment.author_association = 'OWNER';
  payload.comment.body = 'You are totally right!';
  expect(routeGitHubEvent('issue_comment', 'd4', payload)).toMatchObject({ kind: 'ignore' });
  payload.comment.body = '/drydock';
  expect(routeGitHubEvent('issue_comment', 'd5', payload)).toMatchObject({ kind: 'ignore' });
});

test('failed check runs and workflow runs: one session per commit, never on drydock branches', () => {
  const check = example('check_run', (p) => p.action === 'completed' && p.check_run.conclusion === 'failure');
  const fromCheck = routeGitHubEvent('check_run', 'c1', check);
  expect(fromCheck).toMatchObject({
    kind: 'start',
    sessionId: 'gh-ci-codertocat-hello-world-ec26c3e57ca3',
    ref: 'ec26c3e57ca3a959ca5aad62de7213c562f8c821',
    pullRequestBase: 'changes',
    task: expect.stringMatching(/^Make CI green on changes: "Octocoders-linter" failed at ec26c3e57ca3/),
  });
  const run = example('workflow_run', (p) => p.action === 'completed');
  run.workflow_run.conclusion = 'failure';
  run.workflow_run.head_sha = check.check_run.head_sha;
  expect(routeGitHubEvent('workflow_run', 'w1', run)).toMatchObject({
    kind: 'start',
    sessionId: fromCheck.kind === 'start' && fromCheck.sessionId,
  });
  run.workflow_run.conclusion = 'success';
  expect(routeGitHubEvent('workflow_run', 'w2', run)).toMatchObject({ kind: 'ignore' });
  check.check_run.check_suite.head_branch = 'drydock/gh-abc';
  expect(routeGitHubEvent('check_run', 'c2', check)).toMatchObject({
    kind: 'ignore',
    reason: expect.stringMatching(/drydock branch/),
  });
});

test('a closed pull request of a drydock branch is recorded, merged or not', () => {
  const payload = example('pull_request', (p) => p.action === 'closed');
  expect(routeGitHubEvent('pull_request', 'p1', payload)).toMatchObject({ kind: 'ignore' }); // head "changes"
  payload.pull_request.head.ref = 'drydock/gh-abc-123';
  payload.pull_request.merged = true;
  expect(routeGitHubEvent('pull_request', 'p1', payload)).toEqual({
    kind: 'pr_closed',
    sessionId: 'gh-abc-123',
    repo: EXAMPLE_REPO,
    number: 2,
    url: 'https://github.com/Codertocat/Hello-World/pull/2',
    merged: true,
    by: 'Codertocat',
  });
});

test('other events are ignored with a reason', () => {
  expect(routeGitHubEvent('star', 'x', { action: 'created', repository: { full_name: 'a/b' } })).toEqual({
    kind: 'ignore',
    reason: "event 'star' is not one drydock acts on",
  });
});

test('DRYDOCK_REPOS entries are owner/name=<url>; a repo added without a name gets one from its URL', () => {
  expect(parseRepoList(['Codertocat/Hello-World=file:///srv/hello.git'])).toEqual([
    { name: 'Codertocat/Hello-World', url: 'file:///srv/hello.git' },
  ]);
  expect(() => parseRepoList(['nonsense'])).toThrow(/DRYDOCK_REPOS: 'nonsense'/);
  expect(repoNameOf('https://github.com/acme/shop.git')).toBe('acme/shop');
  expect(repoNameOf('git@github.com:acme/shop.git')).toBe('acme/shop');
  expect(repoNameOf('file:///tmp/drydock-repo-x1/remote.git')).toBe('drydock-repo-x1/remote');
  expect(repoNameOf('file:///repo.git')).toBe('file/repo');
});

test('API tokens map to names; a wrong or short token names no one and is never echoed', () => {
  const tokens = loadApiTokens({ DRYDOCK_API_TOKENS: 'alice=aaaaaaaaaaaaaaaaaaaa,bob=bbbbbbbbbbbbbbbbbbbb' });
  expect(tokens.identify('aaaaaaaaaaaaaaaaaaaa')).toBe('alice');
  expect(tokens.identify('bbbbbbbbbbbbbbbbbbbb')).toBe('bob');
  expect(tokens.identify('aaaaaaaaaaaaaaaaaaab')).toBeUndefined();
  expect(tokens.identify(undefined)).toBeUndefined();
  expect(parseTokens('# name=token, one a line\ncarol=cccccccccccccccccccc\n', 'DRYDOCK_API_TOKENS_FILE')).toEqual([
    ['carol', 'cccccccccccccccccccc'],
  ]);
  expect(() => parseTokens('carol=tiny', 'X')).toThrow('X: the token of carol is shorter than 16 characters');
  expect(() => parseTokens('carol=tiny', 'X')).not.toThrow(/tiny/);
});
