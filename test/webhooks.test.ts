/**
 * `drydock serve`'s webhooks on real Temporal, Docker and git: GitHub's own
 * example payloads, signed with a test secret, start the right sessions; a
 * redelivery starts nothing new; and every refusal starts nothing at all.
 */
import { Pool } from 'pg';
import { request } from 'node:http';
import { sign } from '@octokit/webhooks-methods';
import { WorkflowNotFoundError } from '@temporalio/client';
import { status, type PullRequestClosed, type SessionStatus } from '../workflows/api';
import { example, EXAMPLE_REPO } from './github-examples';
import { git, makeFixtureRepo, startServe, startStack, type TestStack } from './helpers';

const SECRET = 'new-webhook-secret-for-tests';
const OLD_SECRET = 'old-webhook-secret-for-tests';
const CI_SECRET = 'ci-secret-for-the-tests';
const MAX_BODY = 64 * 1024;

let stack: TestStack;
let serve: Awaited<ReturnType<typeof startServe>>;
let repo: { url: string; bare: string };
let head: string;
let prHead: string;

beforeAll(async () => {
  repo = await makeFixtureRepo();
  head = git(['rev-parse', 'main'], repo.bare).trim();
  // GitHub keeps a pull request's head at refs/pull/<n>/head; the fixture remote does too, one commit ahead.
  prHead = git(
    [
      '-c',
      'user.name=fixture',
      '-c',
      'user.email=f@x',
      'commit-tree',
      `${head}^{tree}`,
      '-p',
      head,
      '-m',
      'the pull request',
    ],
    repo.bare,
  ).trim();
  git(['update-ref', 'refs/pull/1/head', prHead], repo.bare);
  stack = await startStack({ DRYDOCK_APPROVAL_REQUIRED: [] });
  serve = await startServe(stack, {
    DRYDOCK_WEBHOOK_SECRETS: [SECRET, OLD_SECRET],
    DRYDOCK_CI_SECRET: CI_SECRET,
    DRYDOCK_REPOS: [`${EXAMPLE_REPO}=${repo.url}`],
    DRYDOCK_HTTP_MAX_BODY: MAX_BODY,
  });
});
afterAll(async () => {
  await serve?.close();
  await stack?.stop();
});

let deliveries = 0;
/** A fresh delivery id per test run, like GitHub's GUIDs. */
const newDelivery = () => `${process.env.DRYDOCK_TEST_RUN}-${++deliveries}-${Math.random().toString(16).slice(2, 10)}`;

interface Sent {
  status: number;
  body: any;
}

