/**
 * GitLab through the forge seam, with the real @gitbeaker/rest client against
 * a local stand-in speaking GitLab's REST API (test/support/fake-gitlab.ts):
 * merge requests opened once and updated, notes found again by their marker,
 * award emoji given once, commit statuses only when they change, access
 * levels, the failed pipeline's log as context. And GitLab's webhooks: real
 * payload shapes routed to triggers, and forged, malformed or replayed
 * deliveries refused.
 */
import { randomBytes } from 'node:crypto';
import { gitlabForge, plainJobLog } from '../../gitlab/provider';
import { gitlabWebhooks, routeGitLabEvent, tokenMatches } from '../../gitlab/webhooks';
import { bodyHash } from '../../forge/triggers';
import { parseRepoList, REPO_NAME } from '../../repos/registry';
import { parseSessionInput } from '../../workflows/input';
import { reportProgress } from '../../forge/progress';
import { startFakeGitLab, type FakeGitLab } from '../support/fake-gitlab';
import { GITLAB_PATH, issueLabelled, mergeRequestClosed, noteOn, pipelineFailed } from '../support/gitlab-examples';

const TOKEN = `glpat-${randomBytes(10).toString('hex')}`;
const SHA = 'a'.repeat(40);
let gitlab: FakeGitLab;

beforeAll(async () => {
  gitlab = await startFakeGitLab({ path: GITLAB_PATH, token: TOKEN });
  gitlab.state.branches = { main: SHA, 'drydock/s1': 'b'.repeat(40) };
  gitlab.state.members = { dev: 30, reporter: 20 };
  gitlab.state.issues[3] = { title: 'Spelling', description: 'commit has two ts' };
});
afterAll(() => gitlab?.close());

const forge = () => gitlabForge({ url: gitlab.url, token: TOKEN });

test('a merge request is opened once and updated after; its state and branch are read back', async () => {
  const repo = forge().repo(GITLAB_PATH, 'publish');
  const spec = { head: 'drydock/s1', title: 'drydock: fix', body: 'first', draft: true };
  const first = await repo.upsertChangeRequest(spec);
  expect(first).toEqual({ number: 1, url: `${gitlab.url}/${GITLAB_PATH}/-/merge_requests/1`, created: true });
  expect(gitlab.state.mergeRequests[0]).toMatchObject({ title: 'Draft: drydock: fix', target_branch: 'main' });
  const again = await repo.upsertChangeRequest({ ...spec, body: 'second' });
  expect(again).toEqual({ ...first, created: false });
  expect(gitlab.state.mergeRequests).toHaveLength(1);
  expect(gitlab.state.mergeRequests[0].description).toBe('second');
  expect(await repo.changeRequest(1)).toMatchObject({ headBranch: 'drydock/s1', fromThisRepo: true, state: 'open' });
  expect(await repo.branchHead('main')).toBe(SHA);
  expect(await repo.branchHead('gone')).toBeUndefined();
  // The token went in PRIVATE-TOKEN only.
  expect(gitlab.requests.every((r) => r.token === TOKEN && !r.path.includes(TOKEN))).toBe(true);
});

test('progress: one acknowledgement, one award, statuses only when they change; a retry writes nothing', async () => {
  const repo = forge().repo(GITLAB_PATH, 'progress');
  gitlab.state.notes['issues/3'] = [
    { id: 41, body: '/drydock fix it', system: false, created_at: '', author: { id: 1, username: 'dev' }, awards: [] },
  ];
  const trigger = {
    forge: 'gitlab' as const,
    repo: GITLAB_PATH,
    kind: 'comment' as const,
    issue: 3,
    pullRequest: false,
    comment: 41,
  };
  const started = { sessionId: 's1', trigger, stage: 'started' as const, commit: SHA };
  await reportProgress(repo, started, 'https://console/s/s1');
  await reportProgress(repo, { ...started, stage: 'awaiting_approval' }, 'https://console/s/s1');
  const writes = gitlab.writes().length;
  await reportProgress(repo, started, 'https://console/s/s1');
  await reportProgress(repo, { ...started, stage: 'awaiting_approval' }, 'https://console/s/s1');
  expect(gitlab.writes()).toHaveLength(writes);
  expect(gitlab.state.notes['issues/3'][0].awards.map((a) => a.name)).toEqual(['eyes']);
  await reportProgress(repo, { ...started, stage: 'failed', detail: 'tests failed: @alice ```boom' }, 'L');
  await reportProgress(repo, { ...started, stage: 'failed', detail: 'tests failed: @alice ```boom' }, 'L');
  const ours = gitlab.state.notes['issues/3'].filter((n) => n.body.includes('<!-- drydock:'));
  expect(ours).toHaveLength(1);
  expect(ours[0].body).toContain('````text\ntests failed: alice ```boom\n````');
  expect(gitlab.state.statuses.map((s) => `${s.status}: ${s.description}`)).toEqual([
    'running: in progress',
    'failed: failed: tests failed: alice ```boom',
  ]);
});

