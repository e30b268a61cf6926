/// <reference lib="dom" />
/**
 * Where teams work, end to end on real Temporal, Docker, git and PostgreSQL:
 * Slack (a local Slack speaking its Web API, sending signed commands, events
 * and clicks), Linear (a local GraphQL API and signed webhooks), a console
 * sign-in through a real OpenID provider (oidc-provider) in a real Chromium,
 * and a check run with annotations on the GitHub stand-in (a GitHub App).
 */
import { generateKeyPairSync } from 'node:crypto';
import { writeFile, mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { WorkflowNotFoundError } from '@temporalio/client';
import { chromium, type Browser } from 'playwright-core';
import { slackSessionId } from '../../slack/requests';
import { decide, type SessionStatus } from '../../workflows/api';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github';
import { startFakeProviders, type FakeProviders } from '../support/fake-providers';
import { EXAMPLE_REPO } from '../support/github-examples';
import {
  endSessions,
  freePort,
  git,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  remoteHasBranch,
  runCli,
  startServe,
  startSession,
  startStack,
  waitForStatus,
  type FixtureRepo,
  type TestStack,
} from '../support/helpers';
import { startFakeLinear, type FakeLinear } from '../support/fake-linear';
import { startFakeSlack, type FakeSlack, type SlackMessage } from '../support/fake-slack';
import { startOidcProvider, type LocalProvider } from '../support/oidc';

const SLACK_TOKEN = 'xoxb-0000000000-drydock-test-bot';
const SLACK_SECRET = 'slack-signing-secret-for-tests';
const LINEAR_KEY = 'lin_api_drydockTestKey0123456789abcdef';
const LINEAR_SECRET = 'linear-webhook-secret-for-tests';
const MODEL_KEY = 'sk-teams-0123456789abcdef';
const CHANNEL = 'C0SHOP';
const [ALICE, BOB, MALLORY] = ['U0ALICE', 'U0BOB', 'U0MALLORY'];
const ALICE_LINEAR = '0b6d2f4e-1111-4aaa-8bbb-000000000001';
const MACHINE_TOKEN = 'ci-machine-token-0123456789abcdef';

const IDENTITIES = `people:
  alice:
    oidc: alice@example.com
    github: alice-gh
    slack: ${ALICE}
    linear: ${ALICE_LINEAR}
  bob:
    slack: ${BOB}
  mallory:
    slack: ${MALLORY}
  dave:
    oidc: dave@example.com
`;

let repo: FixtureRepo;
let github: FakeGitHub;
let slack: FakeSlack;
let linear: FakeLinear;
let model: FakeProviders;
let provider: LocalProvider;
let stack: TestStack;
/** Sessions of the repo's model agent (Slack); the console's sign-in. */
let chat: Awaited<ReturnType<typeof startServe>>;
/** Sessions of a scripted agent (Linear). */
let scripted: Awaited<ReturnType<typeof startServe>>;
let browser: Browser;

const TRIGGER = {
  verify: { test: 'sh check.sh' },
  publish: { openFor: '1s' },
};

beforeAll(async () => {
  repo = await makeFixtureRepo();
  const head = git(['rev-parse', 'main'], repo.bare).trim();
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-teams-'));
  const identities = path.join(dir, 'identities.yaml');
  await writeFile(identities, IDENTITIES);
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const keyFile = path.join(dir, 'app.pem');
  await writeFile(keyFile, privateKey.export({ type: 'pkcs1', format: 'pem' }));
  const [owner, name] = EXAMPLE_REPO.split('/');
  github = await startFakeGitHub({
    owner,
    repo: name,
    app: {
      appId: '4242',
      publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
      installationId: 77,
    },
  });
  github.state.branches.main = head;
  github.state.issues[5] = { title: 'add() subtracts', body: 'The sum is wrong.' };
  slack = await startFakeSlack({ token: SLACK_TOKEN, signingSecret: SLACK_SECRET });
  linear = await startFakeLinear({ apiKey: LINEAR_KEY, secret: LINEAR_SECRET });
  model = await startFakeProviders({ apiKey: MODEL_KEY });
  const port = await freePort();
  provider = await startOidcProvider({
    port: await freePort(),
    clientId: 'drydock-console',
    clientSecret: 'drydock-console-secret',
    redirectUri: `http://127.0.0.1:${port}/auth/callback`,
    accounts: {
      alice: { email: 'alice@example.com', email_verified: true, name: 'Alice' },
      carol: { email: 'carol@example.com', email_verified: true, name: 'Carol' },
      // Mapped to a person, but the provider never says it verified the address (T4-L9).
      dave: { email: 'dave@example.com', name: 'Dave' },
    },
  });
  stack = await startStack({
    // The thread messages link the console (its port is chosen before it starts).
    DRYDOCK_CONSOLE_URL: `http://127.0.0.1:${port}`,
    DRYDOCK_APPROVERS: ['alice', 'bob'],
    GITHUB_API_URL: github.url,
    GITHUB_APP_ID: '4242',
    GITHUB_APP_PRIVATE_KEY_FILE: keyFile,
    DRYDOCK_SLACK_BOT_TOKEN: SLACK_TOKEN,
    DRYDOCK_SLACK_API_URL: slack.apiUrl,
    DRYDOCK_LINEAR_API_KEY: LINEAR_KEY,
    DRYDOCK_LINEAR_API_URL: linear.apiUrl,
    DRYDOCK_MODEL_BASE_URL: model.baseUrl,
    DRYDOCK_MODEL_API: 'anthropic',
    DRYDOCK_MODEL_API_KEY: MODEL_KEY,
  });
  const shared = {
    DRYDOCK_IDENTITIES_FILE: identities,
    DRYDOCK_REPOS: [`${EXAMPLE_REPO}=${repo.url}`],
    DRYDOCK_SLACK_SIGNING_SECRET: SLACK_SECRET,
    DRYDOCK_SLACK_CHANNELS: [`${CHANNEL}=${EXAMPLE_REPO}`],
    DRYDOCK_LINEAR_WEBHOOK_SECRET: LINEAR_SECRET,
    DRYDOCK_LINEAR_TEAMS: [`ENG=${EXAMPLE_REPO}`],
  };
  chat = await startServe(stack, {
    ...shared,
    DRYDOCK_HTTP_PORT: port,
    DRYDOCK_TRIGGER_SESSION: { ...TRIGGER, agent: { kind: 'openai', model: 'fake-1' } } as never,
    DRYDOCK_OIDC_ISSUER: provider.issuer,
    DRYDOCK_API_TOKENS: `ci=${MACHINE_TOKEN}`,
    DRYDOCK_OIDC_CLIENT_ID: 'drydock-console',
    DRYDOCK_OIDC_CLIENT_SECRET: 'drydock-console-secret',
  });
  scripted = await startServe(stack, {
    ...shared,
    DRYDOCK_TRIGGER_SESSION: {
      ...TRIGGER,
      agent: { kind: 'script', steps: [{ run: 'echo hello >> README.md' }] },
    } as never,
  });
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-background-networking', '--disable-dev-shm-usage', '--disable-gpu'],
  });
});

