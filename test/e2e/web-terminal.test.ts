/// <reference lib="dom" />
/**
 * The console's terminal end to end (real Temporal, Docker, git, PostgreSQL
 * and a headless Chromium): an approver opens the terminal from the session
 * page at the approval gate, types a command that writes a file, sees its
 * output, detaches with the button, and the file is in the session's new
 * change awaiting review; every keystroke batch, after the detach, is in the audit trail under
 * their name. A reader without the approver role gets no terminal page, and
 * a socket from another site's page is refused even with a valid ticket.
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { Pool } from 'pg';
import WebSocket from 'ws';
import { AuditTrail } from '../../store/audit';
import { Redactor } from '../../platform/scrub';
import { personalTokens } from '../support/identity';
import {
  endSessions,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  startServe,
  startSession,
  startStack,
  testAuditKey,
  waitForStatus,
  type TestStack,
} from '../support/helpers';
import { launchChromium, signedIn as signedInAs } from '../support/console-browser';

const REPO = 'acme/fixture';
const IDENTITIES = `people:
  alice: {}
  dave: {}
roles:
  ${REPO}:
    approver: alice
    reader: dave
`;

let stack: TestStack;
let serve: Awaited<ReturnType<typeof startServe>>;
let browser: Browser;
let pool: Pool;
let repo: { url: string; bare: string };
let tokens: Record<'alice' | 'dave', string>;
const toEnd: string[] = [];

beforeAll(async () => {
  repo = await makeFixtureRepo();
  tokens = await personalTokens('alice', 'dave');
  const identities = path.join(await mkdtemp(path.join(tmpdir(), 'drydock-webterm-')), 'identities.yaml');
  await writeFile(identities, IDENTITIES);
  stack = await startStack();
  serve = await startServe(stack, { DRYDOCK_IDENTITIES_FILE: identities, DRYDOCK_REPOS: [`${REPO}=${repo.url}`] });
  pool = new Pool({ connectionString: process.env.DATABASE_URL });
  browser = await launchChromium();
});
afterAll(async () => {
  await endSessions(stack.client, toEnd);
  await browser?.close();
  await pool?.end();
  await serve?.close();
  await stack?.stop();
});

const signedIn = (token: string): Promise<Page> => signedInAs(browser, serve.url, token);

/** What xterm shows (its DOM renderer's rows), spaces as spaces. */
const screenOf = (page: Page) =>
  page
    .locator('.xterm-rows')
    .innerText()
    .then((text) => text.replace(/\u00a0/g, ' '));

