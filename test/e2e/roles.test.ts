/**
 * Per-repo roles through the real `drydock serve` (real Temporal, Docker,
 * git and PostgreSQL; Slack, Linear and GitHub as local stand-ins speaking
 * their protocols): with a `roles` section in the identities file, starting
 * a session needs `requester`, reading and listing need `reader` (a session
 * of a repo one may not read is a 404, as if it did not exist), deciding,
 * following up and attaching need `approver`, and a session's requester may
 * not approve it. The pure rules: test/unit/roles.test.ts.
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sign } from '@octokit/webhooks-methods';
import { status, type SessionStatus } from '../../workflows/api';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github';
import { startFakeLinear, type FakeLinear } from '../support/fake-linear';
import { startFakeSlack, type FakeSlack } from '../support/fake-slack';
import { actionable, EXAMPLE_REPO } from '../support/github-examples';
import { personalTokens } from '../support/identity';
import {
  endSessions,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  runCli,
  startServe,
  startStack,
  waitForStatus,
  type FixtureRepo,
  type TestStack,
} from '../support/helpers';

const SHOP = EXAMPLE_REPO;
const VAULT = 'acme/vault';
const MACHINE_TOKEN = 'ci-roles-token-0123456789abcdef';
const SLACK_TOKEN = 'xoxb-0000000000-drydock-roles-bot';
const SLACK_SECRET = 'slack-signing-secret-for-roles';
const LINEAR_SECRET = 'linear-webhook-secret-for-roles';
const WEBHOOK_SECRET = 'github-webhook-secret-for-roles';
const GITHUB_TOKEN = 'ghp_rolesTestToken0123456789abcdefABCDEF';
const CHANNEL = 'C0SHOP';
const DAVE_SLACK = 'U0DAVE';
const DAVE_LINEAR = '0b6d2f4e-2222-4aaa-8bbb-000000000004';

const IDENTITIES = `people:
  alice: {}
  bob: {}
  carol: {}
  dave:
    slack: ${DAVE_SLACK}
    linear: ${DAVE_LINEAR}
roles:
  ${SHOP}:
    approver: [alice, bob]
    requester: [carol, machine:ci]
    reader: dave
  ${VAULT}:
    approver: alice
`;

let shop: FixtureRepo;
let vault: FixtureRepo;
let stack: TestStack;
let serve: Awaited<ReturnType<typeof startServe>>;
let slack: FakeSlack;
let linear: FakeLinear;
let github: FakeGitHub;
let tokens: Record<'alice' | 'bob' | 'carol' | 'dave', string>;

beforeAll(async () => {
  [shop, vault] = [await makeFixtureRepo(), await makeFixtureRepo()];
  tokens = await personalTokens('alice', 'bob', 'carol', 'dave');
  const identities = path.join(await mkdtemp(path.join(tmpdir(), 'drydock-roles-')), 'identities.yaml');
  await writeFile(identities, IDENTITIES);
  slack = await startFakeSlack({ token: SLACK_TOKEN, signingSecret: SLACK_SECRET });
  linear = await startFakeLinear({ apiKey: 'lin_api_rolesTestKey0123456789abcdef', secret: LINEAR_SECRET });
  const [owner, name] = SHOP.split('/');
  github = await startFakeGitHub({ owner, repo: name, token: GITHUB_TOKEN });
  github.state.permissions.Codertocat = 'admin';
  // The server's default policy: every irreversible action waits for a person.
  stack = await startStack();
  serve = await startServe(stack, {
    DRYDOCK_IDENTITIES_FILE: identities,
    DRYDOCK_API_TOKENS: `ci=${MACHINE_TOKEN}`,
    DRYDOCK_REPOS: [`${SHOP}=${shop.url}`, `${VAULT}=${vault.url}`],
    DRYDOCK_SLACK_BOT_TOKEN: SLACK_TOKEN,
    DRYDOCK_SLACK_API_URL: slack.apiUrl,
    DRYDOCK_SLACK_SIGNING_SECRET: SLACK_SECRET,
    DRYDOCK_SLACK_CHANNELS: [`${CHANNEL}=${SHOP}`],
    DRYDOCK_LINEAR_WEBHOOK_SECRET: LINEAR_SECRET,
    DRYDOCK_LINEAR_TEAMS: [`ENG=${SHOP}`],
    DRYDOCK_WEBHOOK_SECRETS: [WEBHOOK_SECRET],
    GITHUB_TOKEN,
    GITHUB_API_URL: github.url,
    DRYDOCK_TRIGGER_SESSION: { agent: { kind: 'script', steps: [{ run: 'echo hello >> README.md' }] } } as never,
  });
});

const toEnd: string[] = [];
afterAll(async () => {
  await endSessions(stack.client, toEnd);
  await serve?.close();
  await stack?.stop();
  for (const s of [slack, linear, github]) await s?.close();
});

type Answer = { status: number; body: any };

/** The API as `token`'s holder. */
const api = (route: string, token: string, body?: unknown): Promise<Answer> =>
  fetch(`${serve.url}${route}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  }).then(async (res) => ({ status: res.status, body: await res.json() }));

/** A console page with the sign-in cookie of `token`. */
const page = (route: string, token: string) =>
  fetch(`${serve.url}${route}`, { headers: { cookie: `drydock_token=${token}` }, redirect: 'manual' }).then(
    async (res) => ({ status: res.status, text: await res.text() }),
  );

const start = (token: string, repo: string, sessionId?: string) =>
  api('/api/sessions', token, {
    ...(sessionId ? { sessionId } : {}),
    repo,
    task: 'say hello',
    agent: { steps: [{ run: 'echo hello >> README.md' }] },
  });

/** Alice's two sessions, one per repo, waiting for approval. */
let atShop: { id: string; pending: SessionStatus };
let atVault: { id: string; pending: SessionStatus };

async function startWaiting(repo: string): Promise<{ id: string; pending: SessionStatus }> {
  const id = newSessionId('roles');
  toEnd.push(id);
  expect(await start(tokens.alice, repo, id)).toMatchObject({ status: 201, body: { sessionId: id } });
  const pending = await waitForStatus(stack.client.workflow.getHandle(id), inPhase('awaiting_approval'), 120_000);
  return { id, pending };
}

const needs = (who: string, doing: string, repo: string, role: string, held: string) =>
  `${who} may not ${doing} ${repo}: that needs the ${role} role (${held})`;

describe('starting a session needs the requester role', () => {
  test('a reader is refused by the API, Slack, Linear and a GitHub label, naming the role and the repo; a requester starts one and may steer it, not decide on it', async () => {
    const reader = needs('dave', 'start sessions of', SHOP, 'requester', 'dave is a reader');
    expect(await start(tokens.dave, SHOP)).toEqual({ status: 403, body: { error: reader } });
    // A machine is named machine:<name>; it holds nothing on the vault.
    expect(await start(MACHINE_TOKEN, VAULT)).toEqual({
      status: 403,
      body: { error: needs('machine:ci', 'start sessions of', VAULT, 'requester', 'machine:ci has no role there') },
    });
    const command = await slack.command(serve.url, { user: DAVE_SLACK, channel: CHANNEL, text: 'say hello' });
    expect(command).toEqual({
      status: 200,
      body: { response_type: 'ephemeral', text: `drydock did not start a session: ${reader}` },
    });
    const issue = linear.addIssue('ENG-9', 'Say hello', '');
    const labelled = await linear.deliver(serve.url, linear.labelled(issue, DAVE_LINEAR));
    expect(labelled).toEqual({ status: 403, body: { error: reader } });
    // A GitHub writer no person claims acts as github:<login>, which holds no role.
    const payload = actionable('issues');
    github.state.issues[payload.issue.number] = { title: payload.issue.title, body: payload.issue.body };
    const body = JSON.stringify(payload);
    const res = await fetch(`${serve.url}/webhooks/github`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'issues',
        'x-github-delivery': `roles-${Date.now()}`,
        'x-hub-signature-256': await sign(WEBHOOK_SECRET, body),
      },
      body,
    });
    const refused = needs(
      'github:Codertocat',
      'start sessions of',
      SHOP,
      'requester',
      'github:Codertocat has no role there',
    );
    expect({ status: res.status, body: await res.json() }).toEqual({ status: 403, body: { error: refused } });
    expect(github.state.comments.map((c) => c.body)).toContainEqual(
      expect.stringContaining(`drydock did not start a session: ${refused}.`),
    );

    const id = newSessionId('requester');
    toEnd.push(id);
    expect(await start(tokens.carol, SHOP, id)).toMatchObject({ status: 201, body: { sessionId: id } });
    expect(await api(`/api/sessions/${id}`, tokens.carol)).toMatchObject({ status: 200, body: { sessionId: id } });
    const waiting = await waitForStatus(stack.client.workflow.getHandle(id), inPhase('awaiting_approval'), 120_000);
    expect(waiting.requestedBy).toBe('carol');
    // Her own request she may steer (a follow-up); deciding on it is an approver's.
    const more = await api(`/api/sessions/${id}/followups`, tokens.carol, {
      steps: [{ run: 'echo more >> README.md' }],
    });
    expect(more).toMatchObject({ status: 202, body: { round: 2 } });
    expect(await api(`/api/sessions/${id}/decide`, tokens.carol, { decision: 'reject' })).toEqual({
      status: 403,
      body: { error: needs('carol', 'approve, reject or steer sessions of', SHOP, 'approver', 'carol is a requester') },
    });
  });
});

describe('with sessions of two repos waiting', () => {
  beforeAll(async () => {
    [atShop, atVault] = await Promise.all([startWaiting(SHOP), startWaiting(VAULT)]);
  });

  test('reading: a session of a repo one may not read is a 404, as one that does not exist (API, console, events, artifacts, attach)', async () => {
    expect(await api(`/api/sessions/${atShop.id}`, tokens.dave)).toMatchObject({
      status: 200,
      body: { sessionId: atShop.id },
    });
    const unknown = await api('/api/sessions/no-such-session', tokens.dave);
    expect(unknown).toEqual({ status: 404, body: { error: 'no session no-such-session' } });
    for (const who of [tokens.dave, tokens.carol, MACHINE_TOKEN]) {
      expect(await api(`/api/sessions/${atVault.id}`, who)).toEqual({
        status: 404,
        body: { error: `no session ${atVault.id}` },
      });
    }
    expect((await api(`/api/sessions/${atVault.id}`, tokens.alice)).status).toBe(200);
    expect((await page(`/sessions/${atShop.id}`, tokens.dave)).status).toBe(200);
    expect(await page(`/sessions/${atVault.id}`, tokens.dave)).toMatchObject({ status: 404 });
    expect((await page(`/sessions/${atVault.id}/events`, tokens.dave)).status).toBe(404);
    expect((await page(`/artifacts/${atVault.id}/change.diff`, tokens.alice)).status).toBe(200);
    expect(await page(`/artifacts/${atVault.id}/change.diff`, tokens.dave)).toEqual({
      status: 404,
      text: JSON.stringify({ error: `no artifact ${atVault.id}/change.diff` }),
    });
    // Decisions and follow-ups on it are 404 too: nothing says it exists.
    const change = atVault.pending.pendingApproval!.change;
    expect(await api(`/api/sessions/${atVault.id}/decide`, tokens.dave, { decision: 'approve', change })).toEqual({
      status: 404,
      body: { error: `no session ${atVault.id}` },
    });
    expect(await api(`/api/sessions/${atVault.id}/followups`, tokens.carol, { steps: [{ run: 'true' }] })).toEqual({
      status: 404,
      body: { error: `no session ${atVault.id}` },
    });
    const attach = await runCli(['attach', atVault.id, '--server', serve.url], { DRYDOCK_API_TOKEN: tokens.dave });
    expect(attach.stderr).toBe(`drydock: refused: 404: no session ${atVault.id}\n`);
    // The figures span every repo: they need a role on "*".
    expect((await page('/report', tokens.dave)).status).toBe(403);
  });

  test('listing: the API and the console list only the sessions of repos one may read', async () => {
    const ids = async (token: string) => {
      const { status, body } = await api('/api/sessions?limit=1000', token);
      expect(status).toBe(200);
      return (body as { sessionId: string }[]).map((r) => r.sessionId);
    };
    let all: string[] = [];
    for (let i = 0; i < 40 && !(all.includes(atShop.id) && all.includes(atVault.id)); i++) {
      all = await ids(tokens.alice);
      await new Promise((r) => setTimeout(r, 250));
    }
    expect(all).toEqual(expect.arrayContaining([atShop.id, atVault.id]));
    for (const token of [tokens.dave, MACHINE_TOKEN]) {
      const listed = await ids(token);
      expect(listed).toContain(atShop.id);
      expect(listed).not.toContain(atVault.id);
    }
    // Asking for the repo by name lists nothing of it.
    expect(await api(`/api/sessions?repo=${VAULT}`, tokens.dave)).toEqual({ status: 200, body: [] });
    const console = await page('/', tokens.dave);
    expect(console.text).toContain(atShop.id);
    expect(console.text).not.toContain(atVault.id);
  });

  test('deciding needs the approver role, and the requester may not approve their own session; another approver may', async () => {
    const { id } = atShop;
    const change = atShop.pending.pendingApproval!.change;
    const decide = (token: string, decision = 'approve') =>
      api(`/api/sessions/${id}/decide`, token, { decision, change });
    const approve = 'approve, reject or steer sessions of';
    expect(await decide(tokens.dave)).toEqual({
      status: 403,
      body: { error: needs('dave', approve, SHOP, 'approver', 'dave is a reader') },
    });
    expect(await decide(tokens.carol, 'reject')).toEqual({
      status: 403,
      body: { error: needs('carol', approve, SHOP, 'approver', 'carol is a requester') },
    });
    expect(await api(`/api/sessions/${id}/followups`, tokens.carol, { steps: [{ run: 'true' }] })).toEqual({
      status: 403,
      body: { error: needs('carol', approve, SHOP, 'approver', 'carol is a requester') },
    });
    const attach = await runCli(['attach', id, '--server', serve.url], { DRYDOCK_API_TOKEN: tokens.dave });
    expect(attach.stderr).toBe(
      `drydock: refused: 403: ${needs('dave', approve, SHOP, 'approver', 'dave is a reader')}\n`,
    );
    // Self-approval: alice is an approver of the shop, and asked for this session.
    expect(await decide(tokens.alice)).toEqual({
      status: 403,
      body: {
        error: `alice requested this session and may not approve it: self-approval is forbidden on ${SHOP} (the roles' forbidSelfApproval)`,
      },
    });
    // The CLI, logged in as dave, gets the server's answer.
    const cli = { XDG_CONFIG_HOME: await mkdtemp(path.join(tmpdir(), 'drydock-cli-')) };
    expect((await runCli(['login', '--server', serve.url], cli, `${tokens.dave}\n`)).code).toBe(0);
    const byCli = await runCli(['approve', id, '--change', change], cli);
    expect(byCli.code).not.toBe(0);
    expect(byCli.stderr).toContain(`403: ${needs('dave', approve, SHOP, 'approver', 'dave is a reader')}`);
    // A Slack click by dave (on a message of the channel, as the session's would be) is refused in its thread.
    const message = { channel: CHANNEL, ts: '1700000000.000100', text: 'a session', bot_id: 'B0DRYDOCK', versions: [] };
    slack.messages.push(message);
    const value = JSON.stringify({ session: id, action: 'push', change: atShop.pending.pendingApproval!.change });
    await slack.click(serve.url, { user: DAVE_SLACK, message, action: 'approve', value });
    expect(slack.thread(CHANNEL, message.ts).map((m) => m.text)).toContain(
      `<@${DAVE_SLACK}>'s approve was not counted: ${needs('dave', approve, SHOP, 'approver', 'dave is a reader')}`,
    );
    const handle = stack.client.workflow.getHandle(id);
    expect(await handle.query(status)).toMatchObject({ decisions: [] });

    expect(await decide(tokens.bob)).toMatchObject({ status: 200, body: { decision: 'approve', by: 'bob' } });
    expect(((await handle.result()) as SessionStatus).phase).toBe('completed');
    // On the vault alice is the only approver: her own session she may reject, not approve.
    const vaultChange = atVault.pending.pendingApproval!.change;
    const own = (decision: string) =>
      api(`/api/sessions/${atVault.id}/decide`, tokens.alice, { decision, change: vaultChange });
    expect((await own('approve')).status).toBe(403);
    expect(await own('reject')).toMatchObject({ status: 200, body: { decision: 'reject', by: 'alice' } });
  });
});