test('who may trigger: Developer and above, by the project membership (groups included)', async () => {
  const repo = forge().repo(GITLAB_PATH, 'server');
  expect(await repo.writerRefusal('dev')).toBeUndefined();
  expect(await repo.writerRefusal('reporter')).toBe(
    `reporter has the Reporter role on ${GITLAB_PATH}, not Developer or above`,
  );
  expect(await repo.writerRefusal('stranger')).toBe('stranger is not a user of this GitLab');
});

test("a failed pipeline's context: its failed jobs and the plain end of their logs", async () => {
  gitlab.state.jobs[380] = {
    pipeline: 31,
    name: 'test',
    stage: 'test',
    status: 'failed',
    log: 'section_start:1700000000:step_script\r\x1b[0K\x1b[32;1m$ npm test\x1b[0;m\nFAIL README.md: "commmit"\nsection_end:1700000001:step_script\r\x1b[0K',
  };
  gitlab.state.jobs[381] = { pipeline: 31, name: 'lint', stage: 'test', status: 'success', log: '' };
  const sections = await forge()
    .repo(GITLAB_PATH, 'context')
    .readContext({ repo: GITLAB_PATH, kind: 'workflow_run', run: 31, commit: SHA, pullRequest: false });
  expect(sections).toEqual([
    { label: 'failed job 380', text: 'test: failed, in stage "test"' },
    { label: 'end of the log of job 380', text: '$ npm test\nFAIL README.md: "commmit"' },
  ]);
  expect(plainJobLog('\x1b[31mred\x1b[0m')).toBe('red');
});

