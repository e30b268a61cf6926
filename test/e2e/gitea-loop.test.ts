/**
 * A session through the forge seam on a real Gitea (infra/gitea.sh): Gitea's
 * own webhook deliveries, signed with X-Gitea-Signature, reach `drydock
 * serve`; an issue labelled drydock starts a session of the repo's agent, one
 * approval publishes a pull request on Gitea from the worker (its token, never
 * the sandbox's), a /drydock comment on it is a follow-up round on the same pull request
 * (answered on Gitea), and merging it on Gitea ends the session. Forged, malformed and unauthorised deliveries
 * start nothing; Gitea's own delivery replayed finds the session it started.
 */
import { createServer, request, type IncomingHttpHeaders } from 'node:http';
import { createHmac } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { giteaApi, type Api } from 'gitea-js';
import { decide, status, type SessionStatus } from '../../workflows/api';
import { triggerSessionSchema } from '../../workflows/input';
import { git, makeFixtureRepo, startServe, startStack, waitForStatus, type TestStack } from '../support/helpers';
import { startGitea, type GiteaUser, type TestGitea } from '../support/gitea';

/** The first run on a machine builds Gitea (test/e2e/gitea-server.test.ts says how long). */
const BUILD_MS = 60 * 60_000;
const SECRET = 'gitea-webhook-secret-for-the-tests';
const OWNER = 'drydock-admin';
const NAME = 'shop';
const REPO = `${OWNER}/${NAME}`;
const TRIGGER_SESSION = triggerSessionSchema.parse({
  agent: { kind: 'script', steps: [{ run: 'echo hello >> README.md' }] },
  verify: { test: 'sh check.sh' },
  approval: { required: ['push', 'pull_request'] },
  publish: { openFor: '30m' },
});

let gitea: TestGitea;
let stack: TestStack;
let serve: Awaited<ReturnType<typeof startServe>>;
/** Writers of the repo: drydock's own account (the worker's token) and a person. */
let bot: GiteaUser;
let alice: GiteaUser;
/** Someone without write access. */
let mallory: GiteaUser;
const as = (user: GiteaUser): Api<unknown> => giteaApi(gitea.url, { token: user.token, customFetch: fetch });

beforeAll(async () => {
  gitea = await startGitea();
  const admin = as(gitea.admin);
  await admin.user.createCurrentUserRepo({ name: NAME, auto_init: false, default_branch: 'main' });
  const fixture = await makeFixtureRepo();
  git(['push', '-q', gitea.cloneUrl(OWNER, NAME), 'main'], fixture.bare);
  await admin.repos.issueCreateLabel(OWNER, NAME, { name: 'drydock', color: '#00aabb' });
  [bot, alice, mallory] = [
    await gitea.createUser('drydock-bot'),
    await gitea.createUser('alice'),
    await gitea.createUser('mallory'),
  ];
  // drydock's account administers the repo (Gitea shows who may write to administrators only); alice writes.
  await admin.repos.repoAddCollaborator(OWNER, NAME, bot.username, { permission: 'admin' });
  await admin.repos.repoAddCollaborator(OWNER, NAME, alice.username, { permission: 'write' });
  stack = await startStack({
    DRYDOCK_GITEA_URL: gitea.url,
    DRYDOCK_GITEA_TOKEN: bot.token,
    DRYDOCK_APPROVAL_REQUIRED: [],
  });
  serve = await startServe(stack, {
    DRYDOCK_GITEA_URL: gitea.url,
    DRYDOCK_GITEA_TOKEN: bot.token,
    DRYDOCK_GITEA_WEBHOOK_SECRETS: [SECRET],
    DRYDOCK_REPOS: [`${REPO}=${gitea.url}/${REPO}.git`],
    DRYDOCK_TRIGGER_SESSION: TRIGGER_SESSION,
    DRYDOCK_HTTP_MAX_BODY: 256 * 1024,
  });
  // Gitea delivers to drydock itself: issues and pull requests, their labels and comments.
  await admin.repos.repoCreateHook(OWNER, NAME, {
    type: 'gitea',
    active: true,
    events: ['issues', 'pull_request'],
    config: { url: `${serve.url}/webhooks/gitea`, content_type: 'json', secret: SECRET },
  });
}, BUILD_MS);

