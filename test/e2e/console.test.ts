/// <reference lib="dom" />
/**
 * The tour: `drydock demo` brings a session to the approval, and a reviewer
 * approves it in the review console, in a real headless Chromium
 * (playwright-core, Debian's chromium). Also the JSON API with its tokens.
 */
import { execFileSync } from 'node:child_process';
import { chromium, type Browser, type Page } from 'playwright-core';
import { status, type SessionStatus } from '../../workflows/api';
import { startFakeProviders, type FakeProviders } from '../support/fake-providers';
import { personalTokens } from '../support/identity';
import { watchAnswer } from '../support/page-answers';
import {
  git,
  GO_GATE,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  runCli,
  scriptedSession,
  startServe,
  startSession,
  startStack,
  waitForStatus,
  type TestStack,
} from '../support/helpers';

/** Alice's and Bob's personal tokens (as `drydock token issue` makes them). */
let ALICE: string;
let BOB: string;

let stack: TestStack;
let serve: Awaited<ReturnType<typeof startServe>>;
let browser: Browser;
let fixture: { url: string; bare: string };

const MODEL_KEY = 'sk-console-0123456789abcdef';
let model: FakeProviders;

beforeAll(async () => {
  fixture = await makeFixtureRepo();
  ({ alice: ALICE, bob: BOB } = await personalTokens('alice', 'bob'));
  model = await startFakeProviders({ apiKey: MODEL_KEY });
  // The server's default policy: every irreversible action waits for a person.
  stack = await startStack({
    DRYDOCK_MODEL_BASE_URL: model.baseUrl,
    DRYDOCK_MODEL_API: 'anthropic',
    DRYDOCK_MODEL_API_KEY: MODEL_KEY,
    DRYDOCK_MODEL_PRICES: { 'fake-1': { input: 1, output: 2 } },
  });
  serve = await startServe(stack, {
    DRYDOCK_REPOS: [`acme/fixture=${fixture.url}`],
  });
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-background-networking', '--disable-dev-shm-usage', '--disable-gpu'],
  });
});
/** Sessions a failed test may leave waiting: cancelled at the end, so their sandboxes go. */
const sessionsToEnd: string[] = [];
afterAll(async () => {
  for (const id of sessionsToEnd) {
    const handle = stack.client.workflow.getHandle(id);
    if ((await handle.describe()).status.name === 'RUNNING') await handle.cancel();
    await handle.result().catch(() => undefined);
  }
  await browser?.close();
  await serve?.close();
  await stack?.stop();
  await model?.close();
});

/** A signed-in console page (alice). */
async function signedIn(): Promise<Page> {
  const page = await browser.newPage();
  await page.goto(serve.url);
  await page.fill('input[name=token]', ALICE);
  await page.click('button[type=submit]');
  return page;
}

test('the session page keeps up without a reload: phases and the running step stream in; the diff is per file with line numbers', async () => {
  const id = newSessionId('live');
  sessionsToEnd.push(id);
  const handle = await startSession(
    stack,
    id,
    scriptedSession(
      fixture.url,
      'a slow change',
      // Until the test has seen the page while it runs (/tmp/go), at most 2 minutes.
      `echo step-started; ${GO_GATE}; echo "<b>live</b>" >> README.md; echo x > NEW.txt`,
    ),
  );
  const page = await signedIn();
  try {
    await page.goto(`${serve.url}/sessions/${id}`);
    // Marks this document: a reload would lose it.
    await page.evaluate(() => Object.assign(window, { drydockMarker: 1 }));
    expect(await page.textContent('#phase')).not.toBe('awaiting_approval');
    await page.waitForFunction(() => document.getElementById('running')?.textContent?.includes('step-started'), null, {
      timeout: 90_000,
    });
    const { sandbox } = await waitForStatus(handle, (s) => s.sandbox !== undefined);
    execFileSync('docker', ['exec', sandbox!.name, 'touch', '/tmp/go']);
    await page.waitForFunction(() => document.getElementById('phase')?.textContent === 'awaiting_approval', null, {
      timeout: 90_000,
    });
    expect(await page.evaluate(() => (window as unknown as { drydockMarker?: number }).drydockMarker)).toBe(1);
    // One collapsible section per file, with line numbers; the change's HTML is shown as text.
    expect(await page.locator('#diff details.file summary').allTextContents()).toEqual([
      expect.stringContaining('NEW.txt'),
      expect.stringContaining('README.md'),
    ]);
    expect(await page.locator('#diff .d2h-code-linenumber').count()).toBeGreaterThan(0);
    expect(await page.locator('#diff b').count()).toBe(0);
    expect(await page.textContent('#diff')).toContain('<b>live</b>');
    await page.click('#diff details.file summary >> nth=0');
    expect(await page.locator('#diff details.file >> nth=0').evaluate((d: HTMLDetailsElement) => d.open)).toBe(false);
    // The approve button still works on the redrawn part.
    const rejected = watchAnswer(page, serve.log, { request: '/decide', sessionId: id });
    await page.click('button[data-decision=reject]');
    await rejected.wait();
    await page.waitForFunction(() => document.getElementById('live-state')?.textContent === 'ended', null, {
      timeout: 60_000,
    });
    expect(await page.textContent('#phase')).toBe('rejected');
  } finally {
    await page.close();
  }
  expect((await handle.result()) as SessionStatus).toMatchObject({ phase: 'rejected' });
});