test('a refused token is permanent, with the reason; a 5xx is left to Temporal', async () => {
  const refused = gitlabForge({ url: gitlab.url, token: 'glpat-wrong' }).repo(GITLAB_PATH, 'publish');
  const err = await refused.branchHead('main').catch((e: unknown) => e);
  expect(forge().failure(err, { purpose: 'publish', repo: GITLAB_PATH })).toEqual({
    kind: 'auth',
    message: expect.stringMatching(/^GitLab answered 401 for acme\/app: .*check the worker's GitLab token/),
  });
  expect(forge().failure(new Error('socket hang up'), { purpose: 'publish', repo: GITLAB_PATH })).toBeUndefined();
  expect(await forge().gitCredentials(`${gitlab.url}/${GITLAB_PATH}.git`)).toMatchObject({
    GIT_CONFIG_KEY_0: `http.${gitlab.url}/.extraHeader`,
  });
  expect(await forge().gitCredentials(`https://elsewhere.example/${GITLAB_PATH}.git`)).toEqual({});
});

describe('webhooks', () => {
  const PID = 7;
  test('real payload shapes become triggers: label, notes, a failed pipeline, a merged merge request', () => {
    const labelled = issueLabelled({ projectId: PID, iid: 3, by: 'dev' });
    expect(routeGitLabEvent('Issue Hook', 'abc', labelled)).toMatchObject({
      kind: 'start',
      sessionId: 'gl-acme-app-issue-3-abc',
      repo: GITLAB_PATH,
      task: 'Resolve issue #3: Spelling error in the README file',
      origin: { kind: 'issue', issue: 3, pullRequest: false },
      check: { writer: 'dev' },
    });
    // Labelled again with drydock already there: not an addition.
    const again = {
      ...labelled,
      changes: { labels: { previous: labelled.changes.labels.current, current: labelled.changes.labels.current } },
    };
    expect(routeGitLabEvent('Issue Hook', 'abc', again).kind).toBe('ignore');
    expect(
      routeGitLabEvent(
        'Note Hook',
        'h',
        noteOn({ projectId: PID, noteId: 41, by: 'dev', note: '/drydock fix it', issue: 3 }),
      ),
    ).toMatchObject({
      kind: 'start',
      sessionId: 'gl-acme-app-note-41',
      task: 'fix it',
      origin: { kind: 'comment', issue: 3, comment: 41, pullRequest: false },
    });
    const onOurs = noteOn({
      projectId: PID,
      noteId: 42,
      by: 'dev',
      note: '/drydock also this',
      mergeRequest: { iid: 1, source_branch: 'drydock/s1' },
    });
    expect(routeGitLabEvent('Note Hook', 'h', onOurs)).toEqual({
      kind: 'followup',
      repo: GITLAB_PATH,
      pullRequest: 1,
      sessionId: 's1',
      text: 'also this',
      by: 'dev',
      comment: 42,
    });
    const fromFork = noteOn({
      projectId: PID,
      noteId: 43,
      by: 'dev',
      note: '/drydock x',
      mergeRequest: { iid: 2, source_branch: 'drydock/s1', source_project_id: 99 },
    });
    expect(routeGitLabEvent('Note Hook', 'h', fromFork)).toMatchObject({
      kind: 'start',
      ref: 'refs/merge-requests/2/head',
      check: { pullRequest: 2 },
    });
    const byBot = noteOn({ projectId: PID, noteId: 44, by: 'project_7_bot_0a1b2c', note: '/drydock loop', issue: 3 });
    expect(routeGitLabEvent('Note Hook', 'h', byBot)).toEqual({
      kind: 'ignore',
      reason: 'Note Hook: written by a bot',
    });
    expect(
      routeGitLabEvent(
        'Pipeline Hook',
        'h',
        pipelineFailed({ projectId: PID, id: 31, ref: 'main', sha: SHA, by: 'dev' }),
      ),
    ).toMatchObject({
      kind: 'start',
      sessionId: `gl-ci-acme-app-${SHA.slice(0, 12)}`,
      ref: SHA,
      pullRequestBase: 'main',
      origin: { kind: 'workflow_run', run: 31, commit: SHA },
      check: { branchHead: { branch: 'main', sha: SHA } },
    });
    expect(
      routeGitLabEvent(
        'Pipeline Hook',
        'h',
        pipelineFailed({ projectId: PID, id: 31, ref: 'main', sha: SHA, by: 'dev', status: 'success' }),
      ).kind,
    ).toBe('ignore');
    expect(
      routeGitLabEvent(
        'Pipeline Hook',
        'h',
        pipelineFailed({ projectId: PID, id: 31, ref: 'drydock/s1', sha: SHA, by: 'dev' }),
      ).kind,
    ).toBe('ignore');
    const merged = mergeRequestClosed({
      projectId: PID,
      iid: 1,
      source_branch: 'drydock/s1',
      url: 'https://g/acme/app/-/merge_requests/1',
      by: 'dev',
      action: 'merge',
    });
    expect(routeGitLabEvent('Merge Request Hook', 'h', merged)).toEqual({
      kind: 'pr_closed',
      sessionId: 's1',
      repo: GITLAB_PATH,
      number: 1,
      url: 'https://g/acme/app/-/merge_requests/1',
      merged: true,
      by: 'dev',
    });
    expect(routeGitLabEvent('Push Hook', 'h', {})).toEqual({
      kind: 'ignore',
      reason: "event 'Push Hook' is not one drydock acts on",
    });
  });

  test('every payload without a field drydock reads → invalid, naming the field', () => {
    const examples: [string, any][] = [
      ['Issue Hook', issueLabelled({ projectId: PID, iid: 3, by: 'dev' })],
      ['Note Hook', noteOn({ projectId: PID, noteId: 41, by: 'dev', note: '/drydock x', issue: 3 })],
      ['Pipeline Hook', pipelineFailed({ projectId: PID, id: 31, ref: 'main', sha: SHA, by: 'dev' })],
    ];
    for (const [event, payload] of examples) {
      for (const field of ['user', 'project', 'object_attributes']) {
        const rest = { ...payload };
        delete rest[field];
        expect(routeGitLabEvent(event, 'h', rest)).toEqual({ kind: 'invalid', problem: `${field}: required` });
      }
    }
    expect(
      routeGitLabEvent(
        'Pipeline Hook',
        'h',
        pipelineFailed({ projectId: PID, id: 31, ref: 'main', sha: 'nope', by: 'dev' }),
      ),
    ).toEqual({
      kind: 'invalid',
      problem: 'object_attributes.sha: a commit sha',
    });
  });

  test('forged, malformed and unconfigured deliveries are refused before the body is read; a replay is the same session', async () => {
    const hooks = gitlabWebhooks(['current-token-0123456789', 'old-token-0123456789']);
    const body = Buffer.from(JSON.stringify(issueLabelled({ projectId: PID, iid: 3, by: 'dev' })));
    let reads = 0;
    const read = async () => (reads++, body);
    const headers = (token?: string) => ({
      'x-gitlab-token': token,
      'x-gitlab-event': 'Issue Hook',
      'x-gitlab-event-uuid': 'u-1',
    });
    for (const forged of [
      undefined,
      '',
      'current-token-012345678',
      'current-token-0123456789x',
      'CURRENT-TOKEN-0123456789',
    ]) {
      expect(await hooks.check(headers(forged), read)).toEqual({
        ok: false,
        status: 401,
        problem: 'missing or wrong X-Gitlab-Token',
      });
    }
    expect(reads).toBe(0);
    expect(await hooks.check(headers('old-token-0123456789'), read)).toMatchObject({
      ok: true,
      event: 'Issue Hook',
      delivery: 'u-1',
    });
    expect(await hooks.check({ 'x-gitlab-token': 'current-token-0123456789' }, read)).toMatchObject({
      ok: false,
      status: 400,
    });
    expect(
      await hooks.check({ ...headers('current-token-0123456789'), 'x-gitlab-event-uuid': 'a b\n' }, read),
    ).toMatchObject({ status: 400 });
    expect(await gitlabWebhooks([]).check(headers('x'), read)).toMatchObject({ ok: false, status: 503 });
    // Random tokens never pass; the comparison does not depend on a shared prefix's length.
    for (let i = 0; i < 200; i++)
      expect(tokenMatches(['current-token-0123456789'], randomBytes(1 + (i % 40)).toString('latin1'))).toBe(false);
    // The same body under a new delivery id: the same session id (it is the body's, not the header's).
    const one = routeGitLabEvent('Issue Hook', bodyHash(body), JSON.parse(body.toString()));
    const two = routeGitLabEvent('Issue Hook', bodyHash(Buffer.from(body)), JSON.parse(body.toString()));
    expect(one).toEqual(two);
  });
});

test('a project in nested subgroups (group/sub/project) is a repo name like any other, up to 20 groups deep', () => {
  const labelled = issueLabelled({ projectId: 8, iid: 5, by: 'dev' });
  labelled.project.path_with_namespace = 'acme/platform/shop';
  const body = JSON.stringify(labelled);
  expect(routeGitLabEvent('Issue Hook', bodyHash(body), labelled)).toMatchObject({
    kind: 'start',
    repo: 'acme/platform/shop',
    sessionId: expect.stringMatching(/^gl-acme-platform-shop-issue-5-/),
  });
  expect(parseRepoList(['acme/platform/shop=https://gitlab.example.com/acme/platform/shop.git'])).toEqual([
    { name: 'acme/platform/shop', url: 'https://gitlab.example.com/acme/platform/shop.git' },
  ]);
  const input = parseSessionInput({
    repo: { url: 'https://gitlab.example.com/acme/platform/shop.git' },
    task: 'x',
    publish: { pullRequest: { repo: 'acme/platform/shop', forge: 'gitlab' } },
  });
  expect(input.ok).toBe(true);
  expect(REPO_NAME.test(`g${'/s'.repeat(20)}`)).toBe(true);
  for (const bad of ['shop', `g${'/s'.repeat(21)}`, 'acme//shop', 'acme/shop/', '/acme/shop', 'acme/sh op']) {
    expect(REPO_NAME.test(bad)).toBe(false);
  }
});
