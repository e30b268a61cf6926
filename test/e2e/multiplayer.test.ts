/// <reference lib="dom" />
/**
 * Several people in one session, end to end (real Temporal, Docker, git,
 * PostgreSQL and headless Chromium): two approvers open the console
 * terminal of one session at its gate and share its shell: each sees the
 * other's presence and commands, each one's keys are in the audit trail
 * under their own name; a reader watches (sees both and the output) and
 * cannot type; when the first leaves, the attach is handed to the other; the
 * session is detached once, when the last of them leaves,
 * and both edits are in the new change to review. Then one in VS Code and
 * one in the terminal: each page lists both (and the desktop's viewer), and a
 * reader watching who is in VS Code (no editor of her own) sees them too.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
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
  bob: {}
  dave: {}
roles:
  ${REPO}:
    approver: [alice, bob]
    reader: dave
`;

let stack: TestStack;
let serve: Awaited<ReturnType<typeof startServe>>;
let browser: Browser;
let pool: Pool;
let repo: { url: string };
let tokens: Record<'alice' | 'bob' | 'dave', string>;
const toEnd: string[] = [];

beforeAll(async () => {
  // The editor the second test mounts: built once per host (cached in .tools/code-server).
  await promisify(execFile)('bash', [path.join(__dirname, '../../infra/code-server.sh')], { timeout: 20 * 60_000 });
  repo = await makeFixtureRepo();
  tokens = await personalTokens('alice', 'bob', 'dave');
  const identities = path.join(await mkdtemp(path.join(tmpdir(), 'drydock-multi-')), 'identities.yaml');
  await writeFile(identities, IDENTITIES);
  stack = await startStack();
  serve = await startServe(stack, { DRYDOCK_IDENTITIES_FILE: identities, DRYDOCK_REPOS: [`${REPO}=${repo.url}`] });
  pool = new Pool({ connectionString: process.env.DATABASE_URL });
  browser = await launchChromium();
}, 600_000);
afterAll(async () => {
  await endSessions(stack.client, toEnd);
  await browser?.close();
  await pool?.end();
  await serve?.close();
  await stack?.stop();
});

const signedIn = (token: string): Promise<Page> => signedInAs(browser, serve.url, token);

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

const presenceOf = (page: Page, text: string | RegExp) =>
  page.locator('#presence', { hasText: text }).waitFor({ timeout: 30_000 });

/** A session by alice with alice and bob as approvers, waiting at its gate. */
async function sessionAtGate(prefix: string) {
  const id = newSessionId(prefix);
  toEnd.push(id);
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'greet in the README',
    requestedBy: 'alice',
    agent: { steps: [{ run: 'echo hello >> README.md' }] },
    verify: { test: 'sh check.sh' },
    approval: { required: ['push'], approvers: ['alice', 'bob'] },
  });
  return { id, handle, first: await waitForStatus(handle, inPhase('awaiting_approval'), 180_000) };
}