const toEnd: string[] = [];
afterAll(async () => {
  await endSessions(stack.client, toEnd);
  await browser?.close();
  await chat?.close();
  await scripted?.close();
  await stack?.stop();
  for (const s of [provider, model, linear, slack, github]) await s?.close();
});

/** Polls until `find` returns something; fails with `what` after 90 s. */
async function until<T>(what: string, find: () => T | undefined | false): Promise<T> {
  for (const deadline = Date.now() + 90_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 200))) {
    const found = find();
    if (found) return found;
  }
  throw new Error(`never happened: ${what}`);
}

const statusMessages = () => slack.messages.filter((m) => m.metadata?.event_type === 'drydock_session');
const buttonValue = (m: SlackMessage, action: string) =>
  (m.blocks ?? []).flatMap((b) => b.elements ?? []).find((e: any) => e.action_id === action)?.value as
    string | undefined;
const drydockSaid = (thread: string, pattern: RegExp) =>
  slack.thread(CHANNEL, thread).find((m) => m.bot_id && !m.metadata && pattern.test(m.text));

describe('Slack', () => {
  test('a slash command starts a session whose one message follows its phases; a foreign click, a thread reply, a stale button, an approval', async () => {
    model.script([
      { text: 'Adding the line.', toolCalls: [{ name: 'run', arguments: { command: 'echo hello >> README.md' } }] },
      { text: 'Done: README says hello.' },
      { text: 'And bye.', toolCalls: [{ name: 'run', arguments: { command: 'echo bye >> README.md' } }] },
      { text: 'Done: README says bye too.' },
    ]);
    const answer = await slack.command(chat.url, { user: ALICE, channel: CHANNEL, text: 'say hello in the README' });
    expect(answer).toMatchObject({
      status: 200,
      body: { response_type: 'ephemeral', text: expect.stringMatching(/is starting/) },
    });
    const message = await until('the status message waits for approval', () =>
      statusMessages().find((m) => m.channel === CHANNEL && m.metadata?.event_payload.phase === 'awaiting_approval'),
    );
    const sessionId = String(message.metadata!.event_payload.session_id);
    toEnd.push(sessionId);
    const handle = stack.client.workflow.getHandle(sessionId);
    const first = await waitForStatus(handle, inPhase('awaiting_approval'));
    expect(first).toMatchObject({
      requestedBy: 'alice',
      pendingApproval: { action: 'pull_request', covers: ['push'] },
    });
    // One message, updated in place through the phases, linking the console and the Temporal UI.
    const seen = [...new Set(message.versions.map((v) => v.phase))];
    const order = ['provisioning', 'agent', 'verifying', 'awaiting_approval'];
    expect(seen).toEqual(order.filter((p) => seen.includes(p)));
    expect(seen.length).toBeGreaterThanOrEqual(3);
    expect(seen[0]).toBe('provisioning');
    expect(JSON.stringify(message.blocks)).toMatch(
      new RegExp(`/sessions/${sessionId}\\|review console>.*/workflows/${sessionId}\\|Temporal UI>`),
    );
    const firstValue = buttonValue(message, 'approve')!;
    expect(JSON.parse(firstValue)).toEqual({
      session: sessionId,
      action: 'pull_request',
      change: first.pendingApproval!.change,
    });

    // Mallory is someone, but not an approver: refused in the thread, with the reason.
    await slack.click(chat.url, { user: MALLORY, message, action: 'approve' });
    expect(drydockSaid(message.ts, /mallory is not an approver of this session/)).toBeTruthy();

    // A reply in the thread is a follow-up: a new round, a new change, the same message.
    const reply = await slack.reply(chat.url, {
      user: ALICE,
      channel: CHANNEL,
      thread: message.ts,
      text: 'also say bye',
    });
    expect(reply).toMatchObject({ status: 200, body: { sessionId, round: 2 } });
    expect(drydockSaid(message.ts, /Follow-up from alice taken: round 2/)).toBeTruthy();
    const second = await waitForStatus(
      handle,
      (s) => s.round === 2 && s.phase === 'awaiting_approval' && s.pendingApproval !== undefined,
      120_000,
    );
    expect(second.pendingApproval!.change).not.toBe(first.pendingApproval!.change);
    await until('the message shows the new change', () =>
      buttonValue(message, 'approve')?.includes(second.pendingApproval!.change),
    );

    // The old button is stale now: refused in the thread, and nothing is decided.
    await slack.click(chat.url, { user: BOB, message, action: 'approve', value: firstValue });
    expect(drydockSaid(message.ts, /was not counted: stale: change/)).toBeTruthy();
    expect((await waitForStatus(handle, inPhase('awaiting_approval'))).decisions).toEqual([]);

    await slack.click(chat.url, { user: BOB, message, action: 'approve' });
    const final = (await handle.result()) as SessionStatus;
    expect(final.phase).toBe('completed');
    expect(final.decisions).toMatchObject([
      { decision: 'approve', action: 'pull_request', by: 'bob', change: second.pendingApproval!.change },
    ]);
    expect(remoteHasBranch(repo.bare, final.branch!)).toBe(true);
    expect(git(['show', `${final.branch}:README.md`], repo.bare)).toBe('# fixture\nhello\nbye\n');
    await until('the message shows the end', () => message.metadata?.event_payload.phase === 'completed');
    expect(JSON.stringify(message.blocks)).toContain('pull_request approved by bob');
    expect(JSON.stringify(message.blocks)).not.toContain('"actions"');
    // Exactly one status message for the session, in the channel.
    expect(statusMessages().filter((m) => m.metadata?.event_payload.session_id === sessionId)).toHaveLength(1);
  });

  test("a mention starts a session whose message is in the mention's thread; Reject ends it", async () => {
    model.script([
      { text: 'Adding it.', toolCalls: [{ name: 'run', arguments: { command: 'echo hello >> README.md' } }] },
      { text: 'Done.' },
    ]);
    const sent = await slack.mention(chat.url, { user: ALICE, channel: CHANNEL, text: 'greet the reader' });
    expect(sent).toMatchObject({ status: 200, body: { sessionId: expect.stringMatching(/^slack-/) } });
    const { sessionId } = sent.body;
    toEnd.push(sessionId);
    const mention = slack.messages.find((m) => m.user === ALICE && m.text.endsWith('greet the reader'))!;
    const message = await until('the message waits for approval', () =>
      statusMessages().find(
        (m) =>
          m.metadata?.event_payload.session_id === sessionId && m.metadata?.event_payload.phase === 'awaiting_approval',
      ),
    );
    expect(message.thread_ts).toBe(mention.ts);
    await slack.click(chat.url, { user: ALICE, message, action: 'reject' });
    const final = (await stack.client.workflow.getHandle(sessionId).result()) as SessionStatus;
    expect(final).toMatchObject({ phase: 'rejected', requestedBy: 'alice', task: 'greet the reader' });
    expect(final.decisions).toMatchObject([{ decision: 'reject', by: 'alice' }]);
  });

  test('a forged or replayed Slack request answers 401 and starts nothing', async () => {
    const before = slack.messages.length;
    const triggerId = '1700000000.1.deadbeef';
    const form = new URLSearchParams({
      command: '/drydock',
      text: 'delete everything',
      team_id: 'T0DRYDOCK',
      channel_id: CHANNEL,
      user_id: ALICE,
      trigger_id: triggerId,
    }).toString();
    const forged = await slack.send(chat.url, '/slack/commands', form, {
      'content-type': 'application/x-www-form-urlencoded',
      'x-slack-request-timestamp': String(Math.floor(Date.now() / 1000)),
      'x-slack-signature': `v0=${'0'.repeat(64)}`,
    });
    expect(forged).toMatchObject({ status: 401, body: { error: 'X-Slack-Signature does not match' } });
    const { signSlackRequest } = await import('../../slack/signature');
    const old = Math.floor(Date.now() / 1000) - 6 * 60;
    const replayed = await slack.send(chat.url, '/slack/commands', form, {
      'content-type': 'application/x-www-form-urlencoded',
      ...signSlackRequest(SLACK_SECRET, form, old),
    });
    expect(replayed.status).toBe(401);
    const event = await slack.send(chat.url, '/slack/events', '{"type":"url_verification","challenge":"x"}', {
      'content-type': 'application/json',
      ...signSlackRequest('not-the-signing-secret', '{"type":"url_verification","challenge":"x"}'),
    });
    expect(event.status).toBe(401);
    await expect(
      stack.client.workflow.getHandle(slackSessionId('T0DRYDOCK', triggerId)).describe(),
    ).rejects.toBeInstanceOf(WorkflowNotFoundError);
    expect(slack.messages.length).toBe(before);
    // Slack's URL check, signed, is answered.
    const body = '{"type":"url_verification","challenge":"3eZbrw1aB"}';
    expect(
      await slack.send(chat.url, '/slack/events', body, {
        'content-type': 'application/json',
        ...signSlackRequest(SLACK_SECRET, body),
      }),
    ).toMatchObject({ status: 200, body: { challenge: '3eZbrw1aB' } });
  });
});