test("a model-driven session's agent panel shows its model, turns, tokens and cost, live", async () => {
  const id = newSessionId('live-model');
  sessionsToEnd.push(id);
  model.script([
    { text: 'Reading.', toolCalls: [{ name: 'run', arguments: { command: 'sleep 4; cat README.md' } }] },
    { text: 'Nothing to change: the README is fine.' },
  ]);
  const page = await signedIn();
  try {
    const handle = await startSession(stack, id, {
      repo: { url: fixture.url },
      task: 'look at the README',
      agent: { kind: 'openai', model: 'fake-1' },
    });
    await page.goto(`${serve.url}/sessions/${id}`);
    await page.waitForFunction(() => document.getElementById('live-state')?.textContent === 'ended', null, {
      timeout: 120_000,
    });
    const final = (await handle.result()) as SessionStatus;
    expect(final.agent).toMatchObject({ kind: 'openai', model: 'fake-1', turn: 2 });
    expect(await page.textContent('#agent .agent-kind')).toBe('openai');
    expect(await page.textContent('#agent .agent-model')).toBe('fake-1');
    expect(await page.textContent('#agent .agent-turns')).toBe('2');
    expect(await page.textContent('#agent .agent-tokens')).toBe(
      `${final.agent!.usage!.totalTokens} (${final.agent!.usage!.promptTokens} in, ${final.agent!.usage!.completionTokens} out)`,
    );
    expect(await page.textContent('#agent .agent-cost')).toBe(`$${final.agent!.costUsd!.toFixed(4)}`);
    expect(final.agent!.costUsd).toBeGreaterThan(0);
    expect(await page.textContent('#summary')).toContain('Nothing to change');
    expect(await page.locator('#agent a', { hasText: 'transcript' }).count()).toBe(1);
  } finally {
    await page.close();
  }
});