test('two approvers share the terminal, each audited under their name; a reader watches and cannot type', async () => {
  const { id, handle, first } = await sessionAtGate('multi');

  const alice = await signedIn(tokens.alice);
  await alice.goto(`${serve.url}/sessions/${id}/terminal`);
  await alice.locator('#terminal-state', { hasText: 'attached as alice' }).waitFor({ timeout: 60_000 });
  await waitForScreen(alice, /\/workspace\$ /);
  const bob = await signedIn(tokens.bob);
  await bob.goto(`${serve.url}/sessions/${id}/terminal`);
  await bob.locator('#terminal-state', { hasText: 'attached as bob' }).waitFor({ timeout: 60_000 });
  // Each sees the other.
  await presenceOf(alice, 'alice (typing), bob (typing)');
  await presenceOf(bob, 'alice (typing), bob (typing)');

  // A reader may not type in it, but may watch.
  const dave = await signedIn(tokens.dave);
  expect((await dave.goto(`${serve.url}/sessions/${id}/terminal`))!.status()).toBe(403);
  await dave.goto(`${serve.url}/sessions/${id}/terminal?watch=1`);
  await dave.locator('#terminal-state', { hasText: 'watching' }).waitFor({ timeout: 30_000 });
  await presenceOf(alice, 'alice (typing), bob (typing), dave (watching)');
  await presenceOf(dave, 'alice (typing), bob (typing), dave (watching)');

  await alice.keyboard.type('echo from-$((1+1))-alice > alice.txt; cat alice.txt');
  await alice.keyboard.press('Enter');
  await waitForScreen(bob, /from-2-alice/);
  await bob.keyboard.type('echo from-$((2+2))-bob > bob.txt; cat bob.txt');
  await bob.keyboard.press('Enter');
  await waitForScreen(alice, /from-4-bob/);
  await waitForScreen(dave, /from-4-bob/);
  // The watcher's keys reach nothing: xterm takes no input, and the server drops any it is sent.
  await dave.locator('.xterm').click();
  await dave.keyboard.type('echo dave-typed > dave.txt');
  await dave.keyboard.press('Enter');
  // Nor does what a watcher's socket sends by hand reach the shell.
  const cookie = `drydock_token=${encodeURIComponent(tokens.dave)}`;
  const page = await (await fetch(`${serve.url}/sessions/${id}/terminal?watch=1`, { headers: { cookie } })).text();
  const ticket = /data-ticket="([^"]+)"/.exec(page)![1];
  const raw = new WebSocket(
    `${serve.url.replace('http:', 'ws:')}/sessions/${id}/terminal/socket?ticket=${ticket}&watch=1&cols=80&rows=24`,
    { headers: { cookie, origin: serve.url } },
  );
  await new Promise<void>((resolve, reject) => {
    raw.on('message', (data: Buffer, binary: boolean) => {
      if (!binary && (JSON.parse(data.toString()) as { type: string }).type === 'watching') resolve();
    });
    raw.on('error', reject);
  });
  raw.send(Buffer.from('echo dave-raw > raw.txt\r'), { binary: true });
  raw.send(JSON.stringify({ type: 'resize', cols: 5, rows: 5 }));
  await new Promise((r) => setTimeout(r, 1000));
  raw.close();
  await alice.keyboard.type('ls *.txt');
  await alice.keyboard.press('Enter');
  await waitForScreen(alice, /alice\.txt\s+bob\.txt/);
  expect(await screenOf(alice)).not.toMatch(/dave/);
  // The watcher's resize did not reach the TTY either.
  await alice.keyboard.type('stty size');
  await alice.keyboard.press('Enter');
  await waitForScreen(alice, /stty size\s+\d+ \d+/);
  expect(await screenOf(alice)).not.toMatch(/stty size\s+5 5/);

  // Alice detaches: the session stays attached for Bob; Dave still watches.
  await alice.click('#detach');
  await presenceOf(bob, /^bob \(typing\), dave \(watching\)$/);
  // The attach is handed to Bob, who is still in (attached.by names him, not Alice who left).
  const handed = await waitForStatus(handle, (s) => s.attached?.by === 'bob', 30_000);
  expect(handed.phase).toBe('attached');
  await bob.click('#detach');
  await bob.locator('#terminal-state', { hasText: /detached after \d+ s/ }).waitFor({ timeout: 30_000 });
  await dave.locator('#terminal-state', { hasText: 'nobody is in the sandbox any more' }).waitFor({ timeout: 30_000 });

  const second = await waitForStatus(
    handle,
    (s) => s.pendingApproval !== undefined && s.pendingApproval.change !== first.pendingApproval!.change,
    120_000,
  );
  expect(second.pendingApproval!.evidence.diffstat).toMatch(/alice\.txt/);
  expect(second.pendingApproval!.evidence.diffstat).toMatch(/bob\.txt/);
  expect(second.pendingApproval!.evidence.diffstat).not.toMatch(/dave\.txt|raw\.txt/);

  const events = await new AuditTrail(pool, 'test-host', new Redactor(), testAuditKey()).events(id);
  const typed = events.filter((e) => e.kind === 'attach.input');
  const by = (who: string) =>
    typed
      .filter((e) => e.actor === who)
      .map((e) => e.data.input)
      .join('');
  expect(by('alice')).toContain('echo from-$((1+1))-alice > alice.txt; cat alice.txt\r');
  expect(by('bob')).toContain('echo from-$((2+2))-bob > bob.txt; cat bob.txt\r');
  expect(by('alice')).not.toContain('bob.txt; cat');
  expect(typed.filter((e) => e.actor === 'dave')).toEqual([]);
  expect(new Set(typed.map((e) => e.actor))).toEqual(new Set(['alice', 'bob']));
  // One attach from Alice's arrival to Bob's detach, in two parts: Alice's (handed to Bob), then Bob's.
  expect(events.filter((e) => e.kind === 'attach')).toEqual([
    expect.objectContaining({
      actor: 'alice',
      data: expect.objectContaining({ detachedBy: 'alice', handedTo: 'bob' }),
    }),
    expect.objectContaining({ actor: 'bob', data: expect.objectContaining({ detachedBy: 'bob' }) }),
  ]);
}, 600_000);