async function waitForScreen(page: Page, pattern: RegExp, timeoutMs = 60_000): Promise<void> {
  for (const until = Date.now() + timeoutMs; !pattern.test(await screenOf(page));) {
    if (Date.now() > until) throw new Error(`never saw ${pattern} in the terminal:\n${await screenOf(page)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function auditOf(sessionId: string) {
  return new AuditTrail(pool, 'test-host', new Redactor(), testAuditKey()).events(sessionId);
}

/** A socket opened by Node as another site's page would: alice's cookie, a valid ticket, a foreign Origin. */
function socketAnswer(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, { headers });
    // With this listener, ending the refused request is the caller's (ws leaves it open).
    socket.on('unexpected-response', (req, res) => {
      res.resume();
      req.destroy();
      resolve(res.statusCode ?? 0);
    });
    socket.on('open', () => {
      socket.terminate();
      reject(new Error('the socket opened'));
    });
    socket.on('error', () => undefined);
  });
}

test('an approver types in the console terminal; the file is in the new change to review, every key audited', async () => {
  const id = newSessionId('webterm');
  toEnd.push(id);
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'greet in the README',
    requestedBy: 'alice',
    agent: { steps: [{ run: 'echo hello >> README.md' }] },
    verify: { test: 'sh check.sh' },
    approval: { required: ['push'], approvers: ['alice'] },
  });
  const first = await waitForStatus(handle, inPhase('awaiting_approval'), 120_000);

  // A reader may look at the session but gets no terminal.
  const dave = await signedIn(tokens.dave);
  const refused = await dave.goto(`${serve.url}/sessions/${id}/terminal`);
  expect(refused!.status()).toBe(403);
  expect(await refused!.json()).toEqual({
    error: expect.stringMatching(/^dave may not .*that needs the approver role \(dave is a reader\)/),
  });

  // Another site's page cannot open the socket, even holding a ticket of alice's page.
  const cookie = `drydock_token=${encodeURIComponent(tokens.alice)}`;
  const html = await (await fetch(`${serve.url}/sessions/${id}/terminal`, { headers: { cookie } })).text();
  const ticket = /data-ticket="([^"]+)"/.exec(html)![1];
  const socketUrl = `${serve.url.replace('http:', 'ws:')}/sessions/${id}/terminal/socket?ticket=${ticket}`;
  expect(await socketAnswer(socketUrl, { cookie, origin: 'http://evil.example' })).toBe(403);
  // A ticket of this session does not open another's socket.
  const otherUrl = socketUrl.replace(`/sessions/${id}/`, `/sessions/${id}-other/`);
  expect(await socketAnswer(otherUrl, { cookie, origin: serve.url })).toBe(403);
  expect(
    await socketAnswer(socketUrl, { cookie: `drydock_token=${encodeURIComponent(tokens.dave)}`, origin: serve.url }),
  ).toBe(403);

  const alice = await signedIn(tokens.alice);
  await alice.goto(`${serve.url}/sessions/${id}`);
  const clicked = Date.now();
  await alice.click('#open-terminal');
  await alice.locator('#terminal-state', { hasText: 'attached as alice' }).waitFor({ timeout: 60_000 });
  await waitForScreen(alice, /\/workspace\$ /);
  const interactiveMs = Date.now() - clicked;
  await alice.keyboard.type('echo from-the-$((40+2))-browser > web.txt; cat web.txt');
  await alice.keyboard.press('Enter');
  await waitForScreen(alice, /from-the-42-browser/);
  await alice.click('#detach');
  await alice.locator('#terminal-state', { hasText: /detached after \d+ s/ }).waitFor({ timeout: 30_000 });
  const detachedAt = Date.now();

  const second = await waitForStatus(
    handle,
    (s) => s.pendingApproval !== undefined && s.pendingApproval.change !== first.pendingApproval!.change,
    120_000,
  );
  // Measured, not asserted: the click to a prompt, and the detach to the edit awaiting review.
  console.log(
    `console terminal: click → prompt ${interactiveMs} ms; detach → new change awaiting review ${Date.now() - detachedAt} ms`,
  );
  expect(second.pendingApproval!.evidence.diffstat).toMatch(/web\.txt/);
  expect(second.rounds?.map((r) => [r.round, r.by, r.request])).toEqual([
    [1, 'alice', 'greet in the README'],
    [2, 'alice', 'edited by hand in the sandbox (drydock attach)'],
  ]);

  const events = await auditOf(id);
  const typed = events.filter((e) => e.kind === 'attach.input');
  expect(typed.length).toBeGreaterThan(0);
  expect(typed.every((e) => e.actor === 'alice' && e.data.via === 'console terminal')).toBe(true);
  expect(typed.map((e) => e.data.input).join('')).toContain('echo from-the-$((40+2))-browser > web.txt; cat web.txt\r');
  expect(events.filter((e) => e.kind === 'attach')).toEqual([
    expect.objectContaining({ actor: 'alice', data: expect.objectContaining({ detachedBy: 'alice' }) }),
  ]);
  await dave.close();
  await alice.close();
});

test('two tabs of the terminal: closing one leaves the session attached to the other; its Detach ends both (M2)', async () => {
  const id = newSessionId('webterm-tabs');
  toEnd.push(id);
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'greet in the README',
    requestedBy: 'alice',
    agent: { steps: [{ run: 'echo hello >> README.md' }] },
    verify: { test: 'sh check.sh' },
    approval: { required: ['push'], approvers: ['alice'] },
  });
  await waitForStatus(handle, inPhase('awaiting_approval'), 120_000);
  const [first, second] = [await signedIn(tokens.alice), await signedIn(tokens.alice)];
  for (const tab of [first, second]) {
    await tab.goto(`${serve.url}/sessions/${id}/terminal`);
    await tab.locator('#terminal-state', { hasText: 'attached as alice' }).waitFor({ timeout: 60_000 });
    await waitForScreen(tab, /\/workspace\$ /);
  }
  await first.close(); // its socket's close used to detach the session under the second tab's shell
  await second.keyboard.type('echo still-$((6*7))-here');
  await second.keyboard.press('Enter');
  await waitForScreen(second, /still-42-here/);
  const during = await waitForStatus(handle, () => true, 10_000);
  expect(during.attached).toMatchObject({ by: 'alice' });
  expect(during.phase).toBe('attached');

  // A third tab, then Detach in the second: the third's socket is closed with the reason, the session detached once.
  const third = await signedIn(tokens.alice);
  await third.goto(`${serve.url}/sessions/${id}/terminal`);
  await third.locator('#terminal-state', { hasText: 'attached as alice' }).waitFor({ timeout: 60_000 });
  await second.click('#detach');
  await second.locator('#terminal-state', { hasText: /detached after \d+ s/ }).waitFor({ timeout: 30_000 });
  await third
    .locator('#terminal-state', { hasText: 'detached from another terminal of this session' })
    .waitFor({ timeout: 30_000 });
  expect((await waitForStatus(handle, (s) => s.attached === undefined, 30_000)).attached).toBeUndefined();
  const attaches = (await auditOf(id)).filter((e) => e.kind === 'attach');
  expect(attaches).toEqual([expect.objectContaining({ actor: 'alice' })]);
  await second.close();
  await third.close();
});
