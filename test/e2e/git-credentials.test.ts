/**
 * Security round 3, finding 14: repo URLs carry no credentials, so none is
 * kept in Temporal's history. A private remote over HTTP (real git
 * http-backend that demands Basic credentials) is cloned and pushed to with
 * the worker's own, from DRYDOCK_GIT_CREDENTIALS by host; a URL with
 * credentials started straight on Temporal (as the Temporal UI can) is
 * refused before git runs.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { status, type SessionStatus } from '../../workflows/api';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github';
import { historyText } from '../support/histories';
import {
  git,
  makeFixtureRepo,
  newSessionId,
  scriptedSession,
  startSession,
  startStack,
  type TestStack,
} from '../support/helpers';

const TOKEN = `glpat-${randomBytes(12).toString('hex')}`;
/** What git sends: the Basic credentials' base64. */
const ENCODED = Buffer.from(`x-access-token:${TOKEN}`).toString('base64');
let host: FakeGitHub;
let bare: string;
let stack: TestStack;
const logLines: string[] = [];

beforeAll(async () => {
  const root = await mkdtemp(path.join(tmpdir(), 'drydock-private-git-'));
  await mkdir(path.join(root, 'acme'));
  bare = path.join(root, 'acme', 'app.git');
  git(['clone', '--quiet', '--bare', (await makeFixtureRepo()).bare, bare]);
  // A private git host (only its git routes are used): git http-backend behind Basic x-access-token:<TOKEN>.
  host = await startFakeGitHub({ owner: 'acme', repo: 'app', token: TOKEN, gitRoot: root });
  const log = pino({ level: 'trace' }, { write: (line: string) => void logLines.push(line) });
  stack = await startStack(
    { DRYDOCK_GIT_CREDENTIALS: { [new URL(host.url).host]: `x-access-token:${TOKEN}` }, DRYDOCK_APPROVAL_REQUIRED: [] },
    log,
  );
});
afterAll(async () => {
  await stack?.stop();
  await host?.close();
});

test("a private HTTP remote is cloned and pushed to with the worker's credentials for its host; none is in the history", async () => {
  const id = newSessionId('private-git');
  const handle = await startSession(
    stack,
    id,
    scriptedSession(`${host.url}/acme/app.git`, 'greet', 'echo hello >> README.md', {
      verify: { test: 'sh check.sh' },
    }),
  );
  const final = (await handle.result()) as SessionStatus;
  expect(final.phase).toBe('completed');
  expect(git(['rev-parse', `drydock/${id}`], bare).trim()).toBe(final.pushed!.commit);
  // The remote demanded credentials and got them: fetches and the push went through git http-backend.
  const paths = host.requests.map((r) => r.path);
  expect(paths).toEqual(
    expect.arrayContaining([
      '/acme/app.git/info/refs?service=git-upload-pack',
      '/acme/app.git/info/refs?service=git-receive-pack',
    ]),
  );
  expect(host.requests.filter((r) => r.path.startsWith('/acme/app.git/')).map((r) => r.authorization)).toContain(
    `Basic ${ENCODED}`,
  );

  // Payloads decoded: the URL is there as given, and nothing of the credentials.
  const history = historyText(await handle.fetchHistory());
  expect(history).toContain(`${host.url}/acme/app.git`);
  for (const kept of [history, logLines.join('\n'), JSON.stringify(await handle.query(status))]) {
    expect(kept).not.toContain(TOKEN);
    expect(kept).not.toContain(ENCODED);
  }
  const mirrors = path.join(stack.config.DRYDOCK_DATA_DIR, 'mirrors');
  for (const mirror of await readdir(mirrors)) {
    expect(await readFile(path.join(mirrors, mirror, 'config'), 'utf8')).not.toContain(TOKEN);
  }
});

test('a URL with credentials started straight on Temporal is refused, naming repo.url, before git runs', async () => {
  const asked = host.requests.length;
  const url = `${host.url.replace('://', `://x-access-token:${TOKEN}@`)}/acme/app.git`;
  const handle = await startSession(stack, newSessionId('url-creds'), scriptedSession(url, 'greet', 'true'));
  await handle.result().catch(() => undefined);
  const final = await handle.query(status);
  expect(final.phase).toBe('failed');
  expect(final.error).toMatch(/repo\.url: must not carry credentials.*DRYDOCK_GIT_CREDENTIALS/);
  expect(final.error).not.toContain(TOKEN);
  expect(host.requests.length).toBe(asked);
  // The search of the first test finds a credential where there is one: this start's own input holds it.
  expect(historyText(await handle.fetchHistory())).toContain(TOKEN);
});