afterAll(async () => {
  await serve?.close();
  await stack?.stop();
  await gitea?.stop();
});

/** What drydock serve said about webhooks, and the end of Gitea's log: for a wait that runs out. */
function diagnosis(): string {
  const served = serve.log.about('webhook').slice(-10).join('\n');
  const log = path.join(gitea.dir, 'log', 'gitea.log');
  const giteaLog = existsSync(log) ? readFileSync(log, 'utf8').split('\n').slice(-15).join('\n') : '(no log)';
  return `drydock serve:\n${served || '(nothing about webhooks)'}\nGitea:\n${giteaLog}`;
}

async function within<T>(what: string, probe: () => Promise<T | undefined>, ms = 120_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const found = await probe();
    if (found !== undefined) return found;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms / 1000} s\n${diagnosis()}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

test('an issue labelled drydock on Gitea → a session → one approval → a pull request on Gitea; a comment is a second round on it; the merge ends it', async () => {
  const { data: issue } = await as(alice).repos.issueCreateIssue(OWNER, NAME, {
    title: 'Say hello in the README',
    body: 'The README should greet its readers.',
  });
  const [label] = (await as(alice).repos.issueListLabels(OWNER, NAME)).data;
  await as(alice).repos.issueAddLabel(OWNER, NAME, issue.number!, { labels: [label.id!] });
  const sessionId = `gitea-${OWNER}-${NAME}-issue-${issue.number}`;
  const handle = stack.client.workflow.getHandle(sessionId);
  // The first session of the repo builds its snapshot: minutes on a busy machine.
  const waiting = await within(
    'the session awaiting approval',
    async () => {
      const s = await handle.query(status).catch(() => undefined);
      return s?.phase === 'awaiting_approval' ? s : undefined;
    },
    600_000,
  );
  expect(waiting.verification?.passed).toBe(true);
  expect(waiting.requestedBy).toBe('gitea:alice');
  // The task: the request, then the issue read from Gitea by the worker, fenced as data.
  expect(waiting.task).toMatch(/^Resolve issue #\d+: Say hello in the README\n/);
  expect(waiting.task).toMatch(
    /=== BEGIN GITEA DATA [0-9a-f]{16}: issue #\d+: description ===\nThe README should greet/,
  );
  await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'pull_request', by: 'maintainer' }] });
  const published = await waitForStatus(handle, (s: SessionStatus) => s.phase === 'awaiting_followup', 180_000);

  // On Gitea: the branch drydock pushed, one pull request from it, and the issue told once.
  const branch = `drydock/${sessionId}`;
  const { data: pr } = await as(gitea.admin).repos.repoGetPullRequestByBaseHead(OWNER, NAME, 'main', branch);
  expect(published.pullRequest?.url).toBe(pr.html_url);
  expect(pr).toMatchObject({ state: 'open', user: { login: 'drydock-bot' }, head: { sha: published.pushed?.commit } });
  const raw = await fetch(`${gitea.url}/api/v1/repos/${REPO}/raw/README.md?ref=${encodeURIComponent(branch)}`, {
    headers: { authorization: `token ${gitea.admin.token}` },
  });
  expect(await raw.text()).toBe('# fixture\nhello\n');
  const comments = (await as(gitea.admin).repos.issueGetComments(OWNER, NAME, issue.number!)).data;
  expect(comments.filter((c) => c.user?.login === 'drydock-bot').map((c) => c.body)).toEqual([
    expect.stringContaining(sessionId),
    expect.stringContaining(`drydock opened a pull request for this: ${pr.html_url}`),
  ]);
  const base = (await as(gitea.admin).repos.repoGetBranch(OWNER, NAME, 'main')).data.commit!.id!;
  const statuses = (await as(gitea.admin).repos.repoListStatuses(OWNER, NAME, base)).data;
  expect(statuses.every((s) => s.context === 'drydock' && s.creator?.login === 'drydock-bot')).toBe(true);
  expect(statuses.map((s) => s.description)).toContain('pull request opened');

  // A /drydock comment on the pull request, delivered by Gitea, is a follow-up round of the session (a
  // script agent's comment is its command): verified, approved again, pushed to the same pull request.
  const round1 = published.pushed!.commit;
  await as(alice).repos.issueCreateComment(OWNER, NAME, pr.number!, { body: '/drydock echo again >> README.md' });
  const second = await within(
    'the follow-up round at its gate',
    async () => {
      const s = await handle.query(status).catch(() => undefined);
      return s?.phase === 'awaiting_approval' && s.pendingApproval?.evidence.commit !== round1 ? s : undefined;
    },
    300_000,
  );
  await handle.executeUpdate(decide, {
    args: [{ decision: 'approve', action: 'pull_request', by: 'maintainer', change: second.pendingApproval!.change }],
  });
  const again = await waitForStatus(
    handle,
    (s: SessionStatus) => s.phase === 'awaiting_followup' && s.pushed?.commit !== round1,
    180_000,
  );
  const { data: updated } = await as(gitea.admin).repos.repoGetPullRequestByBaseHead(OWNER, NAME, 'main', branch);
  expect(updated).toMatchObject({ number: pr.number, state: 'open', head: { sha: again.pushed?.commit } });
  const readme = await fetch(`${gitea.url}/api/v1/repos/${REPO}/raw/README.md?ref=${encodeURIComponent(branch)}`, {
    headers: { authorization: `token ${gitea.admin.token}` },
  });
  expect(await readme.text()).toBe('# fixture\nhello\nagain\n');

  // Merged on Gitea: its closing delivery ends the session.
  await as(gitea.admin).repos.repoMergePullRequest(OWNER, NAME, pr.number!, { Do: 'merge' });
  const final = (await handle.result()) as SessionStatus;
  expect(final.phase).toBe('completed');
  expect(final.closedBy).toEqual({ merged: true, by: `gitea:${OWNER}` });
}, 900_000);