test('one in VS Code, one in the terminal: each sees the other; a reader watches who is in VS Code and gets no editor', async () => {
  const { id, handle, first } = await sessionAtGate('multi-editor');

  // Nobody in VS Code yet: nothing to watch.
  const dave = await signedIn(tokens.dave);
  expect((await dave.goto(`${serve.url}/sessions/${id}/editor`))!.status()).toBe(403);
  await dave.goto(`${serve.url}/sessions/${id}/editor?watch=1`);
  await dave.locator('#editor-state', { hasText: "refused: nobody is in the session's VS Code now" }).waitFor();

  const alice = await signedIn(tokens.alice);
  await alice.goto(`${serve.url}/sessions/${id}/editor`);
  await alice.locator('#editor-state', { hasText: 'ready: attached as alice' }).waitFor({ timeout: 240_000 });
  await presenceOf(alice, /^alice \(in VS Code\)$/);
  const bob = await signedIn(tokens.bob);
  await bob.goto(`${serve.url}/sessions/${id}/terminal`);
  await bob.locator('#terminal-state', { hasText: 'attached as bob' }).waitFor({ timeout: 60_000 });
  await presenceOf(bob, /^alice \(in VS Code\), bob \(typing\)$/);
  await presenceOf(alice, /^alice \(in VS Code\), bob \(typing\)$/);

  // The reader watches who is in VS Code: listed to all, given no way into the editor.
  await dave.goto(`${serve.url}/sessions/${id}/editor?watch=1`);
  await dave.locator('#editor-state', { hasText: 'watching' }).waitFor({ timeout: 30_000 });
  const all = /^alice \(in VS Code\), bob \(typing\), dave \(watching\)$/;
  await Promise.all([presenceOf(alice, all), presenceOf(bob, all), presenceOf(dave, all)]);
  expect(await dave.locator('#open-editor-window').isHidden()).toBe(true);
  // Nor does a watcher's socket, opened by hand, carry a pass to the editor's origin, whatever it sends.
  const cookie = `drydock_token=${encodeURIComponent(tokens.dave)}`;
  const page = await (await fetch(`${serve.url}/sessions/${id}/editor?watch=1`, { headers: { cookie } })).text();
  const ticket = /data-ticket="([^"]+)"/.exec(page)![1];
  const heard: string[] = [];
  const raw = new WebSocket(
    `${serve.url.replace('http:', 'ws:')}/sessions/${id}/editor/socket?ticket=${encodeURIComponent(ticket)}&watch=1`,
    { headers: { cookie, origin: serve.url } },
  );
  const closed = new Promise<number>((resolve) => raw.on('close', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    raw.on('message', (data: Buffer) => {
      heard.push(data.toString());
      if ((JSON.parse(data.toString()) as { type: string }).type === 'watching') resolve();
    });
    raw.on('error', reject);
  });
  raw.send(JSON.stringify({ type: 'resize', cols: 5, rows: 5 }));
  expect(await closed).toBe(1008);
  expect(heard.join('\n')).not.toMatch(/href|pass=|ready/);
  await presenceOf(alice, all); // his hand-made socket came and went; his page is still there
  // Alice on the desktop as well: the others' pages list her there too while she looks at it.
  const desk = await signedIn(tokens.alice);
  await desk.goto(`${serve.url}/sessions/${id}/desktop`);
  await desk.locator('#desktop-state', { hasText: /^connected/ }).waitFor({ timeout: 120_000 });
  const withDesktop = /^alice \(in VS Code\), bob \(typing\), dave \(watching\), alice \(on the desktop\)$/;
  await Promise.all([presenceOf(bob, withDesktop), presenceOf(dave, withDesktop)]);
  await desk.close();
  await presenceOf(bob, all);

  // Alice leaves VS Code: the editor stops, the watcher hears so, and the attach is Bob's.
  await alice.click('#detach');
  await presenceOf(bob, /^bob \(typing\)$/);
  await dave
    .locator('#editor-state', { hasText: "nobody is in the session's VS Code any more" })
    .waitFor({ timeout: 30_000 });
  expect((await waitForStatus(handle, (s) => s.attached?.by === 'bob', 30_000)).phase).toBe('attached');
  await bob.keyboard.type('echo from-bob > bob.txt');
  await bob.keyboard.press('Enter');
  await bob.click('#detach');
  await bob.locator('#terminal-state', { hasText: /detached after \d+ s/ }).waitFor({ timeout: 60_000 });
  const second = await waitForStatus(
    handle,
    (s) => s.pendingApproval !== undefined && s.pendingApproval.change !== first.pendingApproval!.change,
    120_000,
  );
  expect(second.pendingApproval!.evidence.diffstat).toMatch(/bob\.txt/);

  const events = await new AuditTrail(pool, 'test-host', new Redactor(), testAuditKey()).events(id);
  expect(events.filter((e) => e.kind === 'editor').map((e) => [e.actor, e.data.event])).toEqual([
    ['alice', 'opened'],
    ['alice', 'closed'],
  ]);
  expect(events.filter((e) => e.kind === 'attach').map((e) => [e.actor, e.data.handedTo])).toEqual([
    ['alice', 'bob'],
    ['bob', undefined],
  ]);
  await Promise.all([alice.close(), bob.close(), dave.close()]);
}, 900_000);
