/// <reference lib="dom" />
/**
 * VS Code in the browser end to end (real Temporal, Docker, git, PostgreSQL,
 * code-server from the npm registry mounted read-only in the sandbox, and a
 * headless Chromium): an approver opens the editor from the session page at
 * the approval gate (the agent waits: the session is attached to her),
 * opens README.md in VS Code's own UI (its Explorer), types a line, saves,
 * detaches, and the line is in the session's new change, verified and
 * waiting at the gate again; the editor's start and stop are audited under
 * her name and no code-server process is left in the sandbox. A reader gets
 * 403 for the page and its socket, a browser without a pass 401 on the
 * editor origin, a pass of one session nothing on another's origin.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Pool } from 'pg';
import type { Browser, Page } from 'playwright-core';
import WebSocket from 'ws';
import { Redactor } from '../../platform/scrub';
import { AuditTrail } from '../../store/audit';
import { editorOrigin } from '../../sandbox/editor';
import { personalTokens } from '../support/identity';
import {
  endSessions,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  testAuditKey,
  startServe,
  startSession,
  startStack,
  waitForStatus,
  type TestStack,
} from '../support/helpers';
import { launchChromium, signedIn as signedInAs } from '../support/console-browser';

const run = promisify(execFile);
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
let tokens: Record<'alice' | 'dave', string>;
let repoUrl: string;
let pool: Pool;
const toEnd: string[] = [];

beforeAll(async () => {
  // The editor this test mounts: built once per host (cached in .tools/code-server).
  await run('bash', [path.join(__dirname, '../../infra/code-server.sh')], { timeout: 20 * 60_000 });
  tokens = await personalTokens('alice', 'dave');
  const identities = path.join(await mkdtemp(path.join(tmpdir(), 'drydock-editor-')), 'identities.yaml');
  await writeFile(identities, IDENTITIES);
  stack = await startStack();
  repoUrl = (await makeFixtureRepo()).url;
  serve = await startServe(stack, { DRYDOCK_IDENTITIES_FILE: identities, DRYDOCK_REPOS: [`${REPO}=${repoUrl}`] });
  pool = new Pool({ connectionString: process.env.DATABASE_URL });
  browser = await launchChromium();
}, 1_500_000);
afterAll(async () => {
  await endSessions(stack.client, toEnd);
  await browser?.close();
  await pool?.end();
  await serve?.close();
  await stack?.stop();
});

const signedIn = (token: string): Promise<Page> => signedInAs(browser, serve.url, token);

/** A request to serve as if sent to `origin` (its Host), from Node: its status. */
function statusAs(origin: string, pathname: string, headers: Record<string, string> = {}) {
  return new Promise<number>((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: new URL(serve.url).port,
        path: pathname,
        headers: { ...headers, host: new URL(origin).host },
      },
      (res) => (res.resume(), resolve(res.statusCode ?? 0)),
    );
    req.on('error', reject).end();
  });
}

/** A socket's refusal status (it must not open). */
function socketAnswer(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, { headers });
    socket.on('unexpected-response', (req, res) => (res.resume(), req.destroy(), resolve(res.statusCode ?? 0)));
    socket.on('open', () => (socket.terminate(), reject(new Error('the socket opened'))));
    socket.on('error', () => undefined);
  });
}

/** The command lines of the sandbox's processes that are the editor's. */
async function editorProcesses(sandbox: string): Promise<string[]> {
  const { stdout } = await run('docker', [
    'exec',
    sandbox,
    'sh',
    '-c',
    'for p in /proc/[0-9]*; do [ "${p#/proc/}" = "$$" ] || tr "\\0" " " <$p/cmdline 2>/dev/null; echo; done',
  ]);
  return stdout.split('\n').filter((l) => l.includes('/opt/drydock-editor/'));
}