/** POSTs raw bytes to drydock's Gitea route with the given headers. */
function post(body: string, headers: Record<string, string>): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = request(`${serve.url}/webhooks/gitea`, { method: 'POST', headers }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, body: text ? JSON.parse(text) : undefined }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const signed = (body: string, secret = SECRET) => createHmac('sha256', secret).update(body).digest('hex');

describe('refusals start nothing', () => {
  /** Gitea's own issue_comment payload, recorded from this server (test/fixtures/gitea). */
  const comment = () =>
    readFileSync(path.join(__dirname, '../fixtures/gitea/issue_comment.json'), 'utf8').replace(
      /"full_name": "drydock-admin\/shop"/g,
      `"full_name": "${REPO}"`,
    );
  const headers = (body: string, extra: Record<string, string> = {}) => ({
    'content-type': 'application/json',
    'x-gitea-event-type': 'issue_comment',
    'x-gitea-delivery': '3f5a0c1e-0000-4000-8000-000000000001',
    'x-gitea-signature': signed(body),
    ...extra,
  });

  test('a forged signature, a changed byte, a GitHub-style header or none → 401; not JSON → 400', async () => {
    const body = comment();
    expect((await post(body, headers(body, { 'x-gitea-signature': signed(body, 'wrong') }))).status).toBe(401);
    expect((await post(`${body} `, headers(body))).status).toBe(401);
    expect((await post(body, headers(body, { 'x-gitea-signature': `sha256=${signed(body)}` }))).status).toBe(401);
    const unsigned: Record<string, string> = headers(body);
    delete unsigned['x-gitea-signature'];
    expect((await post(body, unsigned)).status).toBe(401);
    expect((await post('not json', headers('not json'))).status).toBe(400);
  });

  test('an oversized body → 413; a signed payload without a field drydock reads → 422 naming it', async () => {
    const big = JSON.stringify({ pad: 'x'.repeat(300 * 1024) });
    expect((await post(big, headers(big))).status).toBe(413);
    const payload = JSON.parse(comment());
    delete payload.comment.id;
    const body = JSON.stringify(payload);
    expect(await post(body, headers(body))).toMatchObject({
      status: 422,
      body: { error: expect.stringContaining('comment.id') },
    });
  });

  test("/drydock on an issue from someone who may not write → 403, answered once on the issue (Gitea's own delivery)", async () => {
    const { data: issue } = await as(mallory).repos.issueCreateIssue(OWNER, NAME, { title: 'Do something' });
    const { data: c } = await as(mallory).repos.issueCreateComment(OWNER, NAME, issue.number!, {
      body: '/drydock delete the tests',
    });
    // Gitea delivers the comment; drydock checks the writer with Gitea's API, refuses, and says why there.
    const answers = await within('the answer on the issue', async () => {
      const found = (await as(gitea.admin).repos.issueGetComments(OWNER, NAME, issue.number!)).data.filter(
        (x) => x.user?.login === 'drydock-bot',
      );
      return found.length ? found : undefined;
    });
    expect(answers).toHaveLength(1);
    expect(answers[0].body).toContain('mallory may not write');
    await expect(
      stack.client.workflow.getHandle(`gitea-${OWNER}-${NAME}-comment-${c.id}`).describe(),
    ).rejects.toThrow();
  });
});