describe('Linear', () => {
  test('a label starts a session that comments back: started, ready for review, the pull request, the end; a redelivery starts nothing new', async () => {
    const issue = linear.addIssue('ENG-7', 'Greet the reader', 'The README should say hello.');
    const payload = linear.labelled(issue, ALICE_LINEAR);
    const sent = await linear.deliver(scripted.url, payload);
    expect(sent).toMatchObject({ status: 202, body: { sessionId: expect.stringMatching(/^linear-eng-7-/) } });
    const { sessionId } = sent.body;
    toEnd.push(sessionId);
    expect(await linear.deliver(scripted.url, payload)).toMatchObject({ status: 202, body: { sessionId } });
    const handle = stack.client.workflow.getHandle(sessionId);
    const waiting = await waitForStatus(handle, inPhase('awaiting_approval'), 120_000);
    expect(waiting.requestedBy).toBe('alice');
    expect(waiting.task).toMatch(/^Resolve Linear issue ENG-7: Greet the reader\n/);
    await until('the review comment', () =>
      issue.comments.some((c) => c.body.startsWith('A change is ready for review')),
    );
    await handle.executeUpdate(decide, { args: [{ decision: 'approve', action: 'pull_request', by: 'bob' }] });
    const final = (await handle.result()) as SessionStatus;
    expect(final.phase).toBe('completed');
    await until('the last comment', () => issue.comments.length === 4);
    expect(issue.comments.map((c) => c.body)).toEqual([
      expect.stringMatching(/^drydock is working on this: /),
      expect.stringMatching(/^A change is ready for review \(pull_request, change `[0-9a-f]{12}`\)/),
      expect.stringMatching(new RegExp(`^drydock opened a pull request for this: ${final.pullRequest!.url} `)),
      expect.stringMatching(/^drydock's session completed\. \(\[session\]/),
    ]);
    expect(linear.operations).toContain('DrydockComment');
  });

  test('a forged Linear signature answers 401 and starts nothing; an unknown person is refused on the issue', async () => {
    const issue = linear.addIssue('ENG-8', 'Nothing', '');
    const forged = await linear.deliver(scripted.url, linear.labelled(issue, ALICE_LINEAR), {
      secret: 'wrong-secret-0123456789',
    });
    expect(forged.status).toBe(401);
    const stale = linear.labelled(issue, ALICE_LINEAR);
    stale.webhookTimestamp = Date.now() - 5 * 60_000;
    expect((await linear.deliver(scripted.url, stale)).status).toBe(401);
    expect(issue.comments).toEqual([]);
    const stranger = await linear.deliver(scripted.url, linear.labelled(issue, 'someone-else'));
    expect(stranger).toMatchObject({
      status: 403,
      body: { error: expect.stringMatching(/not anyone in drydock's identities file/) },
    });
    expect(issue.comments.map((c) => c.body)).toEqual([
      expect.stringMatching(/^drydock did not start a session: Linear user someone-else/),
    ]);
  });
});

describe('one identity per person', () => {
  test('a console sign-in through the OpenID provider names alice, whose approval counts; her CLI token is hers too; an unmapped account, and an email the provider did not verify, are refused', async () => {
    const id = newSessionId('oidc');
    toEnd.push(id);
    const handle = await startSession(stack, id, {
      repo: { url: repo.url },
      task: 'say hello',
      agent: { steps: [{ run: 'echo hello >> README.md' }] },
      verify: { test: 'sh check.sh' },
      approval: { approvers: ['alice'] },
    });
    await waitForStatus(handle, inPhase('awaiting_approval'), 120_000);
    const context = await browser.newContext();
    const page = await context.newPage();
    try {
      await page.goto(`${chat.url}/`);
      await page.click('#sso');
      await page.fill('input[name=login]', 'alice');
      await page.fill('input[name=password]', 'any password');
      await page.click('button[type=submit]');
      await page.click('button:has-text("Continue")'); // the provider's consent
      await page.waitForURL(`${chat.url}/`);
      expect(await page.textContent('header')).toContain('alice');
      await page.goto(`${chat.url}/sessions/${id}`);
      await page.click('button[data-decision=approve]');
      const final = (await handle.result()) as SessionStatus;
      expect(final.decisions).toMatchObject([{ decision: 'approve', by: 'alice' }]);
      // The console issues alice a CLI token: it names her, not a machine.
      const issued = await page.evaluate(async () => {
        const res = await fetch('/api/tokens', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: '{}',
        });
        return res.json();
      });
      expect(issued).toMatchObject({ person: 'alice', token: expect.stringMatching(/^ddp_/) });
      const whoami = await fetch(`${chat.url}/api/whoami`, { headers: { authorization: `Bearer ${issued.token}` } });
      expect(await whoami.json()).toEqual({ name: 'alice', kind: 'person' });
      // The CLI keeps it, and decides as alice through the server, whatever its OS user.
      const cli = {
        XDG_CONFIG_HOME: await mkdtemp(path.join(tmpdir(), 'drydock-cli-')),
        DRYDOCK_USER: 'root-on-laptop',
      };
      const login = await runCli(['login', '--server', chat.url], cli, `${issued.token}\n`);
      expect(login).toMatchObject({ code: 0, stdout: expect.stringContaining(`as alice`) });
      const next = newSessionId('cli-login');
      toEnd.push(next);
      const second = await startSession(stack, next, {
        repo: { url: repo.url },
        task: 'say hello again',
        agent: { steps: [{ run: 'echo hello >> README.md' }] },
        verify: { test: 'sh check.sh' },
        approval: { approvers: ['alice'] },
      });
      const pending = await waitForStatus(second, inPhase('awaiting_approval'), 120_000);
      const approved = await runCli(['approve', next, '--change', pending.pendingApproval!.change], cli);
      expect(approved).toMatchObject({ code: 0, stdout: `approved push of ${next} as alice\n` });
      expect(((await second.result()) as SessionStatus).decisions).toMatchObject([{ by: 'alice' }]);
      // A machine's token names a machine.
      const machine = await fetch(`${chat.url}/api/whoami`, { headers: { authorization: `Bearer ${MACHINE_TOKEN}` } });
      expect(await machine.json()).toEqual({ name: 'machine:ci', kind: 'machine' });
    } finally {
      await context.close();
    }
    for (const [login, message] of [
      ['carol', "carol@example.com is not anyone's account in drydock's identities file."],
      ['dave', 'Sign-in failed: the provider has not verified dave@example.com (email_verified is absent).'],
    ]) {
      const stranger = await browser.newContext();
      try {
        const page2 = await stranger.newPage();
        await page2.goto(`${chat.url}/login`);
        await page2.click('#sso');
        await page2.fill('input[name=login]', login);
        await page2.fill('input[name=password]', 'any password');
        await page2.click('button[type=submit]');
        await page2.click('button:has-text("Continue")');
        await page2.waitForSelector('#message');
        expect(await page2.textContent('#message')).toBe(message);
        const cookies = await stranger.cookies(chat.url);
        expect(cookies.find((c) => c.name === 'drydock_token')).toBeUndefined();
      } finally {
        await stranger.close();
      }
    }
  });
});

describe('GitHub check runs', () => {
  test('with a GitHub App a session reports a check run, its failing tests annotated on their lines in the change', async () => {
    // The second failure names a file the change did not touch: no annotation there in drydock's name.
    const failing = await makeFixtureRepo({
      'test.sh': `mkdir -p reports
cat > reports/junit.xml <<'XML'
<testsuites><testsuite name="add"><testcase classname="add" name="adds two numbers" file="src/add.test.js"><failure message="expected 3, got -1">AssertionError: expected 3, got -1
    at Object.&lt;anonymous&gt; (/workspace/src/add.test.js:5:10)</failure></testcase><testcase classname="add" name="adds zero"/><testcase classname="add" name="@octocat look" file="README.md"><failure message="see README">at (/workspace/README.md:1:1)</failure></testcase></testsuite></testsuites>
XML
exit 1
`,
    });
    const head = git(['rev-parse', 'main'], failing.bare).trim();
    const id = newSessionId('checks');
    toEnd.push(id);
    const handle = await startSession(stack, id, {
      repo: { url: failing.url },
      task: 'make add() add',
      agent: { steps: [{ run: 'mkdir -p src && echo "// tried" >> src/add.test.js' }] },
      verify: { test: 'sh test.sh', junit: ['reports/junit.xml'] },
      trigger: { repo: EXAMPLE_REPO, kind: 'issue', issue: 5 },
    });
    const final = await handle.result().catch(() => undefined);
    expect(final).toBeUndefined(); // the tests fail: the session fails
    const run = await until('a completed check run', () =>
      github.state.checkRuns.find((r) => r.external_id === id && r.status === 'completed'),
    );
    expect(run).toMatchObject({ name: 'drydock', head_sha: head, conclusion: 'failure' });
    expect(run.history[0]).toBe('in_progress');
    expect(run.annotations).toEqual([
      {
        path: 'src/add.test.js',
        start_line: 5,
        end_line: 5,
        annotation_level: 'failure',
        title: 'add › adds two numbers',
        message: 'expected 3, got -1',
      },
    ]);
    // One run per session, updated in place; no commit status beside it (that is for token setups).
    expect(github.state.checkRuns.filter((r) => r.external_id === id)).toHaveLength(1);
    expect(github.state.statuses.filter((s) => s.sha === head)).toEqual([]);
  });
});