/** What a session's events stream sends in its first 2.5 s (a poll a second: two or three looks). */
async function firstEvents(id: string, query: string, headers: Record<string, string> = {}): Promise<string> {
  const res = await fetch(`${serve.url}/sessions/${id}/events${query}`, {
    headers: { authorization: `Bearer ${ALICE}`, ...headers },
    signal: AbortSignal.timeout(2_500),
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  let text = '';
  try {
    for (let read = await reader.read(); !read.done; read = await reader.read())
      text += Buffer.from(read.value).toString();
  } catch (err) {
    if (!['TimeoutError', 'AbortError'].includes((err as Error).name)) throw err;
  }
  return text;
}

let demo: { sessionId: string; phase: string; console: string };

test('a follow-up from the page: a new round, and the page shows the new change; the page says how to attach', async () => {
  const id = newSessionId('followup-page');
  sessionsToEnd.push(id);
  const handle = await startSession(stack, id, scriptedSession(fixture.url, 'say hello', 'echo hello >> README.md'));
  const first = await waitForStatus(handle, inPhase('awaiting_approval'), 120_000);
  const page = await signedIn();
  try {
    // An update arriving while a person types (here: the stream's first, asked for without the page's
    // version so that it comes, and held until half the note is typed).
    let connect!: () => void;
    const connected = new Promise<void>((resolve) => (connect = resolve));
    await page.route('**/events?*', async (route) => {
      await connected;
      const url = new URL(route.request().url());
      url.searchParams.delete('seen');
      await route.continue({ url: url.toString() });
    });
    await page.goto(`${serve.url}/sessions/${id}`);
    // The stream does not send the live part the page already shows (a redraw closes an open comment
    // form): not on the first connect (`?seen=`), not on a reconnect (`Last-Event-ID`).
    const seen = (await page.getAttribute('#live', 'data-seen'))!;
    expect(seen).toMatch(/^[\w-]{22}$/);
    expect(await firstEvents(id, `?seen=${seen}`)).not.toContain('event: update');
    expect(await firstEvents(id, '', { 'last-event-id': seen })).not.toContain('event: update');
    expect(await firstEvents(id, '')).toContain(`id: ${seen}\nevent: update\n`);
    await page.click('#followup-text');
    await page.keyboard.type('[{"run": "echo more');
    await page.evaluate(() => {
      (window as unknown as { typedIn: unknown }).typedIn = document.getElementById('followup-text');
    });
    connect();
    await page.waitForFunction(
      () => document.getElementById('followup-text') !== (window as unknown as { typedIn: unknown }).typedIn,
      undefined,
      { timeout: 60_000 },
    );
    // The redraw kept the focus and the caret: the rest of the note goes on where it was.
    await page.keyboard.type(' >> README.md"}]');
    expect(await page.inputValue('#followup-text')).toBe('[{"run": "echo more >> README.md"}]');
    // The exact commands to take over, on the sandbox's host and through this server.
    expect(await page.textContent('#attach-command')).toBe(`drydock attach ${id}`);
    expect(await page.textContent('#attach-remote')).toBe(
      `DRYDOCK_API_TOKEN=<your token> drydock attach ${id} --server ${serve.url}`,
    );
    // The events stream may redraw the live part at any time: what is typed and the answer survive it.
    // Here the answer is held until the live part has been redrawn (the element of the click is gone).
    await page.evaluate(() => {
      (window as unknown as { clicked: unknown }).clicked = document.getElementById('followup-answer');
    });
    await page.route('**/followups', async (route) => {
      const response = await route.fetch();
      await page.waitForFunction(
        () => document.getElementById('followup-answer') !== (window as unknown as { clicked: unknown }).clicked,
        undefined,
        { timeout: 60_000 },
      );
      await route.fulfill({ response });
    });
    const accepted = watchAnswer(page, serve.log, {
      id: 'followup-answer',
      request: '/followups',
      sessionId: id,
      textStarts: 'accepted',
      timeoutMs: 60_000,
    });
    await page.click('#followup-send');
    await accepted.wait();
    const second = await waitForStatus(
      handle,
      (s) => s.pendingApproval !== undefined && s.pendingApproval.change !== first.pendingApproval!.change,
      120_000,
    );
    expect(second.rounds?.map((r) => [r.round, r.by])).toEqual([
      [1, undefined],
      [2, 'alice'],
    ]);
    // The page keeps up: the new change is the one on display, without a reload.
    const shown = second.pendingApproval!.change.slice(0, 12);
    await page.waitForFunction((c) => document.getElementById('change')?.textContent === c, shown, {
      timeout: 30_000,
    });
    // The answer outlived the redraws since, with the button that sent it focused all along (a caret
    // asked of the button made each redraw throw before it put the answer back: run 26, issue 45).
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('followup-send');
    expect(await page.textContent('#followup-answer')).toMatch(/^accepted for round 2/);
    const rejected = watchAnswer(page, serve.log, { request: '/decide', sessionId: id });
    await page.click('button[data-decision=reject]');
    await rejected.wait();
  } finally {
    await page.unrouteAll({ behavior: 'ignoreErrors' });
    await page.close();
  }
  expect((await handle.result()) as SessionStatus).toMatchObject({ phase: 'rejected', round: 2 });
});

test('drydock demo: the agent fixes the failing test, verification passes, the session waits in the console', async () => {
  const id = newSessionId('demo');
  sessionsToEnd.push(id);
  const out = await runCli(['demo', '--id', id, '--json'], {
    TEMPORAL_ADDRESS: stack.config.TEMPORAL_ADDRESS,
    DRYDOCK_TASK_QUEUE: stack.config.DRYDOCK_TASK_QUEUE,
    DRYDOCK_DATA_DIR: stack.config.DRYDOCK_DATA_DIR,
    DRYDOCK_HTTP_PORT: new URL(serve.url).port,
  });
  expect(out.code).toBe(0);
  demo = JSON.parse(out.stdout);
  expect(demo).toEqual({
    sessionId: expect.stringMatching(/-demo-/),
    phase: 'awaiting_approval',
    console: `${serve.url}/sessions/${demo.sessionId}`,
  });
  const s = await stack.client.workflow.getHandle(demo.sessionId).query(status);
  expect(s.verification).toMatchObject({ passed: true, report: { total: 3, passed: 3, failed: 0 } });
  expect(s.verification!.browser).toMatchObject({ outcome: 'passed' });
});

test('the console: a wrong token is refused; the awaiting session is listed; its page shows diff, tests and screenshot; Approve completes it', async () => {
  const page = await browser.newPage();
  try {
    await page.goto(serve.url);
    expect(new URL(page.url()).pathname).toBe('/login');
    await page.fill('input[name=token]', 'not-a-token-anyone-has');
    await page.click('button[type=submit]');
    expect(await page.textContent('#message')).toBe('That token is not valid.');
    expect((await page.request.get(`${serve.url}/api/sessions`)).status()).toBe(401);

    await page.fill('input[name=token]', ALICE);
    await page.click('button[type=submit]');
    const awaiting = page.locator('section[data-phase=awaiting_approval]');
    await awaiting.locator(`a[href="/sessions/${demo.sessionId}"]`).click();

    expect(await page.textContent('#phase')).toBe('awaiting_approval');
    const lines = (kind: string) => page.locator(`#diff .d2h-${kind} .d2h-code-line-ctn`).allTextContents();
    expect(await lines('ins')).toContain('exports.add = (a, b) => a + b;');
    expect(await lines('del')).toContain('exports.add = (a, b) => a - b;');
    expect(await page.textContent('#tests')).toContain('passed: node test.js (3 tests: 3 passed, 0 failed, 0 skipped)');
    const shot = page.locator('#screenshots img').first();
    // The screenshot really loaded (served from the artifact store), and it is the app's page.
    expect(await shot.evaluate((img: HTMLImageElement) => img.complete && img.naturalWidth)).toBe(1280);

    const approved = watchAnswer(page, serve.log, { request: '/decide', sessionId: demo.sessionId });
    await page.click('button[data-decision=approve]');
    await approved.wait();
    expect(await page.textContent('#answer')).toBe('approved push as alice');
  } finally {
    await page.close();
  }
  const final = (await stack.client.workflow.getHandle(demo.sessionId).result()) as SessionStatus;
  expect(final.phase).toBe('completed');
  expect(final.decisions).toMatchObject([{ decision: 'approve', action: 'push', by: 'alice' }]);

  // The metrics page shows the report's figures, this approved session among them.
  const metrics = await browser.newPage();
  try {
    await metrics.goto(serve.url);
    await metrics.fill('input[name=token]', ALICE);
    await metrics.click('button[type=submit]');
    await metrics.goto(`${serve.url}/report?since=1h&repo=${encodeURIComponent(final.repo)}`);
    const cells = await metrics.locator('#metrics tr').allTextContents();
    expect(cells).toEqual(expect.arrayContaining(['sessions1', 'approved1', 'acceptance rate1']));
  } finally {
    await metrics.close();
  }
});

describe('the API', () => {
  const api = (path: string, token: string | undefined, init: { method?: string; body?: unknown } = {}) =>
    fetch(`${serve.url}${path}`, {
      method: init.method ?? 'GET',
      headers: {
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      body: init.body === undefined ? undefined : typeof init.body === 'string' ? init.body : JSON.stringify(init.body),
    }).then(async (res) => ({ status: res.status, body: await res.json() }));

  test('no token or a wrong one → 401, on every endpoint', async () => {
    expect((await api('/api/sessions', undefined)).status).toBe(401);
    expect(await api('/api/sessions', 'wrong-token-wrong-token')).toEqual({
      status: 401,
      body: { error: 'a valid bearer token is required' },
    });
    expect((await api('/api/sessions', 'wrong', { method: 'POST', body: {} })).status).toBe(401);
    expect((await api('/api/sessions/x/decide', 'wrong', { method: 'POST', body: {} })).status).toBe(401);
  });

  test('start as alice, list and read it, self-approval refused with the reason, bob approves', async () => {
    const sessionId = newSessionId('api');
    sessionsToEnd.push(sessionId);
    const started = await api('/api/sessions', ALICE, {
      method: 'POST',
      body: {
        sessionId,
        repo: 'acme/fixture',
        task: 'say hello',
        agent: { steps: [{ run: 'echo hello >> README.md' }] },
        verify: { test: 'sh check.sh' },
        approval: { forbidSelfApproval: true },
      },
    });
    expect(started).toEqual({
      status: 201,
      body: { sessionId, url: `${serve.url}/sessions/${sessionId}` },
    });
    const handle = stack.client.workflow.getHandle(sessionId);
    const waiting = await waitForStatus(handle, inPhase('awaiting_approval'));
    expect(waiting.requestedBy).toBe('alice');

    let listed: { sessionId: string }[] = [];
    for (let i = 0; i < 40 && !listed.some((r) => r.sessionId === sessionId); i++) {
      listed = (await api('/api/sessions?phase=awaiting_approval&repo=acme/fixture', BOB)).body as typeof listed;
      await new Promise((r) => setTimeout(r, 250));
    }
    expect(listed.map((r) => r.sessionId)).toContain(sessionId);
    expect((await api(`/api/sessions/${sessionId}`, BOB)).body).toMatchObject({
      sessionId,
      phase: 'awaiting_approval',
    });

    // An approval names the change reviewed (a follow-up or an attach could swap the pending one first).
    const unnamed = await api(`/api/sessions/${sessionId}/decide`, BOB, {
      method: 'POST',
      body: { decision: 'approve' },
    });
    expect(unnamed).toEqual({
      status: 400,
      body: { error: 'change: the change you approve (its whole hash, pendingApproval.change)' },
    });
    const change = waiting.pendingApproval!.change;
    const self = await api(`/api/sessions/${sessionId}/decide`, ALICE, {
      method: 'POST',
      body: { decision: 'approve', change },
    });
    expect(self).toEqual({
      status: 409,
      body: { error: 'alice requested this session and may not approve it (self-approval is forbidden)' },
    });
    const impersonated = await api(`/api/sessions/${sessionId}/decide`, ALICE, {
      method: 'POST',
      body: { decision: 'approve', by: 'bob', change },
    });
    expect(impersonated).toEqual({
      status: 403,
      body: { error: 'you are alice; a decision is recorded as its sender' },
    });
    const approved = await api(`/api/sessions/${sessionId}/decide`, BOB, {
      method: 'POST',
      body: { decision: 'approve', change: waiting.pendingApproval!.change, comment: 'fine' },
    });
    expect(approved).toMatchObject({ status: 200, body: { decision: 'approve', action: 'push', by: 'bob' } });
    const final = (await handle.result()) as SessionStatus;
    expect(final.phase).toBe('completed');
    expect(git(['rev-parse', `drydock/${sessionId}`], fixture.bare).trim()).toBe(final.pushed!.commit);
  });

  test('an unknown repo → 422, an invalid input → 422 naming the field, bad JSON → 400; nothing starts', async () => {
    expect(await api('/api/sessions', ALICE, { method: 'POST', body: { repo: 'someone/else', task: 'x' } })).toEqual({
      status: 422,
      body: {
        error:
          'repo someone/else is not served by this drydock (register it: drydock repo add <url> --name owner/name)',
      },
    });
    expect(
      await api('/api/sessions', ALICE, { method: 'POST', body: { repo: { url: '/etc' }, task: 'x' } }),
    ).toMatchObject({ status: 422 });
    const invalid = await api('/api/sessions', ALICE, { method: 'POST', body: { repo: 'acme/fixture' } });
    expect(invalid).toEqual({
      status: 422,
      body: { error: 'invalid session input: task: Invalid input: expected string, received undefined' },
    });
    expect(await api('/api/sessions', ALICE, { method: 'POST', body: '{"repo":' })).toMatchObject({ status: 400 });
    expect((await api('/api/sessions/no-such-session', ALICE)).status).toBe(404);
  });
});
