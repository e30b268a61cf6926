/** Webhook signatures and what each GitHub event means, without a server. */
import { sign } from '@octokit/webhooks-methods';
import { parseTokens, loadMachineTokens } from '../../identity/machine-tokens';
import { loadConfig } from '../../platform/config';
import { parseRepoList, repoNameOf, triggerSessionFor } from '../../repos/registry';
import { routeGitHubEvent, signatureMatches } from '../../github/webhooks';
import { notSessionsFollowup, notSessionsPullRequest } from '../../github/trigger-checks';
import { PAYLOADS, type PayloadEvent } from '../../github/webhook-payloads';
import { actionable, example, EXAMPLE_REPO, requiredPaths, without } from '../support/github-examples';

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

const HASH = 'abcdef0123456789';

test('an issue labelled drydock: a session keyed by the issue and the signed body, its origin for context', () => {
  const payload = example('issues', (p) => p.action === 'labeled');
  payload.label.name = 'drydock';
  expect(routeGitHubEvent('issues', HASH, payload)).toEqual({
    kind: 'start',
    sessionId: `gh-codertocat-hello-world-issue-1-${HASH}`,
    repo: EXAMPLE_REPO,
    task: 'Resolve issue #1: Spelling error in the README file',
    requestedBy: 'Codertocat',
    source: 'issue #1 labelled drydock',
    origin: { repo: EXAMPLE_REPO, kind: 'issue', issue: 1, pullRequest: false },
    check: { writer: 'Codertocat' },
  });
  payload.label.name = 'bug';
  expect(routeGitHubEvent('issues', HASH, payload)).toMatchObject({ kind: 'ignore' });
  expect(
    routeGitHubEvent(
      'issues',
      HASH,
      example('issues', (p) => p.action === 'opened'),
    ),
  ).toEqual({ kind: 'ignore', reason: "issues.opened: only 'labeled' is read" });
});

test('/drydock comments: keyed by the comment id, the PR head for PR comments, the writer checked through the API', () => {
  const payload = example('issue_comment', (p) => p.action === 'created');
  payload.comment.body = '/drydock fix the spelling\nin README.md';
  expect(routeGitHubEvent('issue_comment', HASH, payload)).toMatchObject({
    kind: 'start',
    sessionId: 'gh-codertocat-hello-world-comment-492700400',
    task: 'fix the spelling\nin README.md',
    requestedBy: 'Codertocat',
    origin: { kind: 'comment', issue: 1, comment: 492700400, pullRequest: false },
    check: { writer: 'Codertocat' },
  });
  // Another body (a replay with other bytes) is the same comment, the same session.
  expect(routeGitHubEvent('issue_comment', 'another-hash', payload)).toMatchObject({
    sessionId: 'gh-codertocat-hello-world-comment-492700400',
  });
  payload.issue.pull_request = { url: 'https://api.github.com/repos/Codertocat/Hello-World/pulls/1' };
  expect(routeGitHubEvent('issue_comment', HASH, payload)).toMatchObject({
    kind: 'start',
    ref: 'refs/pull/1/head',
    check: { writer: 'Codertocat', pullRequest: 1 },
  });
  payload.comment.body = 'You are totally right!';
  expect(routeGitHubEvent('issue_comment', HASH, payload)).toMatchObject({ kind: 'ignore' });
  payload.comment.body = '/drydock';
  expect(routeGitHubEvent('issue_comment', HASH, payload)).toMatchObject({ kind: 'ignore' });
});

