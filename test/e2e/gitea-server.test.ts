/**
 * A real Gitea (infra/gitea.sh, built from Go modules) and what drydock relies
 * on from it, through the client drydock uses (gitea-js): repos that take a
 * push over HTTP with a token, pull requests found by their branch, comments
 * and reactions, commit statuses, who may write, and webhooks signed with the
 * hook's secret (X-Gitea-Signature) as drydock checks them.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { giteaApi, type Api } from 'gitea-js';
import { giteaSignatureMatches } from '../../gitea/signature';
import { git } from '../support/helpers';
import { startGitea, type GiteaUser, type TestGitea } from '../support/gitea';

/** The first run on a machine builds Gitea (15 minutes or more on 2 busy cores); npm test starts it in the background. */
const BUILD_MS = 60 * 60_000;

interface Delivery {
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** A loopback receiver that keeps every delivery and answers 200. */
async function receiver(): Promise<{ server: Server; url: string; deliveries: Delivery[] }> {
  const deliveries: Delivery[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      deliveries.push({ headers: req.headers, body: Buffer.concat(chunks) });
      res.end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return { server, url: `http://127.0.0.1:${port}/hook`, deliveries };
}

async function delivered(deliveries: Delivery[], match: (d: Delivery) => boolean): Promise<Delivery> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const found = deliveries.find(match);
    if (found) return found;
    if (Date.now() > deadline) {
      throw new Error(`no matching delivery in 60 s; got: ${deliveries.map((d) => d.headers['x-gitea-event-type'])}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

const eventType = (type: string, action?: string) => (d: Delivery) =>
  d.headers['x-gitea-event-type'] === type &&
  (action === undefined || (JSON.parse(d.body.toString()) as { action?: string }).action === action);

let gitea: TestGitea;
let api: Api<unknown>;
let hooks: Awaited<ReturnType<typeof receiver>>;
const secret = 'gitea-hook-secret-1';
const owner = 'drydock-admin';
const repo = 'widgets';

beforeAll(async () => {
  gitea = await startGitea();
  api = giteaApi(gitea.url, { token: gitea.admin.token, customFetch: fetch });
  hooks = await receiver();
}, BUILD_MS);

afterAll(async () => {
  await gitea?.stop();
  hooks?.server.close();
});

test('it is the version infra/gitea.sh builds, installed without the web installer', async () => {
  const { data } = await api.version.getVersion();
  expect(data.version).toBe('1.27.3');
  const { data: me } = await api.user.userGetCurrent();
  expect(me).toMatchObject({ login: owner, is_admin: true });
});

describe('a repo, a pull request and its webhooks', () => {
  let head = '';
  let pr = 0;

  beforeAll(async () => {
    await api.user.createCurrentUserRepo({ name: repo, auto_init: true, default_branch: 'main' });
    await api.repos.repoCreateHook(owner, repo, {
      type: 'gitea',
      active: true,
      events: ['issues', 'issue_comment', 'pull_request', 'pull_request_comment'],
      config: { url: hooks.url, content_type: 'json', secret },
    });
  });

  test('a branch pushed over HTTP with a token is on the server', () => {
    const work = mkdtempSync(path.join(tmpdir(), 'gitea-clone-'));
    git(['clone', '-q', gitea.cloneUrl(owner, repo), work]);
    git(['switch', '-q', '-c', 'drydock/widget'], work);
    writeFileSync(path.join(work, 'widget.txt'), 'a widget\n');
    git(['add', '.'], work);
    git(['-c', 'user.name=drydock', '-c', 'user.email=drydock@test', 'commit', '-q', '-m', 'Add a widget'], work);
    git(['push', '-q', 'origin', 'drydock/widget'], work);
    head = git(['rev-parse', 'HEAD'], work).trim();
    expect(head).toMatch(/^[0-9a-f]{40}$/);
  });

  test('the branch is read back, and a pull request from it is found by its branch', async () => {
    const { data: branch } = await api.repos.repoGetBranch(owner, repo, 'drydock/widget');
    expect(branch.commit?.id).toBe(head);
    const { data: opened } = await api.repos.repoCreatePullRequest(owner, repo, {
      head: 'drydock/widget',
      base: 'main',
      title: 'Add a widget',
      body: 'Made by a drydock session.',
    });
    pr = opened.number!;
    expect(opened).toMatchObject({ state: 'open', merged: false, head: { ref: 'drydock/widget', sha: head } });
    const { data: found } = await api.repos.repoGetPullRequestByBaseHead(owner, repo, 'main', 'drydock/widget');
    expect(found.number).toBe(pr);
  });

  test("the pull request's opening is delivered, signed with the hook's secret (X-Gitea-Signature)", async () => {
    const d = await delivered(hooks.deliveries, eventType('pull_request', 'opened'));
    expect(d.headers['x-gitea-event']).toBe('pull_request');
    expect(d.headers['x-gitea-delivery']).toMatch(/^[0-9a-f-]{36}$/);
    expect(giteaSignatureMatches([secret], d.body, d.headers['x-gitea-signature'] as string)).toBe(true);
    // The old secret first and the current one second (a rotation) verifies too.
    expect(giteaSignatureMatches(['rotated-out', secret], d.body, d.headers['x-gitea-signature'] as string)).toBe(true);
    expect(giteaSignatureMatches(['another-secret'], d.body, d.headers['x-gitea-signature'] as string)).toBe(false);
    const changed = Buffer.from(d.body.toString().replace('Add a widget', 'Add a gadget'));
    expect(giteaSignatureMatches([secret], changed, d.headers['x-gitea-signature'] as string)).toBe(false);
    const payload = JSON.parse(d.body.toString());
    expect(payload).toMatchObject({
      action: 'opened',
      number: pr,
      pull_request: { head: { ref: 'drydock/widget', sha: head }, base: { ref: 'main' } },
      repository: { full_name: `${owner}/${repo}` },
      sender: { login: owner },
    });
  });

  test('a comment and a reaction on the pull request; the comment is delivered as a pull request comment', async () => {
    const { data: comment } = await api.repos.issueCreateComment(owner, repo, pr, { body: '/drydock also add a test' });
    await api.repos.issuePostCommentReaction(owner, repo, comment.id!, { content: 'eyes' });
    const { data: reactions } = await api.repos.issueGetCommentReactions(owner, repo, comment.id!);
    expect(reactions.map((r) => r.content)).toEqual(['eyes']);
    const d = await delivered(hooks.deliveries, eventType('pull_request_comment', 'created'));
    expect(d.headers['x-gitea-event']).toBe('issue_comment');
    expect(giteaSignatureMatches([secret], d.body, d.headers['x-gitea-signature'] as string)).toBe(true);
    expect(JSON.parse(d.body.toString())).toMatchObject({
      action: 'created',
      is_pull: true,
      issue: { number: pr },
      comment: { id: comment.id, body: '/drydock also add a test', user: { login: owner } },
    });
  });

  test('commit statuses on the head are recorded, and the newest per context is the combined state', async () => {
    await api.repos.repoCreateStatus(owner, repo, head, {
      state: 'pending',
      context: 'drydock',
      description: 'verifying',
    });
    await api.repos.repoCreateStatus(owner, repo, head, {
      state: 'success',
      context: 'drydock',
      description: 'tests passed',
      target_url: 'http://127.0.0.1/session/1',
    });
    const { data } = await api.repos.repoGetCombinedStatusByRef(owner, repo, head);
    expect(data.state).toBe('success');
    expect(data.statuses).toEqual([
      expect.objectContaining({ context: 'drydock', status: 'success', description: 'tests passed' }),
    ]);
  });

  test('merged: the pull request says so, and its closing is delivered with merged true', async () => {
    await api.repos.repoMergePullRequest(owner, repo, pr, { Do: 'merge' });
    const { data } = await api.repos.repoGetPullRequest(owner, repo, pr);
    expect(data).toMatchObject({ merged: true, state: 'closed' });
    const d = await delivered(hooks.deliveries, eventType('pull_request', 'closed'));
    expect(JSON.parse(d.body.toString())).toMatchObject({ number: pr, pull_request: { merged: true } });
  });
});

describe('who may write', () => {
  let reader: GiteaUser;
  let writer: GiteaUser;
  const name = 'permissions';

  beforeAll(async () => {
    await api.user.createCurrentUserRepo({ name, auto_init: true });
    reader = await gitea.createUser('reader');
    writer = await gitea.createUser('writer');
    await api.repos.repoAddCollaborator(owner, name, writer.username, { permission: 'write' });
  });

  test("the API tells a collaborator's write permission from a stranger's read", async () => {
    const of = async (user: string) => (await api.repos.repoGetRepoPermissions(owner, name, user)).data.permission;
    expect(await of(writer.username)).toBe('write');
    expect(await of(reader.username)).toBe('read');
  });

  test("a reader's token cannot push or set a status; a writer's can", async () => {
    const work = mkdtempSync(path.join(tmpdir(), 'gitea-clone-'));
    git(['clone', '-q', gitea.cloneUrl(owner, name, reader), work]);
    git(['-c', 'user.name=r', '-c', 'user.email=r@test', 'commit', '-q', '--allow-empty', '-m', 'x'], work);
    expect(() => git(['push', '-q', 'origin', 'HEAD:refs/heads/from-reader'], work)).toThrow();
    const sha = git(['rev-parse', 'HEAD'], work).trim();
    const status = { state: 'success' as const, context: 'drydock' };
    await expect(
      giteaApi(gitea.url, { token: reader.token, customFetch: fetch }).repos.repoCreateStatus(owner, name, sha, status),
    ).rejects.toMatchObject({ status: 403 });
    git(['remote', 'set-url', 'origin', gitea.cloneUrl(owner, name, writer)], work);
    git(['push', '-q', 'origin', 'HEAD:refs/heads/from-writer'], work);
    const asWriter = giteaApi(gitea.url, { token: writer.token, customFetch: fetch });
    const { data } = await asWriter.repos.repoCreateStatus(owner, name, sha, status);
    expect(data.status).toBe('success');
  });
});