test('an approver edits README.md in VS Code from the console; the line is in the new change, verified and awaiting review', async () => {
  const id = newSessionId('editor');
  toEnd.push(id);
  const handle = await startSession(stack, id, {
    repo: { url: repoUrl },
    task: 'greet in the README',
    requestedBy: 'alice',
    agent: { steps: [{ run: 'echo hello >> README.md' }] },
    verify: { test: 'sh check.sh' },
    approval: { required: ['push'], approvers: ['alice'] },
  });
  const first = await waitForStatus(handle, inPhase('awaiting_approval'), 180_000);
  const sandbox = first.sandbox!.name;
  const origin = editorOrigin(`http://preview.localhost:${new URL(serve.url).port}`, id);

  // A reader may read the session but gets no editor: not the page, not its socket with a ticket of alice's.
  const dave = await signedIn(tokens.dave);
  const refused = await dave.goto(`${serve.url}/sessions/${id}/editor`);
  expect(refused!.status()).toBe(403);
  expect(await refused!.json()).toEqual({ error: expect.stringMatching(/^dave may not .*approver role/) });
  const aliceCookie = `drydock_token=${encodeURIComponent(tokens.alice)}`;
  const html = await (await fetch(`${serve.url}/sessions/${id}/editor`, { headers: { cookie: aliceCookie } })).text();
  const ticket = /data-ticket="([^"]+)"/.exec(html)![1];
  const socketUrl = `${serve.url.replace('http:', 'ws:')}/sessions/${id}/editor/socket?ticket=${encodeURIComponent(ticket)}`;
  expect(
    await socketAnswer(socketUrl, { cookie: `drydock_token=${encodeURIComponent(tokens.dave)}`, origin: serve.url }),
  ).toBe(403);
  expect(await socketAnswer(socketUrl, { cookie: aliceCookie, origin: 'http://evil.example' })).toBe(403);
  // The editor origin without a pass: nothing of the editor.
  expect(await statusAs(origin, '/')).toBe(401);

  // Alice opens it from the session page: the agent waits (the session is attached to her).
  const alice = await signedIn(tokens.alice);
  await alice.goto(`${serve.url}/sessions/${id}`);
  const clicked = Date.now();
  await alice.click('#open-editor');
  await alice.locator('#editor-state', { hasText: 'ready: attached as alice' }).waitFor({ timeout: 240_000 });
  const startedMs = Date.now() - clicked;
  await alice.locator('#presence', { hasText: /^alice \(in VS Code\)$/ }).waitFor({ timeout: 30_000 });
  expect((await waitForStatus(handle, inPhase('attached'), 10_000)).attached).toMatchObject({ by: 'alice' });
  const href = await alice.locator('#open-editor-window').getAttribute('href');
  expect(href!.startsWith(`${origin}/.drydock/enter?pass=`)).toBe(true);
  // Her pass on another session's editor origin is refused.
  const elsewhere = editorOrigin(`http://preview.localhost:${new URL(serve.url).port}`, `${id}-other`);
  expect(await statusAs(elsewhere, new URL(href!).pathname + new URL(href!).search)).toBe(403);

  const [code] = await Promise.all([alice.context().waitForEvent('page'), alice.click('#open-editor-window')]);
  await code.locator('.monaco-workbench').waitFor({ timeout: 180_000 });
  // VS Code's own UI: the file clicked in its Explorer, a line typed at its end, saved with its shortcut.
  const file = code.locator('.explorer-folders-view .monaco-list-row', { hasText: 'README.md' });
  await file.waitFor({ timeout: 120_000 });
  await file.click();
  await code.locator('.monaco-editor .view-lines', { hasText: '# fixture' }).waitFor({ timeout: 60_000 });
  const loadedMs = Date.now() - clicked;
  await code.locator('.monaco-editor .view-lines').click();
  await code.keyboard.press('Control+End');
  await code.keyboard.type('edited in VS Code\n');
  await code.keyboard.press('Control+S');
  // The whole line, its newline too: VS Code in a browser also saves by itself a second after typing
  // stops, so a slow machine can see a save of the line without its Enter before Ctrl+S's.
  const edited = '# fixture\nhello\nedited in VS Code\n';
  for (const until = Date.now() + 30_000; ;) {
    const { stdout } = await run('docker', ['exec', sandbox, 'cat', '/workspace/README.md']);
    if (stdout === edited) break;
    if (Date.now() > until) throw new Error(`the save never reached the sandbox:\n${stdout}`);
    await new Promise((r) => setTimeout(r, 300));
  }
  expect((await editorProcesses(sandbox)).length).toBeGreaterThan(0);

  await alice.click('#detach');
  await alice.locator('#editor-state', { hasText: /detached after \d+ s/ }).waitFor({ timeout: 60_000 });
  const detachedAt = Date.now();
  const second = await waitForStatus(
    handle,
    (s) => s.pendingApproval !== undefined && s.pendingApproval.change !== first.pendingApproval!.change,
    180_000,
  );
  console.log(
    `console editor: click → editor started ${startedMs} ms; click → README open in VS Code ${loadedMs} ms; ` +
      `detach → new change awaiting review ${Date.now() - detachedAt} ms`,
  );
  expect(second.pendingApproval!.evidence.diffstat).toMatch(/README\.md/);
  expect(second.rounds?.map((r) => [r.round, r.by])).toEqual([
    [1, 'alice'],
    [2, 'alice'],
  ]);
  const { stdout: readme } = await run('docker', ['exec', sandbox, 'cat', '/workspace/README.md']);
  expect(readme).toBe(edited);

  // Stopped with the detach: no process of the editor left, its origin answers nothing for her.
  expect(await editorProcesses(sandbox)).toEqual([]);
  const after = await code.goto(`${origin}/`);
  expect(after!.status()).toBe(409);

  const events = await new AuditTrail(pool, 'test-host', new Redactor(), testAuditKey()).events(id);
  const editorRows = events.filter((e) => e.kind === 'editor');
  expect(editorRows.map((e) => [e.actor, e.data.event])).toEqual([
    ['alice', 'opened'],
    ['alice', 'closed'],
  ]);
  expect(editorRows[0].data).toMatchObject({ via: 'console editor', sandbox, started: true });
  expect(editorRows[1].data).toMatchObject({ end: 'detach', stopped: true });
  expect(events.filter((e) => e.kind === 'attach')).toEqual([
    expect.objectContaining({ actor: 'alice', data: expect.objectContaining({ detachedBy: 'alice' }) }),
  ]);
  await dave.close();
  await alice.close();
}, 900_000);