test('failed check runs and workflow runs: one session per commit, never from forks; on a drydock branch, its session hears', () => {
  const check = example('check_run', (p) => p.action === 'completed' && p.check_run.conclusion === 'failure');
  const fromCheck = routeGitHubEvent('check_run', HASH, check);
  expect(fromCheck).toMatchObject({
    kind: 'start',
    sessionId: 'gh-ci-codertocat-hello-world-ec26c3e57ca3',
    ref: 'ec26c3e57ca3a959ca5aad62de7213c562f8c821',
    pullRequestBase: 'changes',
    task: expect.stringMatching(/^Make CI green on changes: "Octocoders-linter" failed at ec26c3e57ca3/),
    origin: { kind: 'check_run', run: 128620228, commit: 'ec26c3e57ca3a959ca5aad62de7213c562f8c821' },
    check: { branchHead: { branch: 'changes', sha: 'ec26c3e57ca3a959ca5aad62de7213c562f8c821' } },
  });
  const run = example('workflow_run', (p) => p.action === 'completed');
  run.workflow_run.conclusion = 'failure';
  run.workflow_run.head_sha = check.check_run.head_sha;
  run.workflow_run.head_repository.full_name = EXAMPLE_REPO;
  expect(routeGitHubEvent('workflow_run', HASH, run)).toMatchObject({
    kind: 'start',
    sessionId: fromCheck.kind === 'start' && fromCheck.sessionId,
  });
  run.workflow_run.head_repository.full_name = 'outsider/Hello-World';
  expect(routeGitHubEvent('workflow_run', HASH, run)).toMatchObject({
    kind: 'ignore',
    reason: expect.stringMatching(/a fork/),
  });
  check.check_run.pull_requests[0].head.repo.id = 4242;
  expect(routeGitHubEvent('check_run', HASH, check)).toMatchObject({
    kind: 'ignore',
    reason: expect.stringMatching(/fork/),
  });
  run.workflow_run.head_repository.full_name = EXAMPLE_REPO;
  run.workflow_run.conclusion = 'success';
  expect(routeGitHubEvent('workflow_run', HASH, run)).toMatchObject({ kind: 'ignore' });
  check.check_run.pull_requests = [];
  check.check_run.check_suite.head_branch = 'drydock/gh-abc';
  // A drydock branch starts no session: the session that pushed it hears of the failure (docs/webhooks.md).
  expect(routeGitHubEvent('check_run', HASH, check)).toMatchObject({
    kind: 'ci_failed',
    repo: EXAMPLE_REPO,
    sessionId: 'gh-abc',
    origin: { kind: 'check_run', run: 128620228, commit: 'ec26c3e57ca3a959ca5aad62de7213c562f8c821' },
    summary: expect.stringMatching(/^"Octocoders-linter" failed at ec26c3e57ca3 /),
  });
});