/** POSTs raw bytes with the given headers (node:http, so nothing rewrites them). */
function post(path: string, body: Buffer | string, headers: Record<string, string>): Promise<Sent> {
  return new Promise((resolve, reject) => {
    const req = request(`${serve.url}${path}`, { method: 'POST', headers }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, body: text ? JSON.parse(text) : undefined }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function deliver(event: string, payload: unknown, opts: { delivery?: string; secret?: string } = {}) {
  const body = JSON.stringify(payload);
  const delivery = opts.delivery ?? newDelivery();
  const sent = await post('/webhooks/github', body, {
    'content-type': 'application/json',
    'x-github-event': event,
    'x-github-delivery': delivery,
    'x-hub-signature-256': await sign(opts.secret ?? SECRET, body),
  });
  return { ...sent, delivery };
}

async function exists(workflowId: string): Promise<boolean> {
  try {
    await stack.client.workflow.getHandle(workflowId).describe();
    return true;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return false;
    throw err;
  }
}

async function finalStatus(sessionId: string): Promise<SessionStatus> {
  const handle = stack.client.workflow.getHandle(sessionId);
  await handle.result().catch(() => undefined);
  return handle.query(status);
}

const labelled = () => {
  const payload = example('issues', (p) => p.action === 'labeled');
  payload.label.name = 'drydock';
  return payload;
};

describe('GitHub events start the right session', () => {
  test('an issue labelled drydock: title and body are the task, the sender requested it', async () => {
    const sent = await deliver('issues', labelled());
    expect(sent.status).toBe(202);
    expect(sent.body).toEqual({ sessionId: `gh-${sent.delivery.toLowerCase()}` });
    const final = await finalStatus(sent.body.sessionId);
    expect(final).toMatchObject({
      phase: 'completed',
      repo: repo.url,
      task: "Spelling error in the README file\n\nIt looks like you accidently spelled 'commit' with two 't's.",
      requestedBy: 'Codertocat',
    });
    expect(final.sandbox!.baseCommit).toBe(head);
  });

  test('/drydock in a pull request comment: the task, on the PR head', async () => {
    const payload = example('issue_comment', (p) => p.action === 'created');
    payload.comment.body = '/drydock fix the spelling';
    payload.issue.pull_request = { url: 'https://api.github.com/repos/Codertocat/Hello-World/pulls/1' };
    const sent = await deliver('issue_comment', payload);
    expect(sent.status).toBe(202);
    const final = await finalStatus(sent.body.sessionId);
    expect(final.phase).toBe('completed');
    expect(final.task).toMatch(/^fix the spelling\n\n\(asked on /);
    expect(final.sandbox!.baseCommit).toBe(prHead);
  });

  test('a failed check_run and a failed workflow_run of one commit: one "make CI green" session, from that commit', async () => {
    const check = example('check_run', (p) => p.action === 'completed' && p.check_run.conclusion === 'failure');
    check.check_run.head_sha = head;
    const run = example('workflow_run', (p) => p.action === 'completed');
    Object.assign(run.workflow_run, { conclusion: 'failure', head_sha: head });
    const first = await deliver('check_run', check);
    const second = await deliver('workflow_run', run);
    expect(first.status).toBe(202);
    expect(second.body.sessionId).toBe(first.body.sessionId);
    const final = await finalStatus(first.body.sessionId);
    expect(final.task).toMatch(/^Make CI green on changes: "Octocoders-linter" failed at /);
    expect(final.sandbox!.baseCommit).toBe(head);
  });

  test('a closed pull request of a drydock branch is recorded as merged', async () => {
    const started = await deliver('issues', labelled());
    await finalStatus(started.body.sessionId);
    const payload = example('pull_request', (p) => p.action === 'closed');
    payload.pull_request.head.ref = `drydock/${started.body.sessionId}`;
    payload.pull_request.merged = true;
    const sent = await deliver('pull_request', payload);
    expect(sent).toMatchObject({ status: 202, body: { merged: true } });
    const record = (await stack.client.workflow.getHandle(sent.body.recorded).result()) as PullRequestClosed;
    expect(record).toEqual({
      sessionId: started.body.sessionId,
      repo: EXAMPLE_REPO,
      number: 2,
      url: 'https://github.com/Codertocat/Hello-World/pull/2',
      merged: true,
      by: 'Codertocat',
    });
    // The metrics say merged, and the audit chain holds both deliveries.
    const pool = new Pool({ connectionString: process.env.DATABASE_URL });
    try {
      const sessionId = started.body.sessionId;
      const metrics = await pool.query('select merged from session_metrics where session_id = $1', [sessionId]);
      expect(metrics.rows).toEqual([{ merged: true }]);
      const events = await pool.query(
        "select data from audit_events where session_id = $1 and kind = 'webhook' order by seq",
        [sessionId],
      );
      expect(events.rows.map((r) => r.data.source ?? r.data.event)).toEqual([
        expect.stringMatching(/labelled drydock/),
        'pull_request',
      ]);
    } finally {
      await pool.end();
    }
  });

  test('a delivery signed with the old secret during a rotation is accepted', async () => {
    const sent = await deliver('issues', labelled(), { secret: OLD_SECRET });
    expect(sent.status).toBe(202);
    expect(await exists(sent.body.sessionId)).toBe(true);
    await finalStatus(sent.body.sessionId);
  });
});

test('the same delivery twice → one workflow, during the session and after it ended', async () => {
  const payload = labelled();
  const first = await deliver('issues', payload);
  const handle = stack.client.workflow.getHandle(first.body.sessionId);
  const { runId } = await handle.describe();
  const again = await deliver('issues', payload, { delivery: first.delivery });
  expect(again.body.sessionId).toBe(first.body.sessionId);
  await handle.result();
  const later = await deliver('issues', payload, { delivery: first.delivery });
  expect(later).toMatchObject({ status: 202, body: { sessionId: first.body.sessionId } });
  expect((await handle.describe()).runId).toBe(runId);
  const runs: string[] = [];
  for await (const wf of stack.client.workflow.list({ query: `WorkflowId = '${first.body.sessionId}'` })) {
    runs.push(wf.runId);
  }
  expect(runs).toEqual([runId]);
});

describe('refusals start nothing', () => {
  const signedHeaders = async (body: string, delivery: string) => ({
    'content-type': 'application/json',
    'x-github-event': 'issues',
    'x-github-delivery': delivery,
    'x-hub-signature-256': await sign(SECRET, body),
  });

  test('a one-byte change in the body → 401', async () => {
    const body = JSON.stringify(labelled());
    const delivery = newDelivery();
    const headers = await signedHeaders(body, delivery);
    const tampered = body.replace('Spelling error', 'Spelling errer');
    expect(Buffer.byteLength(tampered)).toBe(Buffer.byteLength(body));
    expect(await post('/webhooks/github', tampered, headers)).toEqual({
      status: 401,
      body: { error: 'signature does not match' },
    });
    expect(await exists(`gh-${delivery}`)).toBe(false);
  });

  test('a missing signature header, or a sha1 one → 401', async () => {
    const body = JSON.stringify(labelled());
    const delivery = newDelivery();
    const { 'x-hub-signature-256': signature, ...unsigned } = await signedHeaders(body, delivery);
    expect((await post('/webhooks/github', body, unsigned)).status).toBe(401);
    const sha1 = { ...unsigned, 'x-hub-signature-256': signature.replace('sha256=', 'sha1=') };
    expect((await post('/webhooks/github', body, sha1)).status).toBe(401);
    expect(await exists(`gh-${delivery}`)).toBe(false);
  });

  test('an oversized body → 413, declared or streamed', async () => {
    const payload = labelled();
    payload.issue.body = 'x'.repeat(MAX_BODY);
    const body = JSON.stringify(payload);
    const delivery = newDelivery();
    const headers = await signedHeaders(body, delivery);
    expect(await post('/webhooks/github', body, headers)).toEqual({
      status: 413,
      body: { error: `body over ${MAX_BODY} bytes` },
    });
    // Without a Content-Length (chunked), the server stops at the limit too.
    expect((await post('/webhooks/github', body, { ...headers, 'transfer-encoding': 'chunked' })).status).toBe(413);
    expect(await exists(`gh-${delivery}`)).toBe(false);
  });

  test('a signed body that is not JSON → 400', async () => {
    const delivery = newDelivery();
    const sent = await post(
      '/webhooks/github',
      '{"action": "labeled",',
      await signedHeaders('{"action": "labeled",', delivery),
    );
    expect(sent.status).toBe(400);
    expect(sent.body.error).toMatch(/^body is not JSON/);
    expect(await exists(`gh-${delivery}`)).toBe(false);
  });

  test('an unknown repo → 422 with the reason', async () => {
    const payload = labelled();
    payload.repository.full_name = 'someone/else';
    const sent = await deliver('issues', payload);
    expect(sent).toMatchObject({
      status: 422,
      body: {
        error:
          'repo someone/else is not served by this drydock (register it: drydock repo add <url> --name owner/name)',
      },
    });
    expect(await exists(`gh-${sent.delivery}`)).toBe(false);
  });

  test('events drydock does not act on → 202 ignored; ping → 200', async () => {
    const star = await deliver('star', { action: 'created', repository: { full_name: EXAMPLE_REPO } });
    expect(star).toMatchObject({ status: 202, body: { ignored: "event 'star' is not one drydock acts on" } });
    const opened = await deliver(
      'issues',
      example('issues', (p) => p.action === 'opened'),
    );
    expect(opened).toMatchObject({ status: 202, body: { ignored: "issues.opened: only 'labeled' starts a session" } });
    expect(await exists(`gh-${opened.delivery}`)).toBe(false);
    const ping = await deliver('ping', example('ping'));
    expect(ping.status).toBe(200);
  });
});

describe('the generic CI trigger', () => {
  const ciPost = async (payload: unknown, secret = CI_SECRET, delivery = newDelivery()) => {
    const body = JSON.stringify(payload);
    const sent = await post('/webhooks/ci', body, {
      'content-type': 'application/json',
      'x-drydock-delivery': delivery,
      'x-drydock-signature-256': await sign(secret, body),
    });
    return { ...sent, delivery };
  };

  test('a signed request starts a session on the ref; the same delivery again starts nothing new', async () => {
    const request = { repo: EXAMPLE_REPO, ref: 'main', task: 'make the nightly build green', requestedBy: 'ci-bot' };
    const sent = await ciPost(request);
    expect(sent).toMatchObject({ status: 202, body: { sessionId: `ci-${sent.delivery.toLowerCase()}` } });
    const again = await ciPost(request, CI_SECRET, sent.delivery);
    expect(again.body).toEqual(sent.body);
    const final = await finalStatus(sent.body.sessionId);
    expect(final).toMatchObject({ phase: 'completed', task: 'make the nightly build green', requestedBy: 'ci-bot' });
  });

  test('a wrong signature → 401, an unknown repo → 422; neither starts anything', async () => {
    const wrong = await ciPost({ repo: EXAMPLE_REPO, task: 'x' }, 'not-the-ci-secret-at-all');
    expect(wrong.status).toBe(401);
    expect(await exists(`ci-${wrong.delivery}`)).toBe(false);
    const unknown = await ciPost({ repo: 'someone/else', task: 'x' });
    expect(unknown.status).toBe(422);
    expect(await exists(`ci-${unknown.delivery}`)).toBe(false);
  });
});