test('an editor nobody uses stops after DRYDOCK_EDITOR_IDLE: the session is detached, no process of it left', async () => {
  const idleServe = await startServe(stack, {
    DRYDOCK_IDENTITIES_FILE: serve.config.DRYDOCK_IDENTITIES_FILE,
    DRYDOCK_REPOS: [`${REPO}=${repoUrl}`],
    DRYDOCK_EDITOR_IDLE: 8_000,
  });
  try {
    const id = newSessionId('editor-idle');
    toEnd.push(id);
    const handle = await startSession(stack, id, {
      repo: { url: repoUrl },
      task: 'greet in the README',
      requestedBy: 'alice',
      agent: { steps: [{ run: 'echo hello >> README.md' }] },
      verify: { test: 'sh check.sh' },
      approval: { required: ['push'], approvers: ['alice'] },
    });
    const gate = await waitForStatus(handle, inPhase('awaiting_approval'), 180_000);
    const page = await (await browser.newContext()).newPage();
    await page.goto(idleServe.url);
    await page.fill('input[name=token]', tokens.alice);
    await page.click('button[type=submit]');
    await page.goto(`${idleServe.url}/sessions/${id}/editor`);
    await page.locator('#editor-state', { hasText: 'ready: attached as alice' }).waitFor({ timeout: 240_000 });
    expect((await editorProcesses(gate.sandbox!.name)).length).toBeGreaterThan(0);
    // Nothing more of hers: the editor closes itself, and the agent is not kept waiting.
    await page.locator('#editor-state', { hasText: 'nothing reached the editor for 8 s' }).waitFor({ timeout: 60_000 });
    await waitForStatus(handle, (s) => s.attached === undefined, 60_000);
    expect(await editorProcesses(gate.sandbox!.name)).toEqual([]);
    const events = await new AuditTrail(pool, 'test-host', new Redactor(), testAuditKey()).events(id);
    expect(
      events.filter((e) => e.kind === 'editor').map((e) => [e.actor, e.data.event, e.data.end, e.data.stopped]),
    ).toEqual([
      ['alice', 'opened', undefined, undefined],
      ['alice', 'closed', 'nothing reached the editor for 8 s', true],
    ]);
    await page.close();
  } finally {
    await idleServe.close();
  }
}, 600_000);