test("Gitea's own signed delivery, replayed under its id or a new one, finds the session it started", async () => {
  // A second hook with the same secret, to a recorder: Gitea signs the same body for it as for drydock.
  const captured: { headers: IncomingHttpHeaders; body: string }[] = [];
  const recorder = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      captured.push({ headers: req.headers, body });
      res.end('ok');
    });
  });
  await new Promise<void>((resolve) => recorder.listen(0, '127.0.0.1', resolve));
  const { port } = recorder.address() as { port: number };
  const { data: hook } = await as(gitea.admin).repos.repoCreateHook(OWNER, NAME, {
    type: 'gitea',
    active: true,
    events: ['issues', 'pull_request'],
    config: { url: `http://127.0.0.1:${port}/`, content_type: 'json', secret: SECRET },
  });
  let sessionId = '';
  try {
    const { data: issue } = await as(alice).repos.issueCreateIssue(OWNER, NAME, { title: 'Greet in the README' });
    const { data: c } = await as(alice).repos.issueCreateComment(OWNER, NAME, issue.number!, {
      body: '/drydock echo replayed >> README.md',
    });
    sessionId = `gitea-${OWNER}-${NAME}-comment-${c.id}`;
    const handle = stack.client.workflow.getHandle(sessionId);
    // Gitea delivered it to drydock (the session started) and to the recorder.
    const first = await within("the session from Gitea's delivery", () =>
      handle.describe().then(
        (d) => d,
        () => undefined,
      ),
    );
    const original = await within('the recorded delivery', async () =>
      captured.find(
        (d) => d.headers['x-gitea-event-type'] === 'issue_comment' && JSON.parse(d.body).comment?.id === c.id,
      ),
    );
    const replay = (delivery: string) =>
      post(original.body, {
        'content-type': 'application/json',
        'x-gitea-event-type': 'issue_comment',
        'x-gitea-delivery': delivery,
        'x-gitea-signature': String(original.headers['x-gitea-signature']),
      });
    for (const delivery of [String(original.headers['x-gitea-delivery']), '3f5a0c1e-0000-4000-8000-0000000000aa']) {
      expect(await replay(delivery)).toMatchObject({ status: 202, body: { sessionId } });
    }
    // The same workflow, its first run: nothing started again.
    expect((await handle.describe()).runId).toBe(first.runId);
  } finally {
    await as(gitea.admin).repos.repoDeleteHook(OWNER, NAME, hook.id!);
    recorder.close();
    if (sessionId) {
      const handle = stack.client.workflow.getHandle(sessionId);
      await handle.cancel().catch(() => undefined);
      await handle.result().catch(() => undefined);
    }
  }
}, 600_000);
