/**
 * Verification in the sandbox: the repo's tests with their JUnit report, and
 * a real Chromium driving the app started inside the sandbox (no network).
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { inflateSync } from 'node:zlib';
import { status, type BrowserResult, type SessionStatus } from '../../workflows/api';
import {
  containersOf,
  makeFixtureRepo,
  makeWebAppRepo,
  newSessionId,
  startSession,
  startStack,
  type TestStack,
} from '../support/helpers';

let stack: TestStack;
let repo: { url: string };

beforeAll(async () => {
  stack = await startStack({ DRYDOCK_APPROVAL_REQUIRED: [] });
  repo = await makeWebAppRepo();
});
afterAll(() => stack?.stop());

const artifact = (ref: string) => readFile(path.join(stack.config.DRYDOCK_DATA_DIR, 'artifacts', ref));

/** Width and height from a PNG's IHDR chunk, after checking its signature. */
function pngSize(png: Buffer): { width: number; height: number } {
  expect(png.subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
  expect(png.subarray(12, 16).toString()).toBe('IHDR');
  return { width: png.readUInt32BE(16), height: png.readUInt32BE(20) };
}

/** The RGB of pixel (x, y) of an 8-bit RGB or RGBA PNG: inflate the IDAT chunks, undo the row filters. */
function pixel(png: Buffer, x: number, y: number): [number, number, number] {
  const { width } = pngSize(png);
  const channels = png[25] === 6 ? 4 : 3;
  const idat: Buffer[] = [];
  for (let at = 8; at < png.length;) {
    const length = png.readUInt32BE(at);
    if (png.subarray(at + 4, at + 8).toString() === 'IDAT') idat.push(png.subarray(at + 8, at + 8 + length));
    at += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  let previous = Buffer.alloc(stride);
  let row = previous;
  for (let r = 0; r <= y; r++) {
    const filter = raw[r * (stride + 1)];
    row = Buffer.from(raw.subarray(r * (stride + 1) + 1, (r + 1) * (stride + 1)));
    for (let i = 0; i < stride; i++) {
      const a = i >= channels ? row[i - channels] : 0;
      const b = previous[i];
      const c = i >= channels ? previous[i - channels] : 0;
      const p = a + b - c;
      const paeth =
        Math.abs(p - a) <= Math.abs(p - b) && Math.abs(p - a) <= Math.abs(p - c)
          ? a
          : Math.abs(p - b) <= Math.abs(p - c)
            ? b
            : c;
      row[i] = (row[i] + [0, a, b, (a + b) >> 1, paeth][filter]) & 0xff;
    }
    previous = row;
  }
  return [row[x * channels], row[x * channels + 1], row[x * channels + 2]];
}

async function runSession(name: string, verify: Record<string, unknown>, on = repo): Promise<SessionStatus> {
  const id = newSessionId(name);
  const handle = await startSession(stack, id, {
    repo: { url: on.url },
    task: 'check the app',
    agent: { steps: [{ run: 'echo "// touched" >> server.js' }] },
    verify,
  });
  await handle.result().catch(() => undefined);
  expect(await containersOf(id)).toHaveLength(0);
  return handle.query(status);
}

const browser = (extra: Record<string, unknown>) => ({
  start: 'node server.js',
  url: 'http://localhost:3000/',
  readyTimeout: '20s',
  ...extra,
});

test('a passing check: the session completes with screenshots that are PNGs of the right pages', async () => {
  const final = await runSession('browser-ok', {
    browser: browser({
      checks: [{ path: '/', expectText: 'Hello drydock', expectSelector: '#title' }],
      screenshots: ['/about', '/broken'],
    }),
  });
  expect(final.phase).toBe('completed');
  const b = final.verification!.browser as BrowserResult;
  expect(b.outcome).toBe('passed');
  expect(b.checks).toMatchObject([{ path: '/', ok: true }]);
  expect(final.verification).toMatchObject({ passed: true, summary: '' });

  const home = await artifact(b.checks[0].screenshot!);
  const about = await artifact(b.screenshots[0].screenshot!);
  expect(pngSize(home).width).toBe(1280);
  expect(pngSize(about).width).toBe(1280);
  // The about page has a large red block where the home page is white: each shows its own page.
  expect(pixel(about, 200, 200)).toEqual([204, 0, 0]);
  expect(pixel(home, 200, 200)).toEqual([255, 255, 255]);
  expect(b.consoleErrors).toContain('widget failed to load');
  expect(b.failedRequests).toContain('GET http://localhost:3000/missing.png: HTTP 404');
  expect(b.appLogTail).toContain('listening');
  expect(final.timeline.find((t) => t.name === 'browser: http://localhost:3000/')).toMatchObject({ ok: true });
});

test('a failing text check → verification failed, the check and its screenshot named in status', async () => {
  const final = await runSession('browser-fail', {
    browser: browser({ checks: [{ path: '/about', expectText: 'Goodbye' }] }),
  });
  expect(final.phase).toBe('failed');
  const check = final.verification!.browser!.checks[0];
  expect(check).toMatchObject({ path: '/about', ok: false, message: 'text "Goodbye" not found' });
  pngSize(await artifact(check.screenshot!));
  expect(final.verification!.summary).toBe(
    `check /about failed: text "Goodbye" not found (screenshot ${check.screenshot})`,
  );
  expect(final.error).toMatch(/^verification failed: check \/about failed/);
});

test("an app that exits at start → 'did not start' with its log tail", async () => {
  const final = await runSession('browser-exit', {
    browser: browser({ start: 'echo "Error: listen EADDRINUSE :3000" >&2; exit 1', checks: [{ expectText: 'x' }] }),
  });
  expect(final.phase).toBe('failed');
  expect(final.verification!.browser!.outcome).toBe('app_did_not_start');
  expect(final.verification!.browser!.appLogTail).toContain('EADDRINUSE');
  expect(final.verification!.summary).toMatch(/^the app did not start \('echo .*'\): Error: listen EADDRINUSE :3000$/);
});

test("a page that never answers → 'not ready' after the timeout", async () => {
  const final = await runSession('browser-notready', {
    browser: browser({ start: 'sleep 600', readyTimeout: '3s', checks: [{ expectText: 'x' }] }),
  });
  expect(final.phase).toBe('failed');
  expect(final.verification!.browser).toMatchObject({
    outcome: 'not_ready',
    message: 'http://localhost:3000/ did not answer within 3 s',
  });
  expect(final.verification!.summary).toBe(
    "the page never became ready: http://localhost:3000/ did not answer within 3 s; the app ('sleep 600') runs on, its log (/home/drydock/.drydock/app.log) is empty",
  );
});

/** A check that names only a page: the repo's `app:` is what it starts. */
const onlyAPage = { browser: { checks: [{ path: '/', expectText: 'Hello drydock' }] } };

test("a check naming only a page starts the repo's app: its start command, port and ready path", async () => {
  const appRepo = await makeWebAppRepo();
  await appRepo.commit({
    '.drydock/config.yaml':
      'app:\n  start: PORT=3100 node server.js\n  port: 3100\n  ready: { path: /about, timeout: 20s }\n',
  });
  const final = await runSession('browser-app', onlyAPage, appRepo);
  expect(final.phase).toBe('completed');
  const b = final.verification!.browser!;
  expect(b).toMatchObject({ outcome: 'passed', url: 'http://localhost:3100/about' });
  expect(b.checks).toMatchObject([{ path: '/', ok: true }]);
  expect(b.appLogTail).toContain('listening');
});

test("the repo's app that never answers fails the check, naming it with the end of its log", async () => {
  const appRepo = await makeFixtureRepo({
    '.drydock/config.yaml':
      "app:\n  start: echo 'waiting for the database at localhost:5432'; sleep 600\n  port: 3200\n  ready: { timeout: 3s }\n",
  });
  const final = await runSession('browser-app-notready', onlyAPage, appRepo);
  expect(final.phase).toBe('failed');
  expect(final.verification!.browser).toMatchObject({
    outcome: 'not_ready',
    message: 'http://localhost:3200/ did not answer within 3 s',
  });
  expect(final.verification!.summary).toBe(
    "the page never became ready: http://localhost:3200/ did not answer within 3 s; the app ('echo 'waiting for the database at localhost:5432'; sleep 600') runs on, its log (/home/drydock/.drydock/app.log) ends: waiting for the database at localhost:5432",
  );
});

test('JUnit XML with 2 failures → the counts and failing names in status', async () => {
  const junit = `<?xml version="1.0"?>
<testsuites>
  <testsuite name="api" tests="3">
    <testcase classname="api" name="lists users"/>
    <testcase classname="api" name="creates a user"><failure message="expected 201, got 500">stack</failure></testcase>
    <testcase classname="api" name="deletes a user"><skipped/></testcase>
  </testsuite>
  <testsuite name="ui" tests="2">
    <testcase classname="ui" name="renders the form"/>
    <testcase classname="ui" name="submits"><error message="TypeError: x is undefined"/></testcase>
  </testsuite>
</testsuites>`;
  const final = await runSession('junit', {
    test: `mkdir -p reports && cat > reports/junit.xml <<'XML'\n${junit}\nXML\nexit 1`,
  });
  expect(final.phase).toBe('failed');
  expect(final.verification!.report).toEqual({
    files: ['reports/junit.xml'],
    total: 5,
    passed: 2,
    failed: 2,
    skipped: 1,
    failures: [
      { name: 'api › creates a user', message: 'expected 201, got 500' },
      { name: 'ui › submits', message: 'TypeError: x is undefined' },
    ],
  });
  expect(final.verification!.summary).toContain(
    '2 of 5 tests failed: api › creates a user: expected 201, got 500; ui › submits: TypeError: x is undefined',
  );
});