test('a closed pull request of a drydock branch is recorded, merged or not', () => {
  const payload = example('pull_request', (p) => p.action === 'closed');
  expect(routeGitHubEvent('pull_request', HASH, payload)).toMatchObject({ kind: 'ignore' }); // head "changes"
  payload.pull_request.head.ref = 'drydock/gh-abc-123';
  payload.pull_request.merged = true;
  expect(routeGitHubEvent('pull_request', HASH, payload)).toEqual({
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
  expect(routeGitHubEvent('star', HASH, { action: 'created', repository: { full_name: 'a/b' } })).toEqual({
    kind: 'ignore',
    reason: "event 'star' is not one drydock acts on",
  });
});

describe('a payload without a field drydock reads is invalid, naming the field', () => {
  const cases = (Object.keys(PAYLOADS) as PayloadEvent[]).flatMap((event) =>
    requiredPaths(PAYLOADS[event].schema).map((path) => [event, path.join('.'), path] as const),
  );
  test('the example payloads themselves are valid', () => {
    for (const event of Object.keys(PAYLOADS) as PayloadEvent[]) {
      expect(routeGitHubEvent(event, HASH, actionable(event)).kind).not.toBe('invalid');
    }
    expect(cases.length).toBeGreaterThan(40);
  });
  test.each(cases)('%s without %s', (event, field, path) => {
    expect(routeGitHubEvent(event, HASH, without(actionable(event), [...path]))).toEqual({
      kind: 'invalid',
      problem: `${field}: required`,
    });
  });
  test('a wrong type names the field and what it expected', () => {
    const payload = actionable('issues');
    payload.issue.number = 'one';
    expect(routeGitHubEvent('issues', HASH, payload)).toEqual({
      kind: 'invalid',
      problem: 'issue.number: Invalid input: expected number, received string',
    });
    expect(routeGitHubEvent('issues', HASH, null)).toMatchObject({ kind: 'invalid' });
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

test('API tokens map to machines, in a namespace of their own; a wrong or short token names no one and is never echoed', () => {
  const tokens = loadMachineTokens({ DRYDOCK_API_TOKENS: 'ci=aaaaaaaaaaaaaaaaaaaa,bob=bbbbbbbbbbbbbbbbbbbb' });
  expect(tokens.identify('aaaaaaaaaaaaaaaaaaaa')).toBe('machine:ci');
  expect(tokens.identify('bbbbbbbbbbbbbbbbbbbb')).toBe('machine:bob');
  expect(tokens.identify('aaaaaaaaaaaaaaaaaaab')).toBeUndefined();
  expect(tokens.identify(undefined)).toBeUndefined();
  expect(parseTokens('# name=token, one a line\ncarol=cccccccccccccccccccc\n', 'DRYDOCK_API_TOKENS_FILE')).toEqual([
    ['carol', 'cccccccccccccccccccc'],
  ]);
  expect(() => parseTokens('carol=tiny', 'X')).toThrow('X: the token of carol is shorter than 16 characters');
  expect(() => parseTokens('carol=tiny', 'X')).not.toThrow(/tiny/);
});

test("DRYDOCK_TRIGGER_SESSION: the session input's schemas; a bad value stops the process naming the field", () => {
  const load = (value: unknown) => loadConfig({ DRYDOCK_TRIGGER_SESSION: JSON.stringify(value) });
  expect(() => load({ agent: { kind: 'openai' } })).toThrow(
    'DRYDOCK_TRIGGER_SESSION.agent.model: required for agent.kind "openai"',
  );
  expect(() => load({ verify: { test: 'npm test' } })).toThrow('DRYDOCK_TRIGGER_SESSION.agent: Invalid input');
  expect(() => load({ agent: {}, limits: {} })).toThrow(/unrecognized key/i);
  const config = load({ agent: { kind: 'script', steps: [{ run: 'make fix' }] }, verify: { test: 'make test' } });
  const repo = { name: 'a/b' };
  expect(triggerSessionFor(repo, config.DRYDOCK_TRIGGER_SESSION)).toMatchObject({
    ok: true,
    session: { agent: { kind: 'script', steps: [{ run: 'make fix', timeout: '10m' }] }, verify: { test: 'make test' } },
  });
  expect(triggerSessionFor(repo, undefined)).toEqual({
    ok: false,
    reason: 'no agent is configured for a/b (set DRYDOCK_TRIGGER_SESSION)',
  });
});

test("a review submitted on drydock's pull request is one follow-up (its comments are read from GitHub); an approval or another PR's is not", () => {
  const review = (edit: (p: any) => void = () => {}) => {
    const payload = actionable('pull_request_review');
    payload.pull_request.head.ref = 'drydock/gh-session-1';
    payload.review.body = 'Please also handle zero.';
    edit(payload);
    return routeGitHubEvent('pull_request_review', HASH, payload);
  };
  expect(review()).toEqual({
    kind: 'followup',
    repo: EXAMPLE_REPO,
    pullRequest: 2,
    sessionId: 'gh-session-1',
    text: 'Please also handle zero.',
    by: 'Codertocat',
    comment: 237895671,
    review: 237895671,
  });
  expect(review((p) => (p.review.body = null))).toMatchObject({ kind: 'followup', text: '' });
  expect(review((p) => (p.review.state = 'approved'))).toMatchObject({ kind: 'ignore' });
  expect(review((p) => (p.review.user.type = 'Bot'))).toMatchObject({ kind: 'ignore' });
  expect(review((p) => (p.pull_request.head.ref = 'feature'))).toMatchObject({ kind: 'ignore' });
  expect(review((p) => (p.pull_request.head.repo.full_name = 'outsider/Hello-World'))).toMatchObject({
    kind: 'ignore',
  });
});

test("a pull request is the session's only when its repo and number are the ones it published (T4-L7)", () => {
  const url = 'https://github.com/Acme/Shop/pull/7';
  const at = (repo: string, number: number) => notSessionsPullRequest('gh-s1', url, { repo, number });
  expect(at('acme/shop', 7)).toBeUndefined();
  expect(at('Acme/Shop', 7)).toBeUndefined();
  expect(
    notSessionsPullRequest('gh-s1', 'https://ghe.example.com/Acme/Shop/pull/7/', { repo: 'acme/shop', number: 7 }),
  ).toBeUndefined();
  // The same branch name in another repo drydock serves, another number, another owner's repo of that name.
  for (const [repo, number] of [
    ['acme/other', 7],
    ['acme/shop', 8],
    ['acme/shop', 77],
    ['xacme/shop', 7],
  ] as const) {
    expect(at(repo, number)).toBe(
      `pull request #${number} of ${repo} is not the one session gh-s1 published (https://github.com/Acme/Shop/pull/7)`,
    );
  }
  expect(notSessionsPullRequest('gh-s1', undefined, { repo: 'acme/shop', number: 7 })).toBe(
    'session gh-s1 has published no pull request',
  );
  expect(notSessionsPullRequest('gh-s1', 'not a url', { repo: 'acme/shop', number: 7 })).toMatch(/is not the one/);
});

test('a follow-up comes from the pull request the session published, or before it published one, from its repo (T4-L7)', () => {
  const at = { repo: 'acme/shop', repoUrl: 'https://github.com/acme/shop', number: 7 };
  const session = { repo: 'https://github.com/acme/shop' };
  expect(notSessionsFollowup('s1', { ...session, pullRequest: 'https://github.com/acme/shop/pull/7' }, at)).toBe(
    undefined,
  );
  expect(notSessionsFollowup('s1', { ...session, pullRequest: 'https://github.com/acme/shop/pull/6' }, at)).toMatch(
    /^pull request #7 of acme\/shop is not the one session s1 published/,
  );
  expect(notSessionsFollowup('s1', session, at)).toBeUndefined();
  expect(
    notSessionsFollowup('s1', session, { ...at, repo: 'acme/other', repoUrl: 'https://github.com/acme/other' }),
  ).toBe("pull request #7 of acme/other is not in session s1's repository");
});
