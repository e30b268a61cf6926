/**
 * The app kept running for the agent (`app.forAgent`), on real Temporal,
 * Docker and Chromium: started in a companion container before the agent's
 * first step, it answers on the sandbox's loopback in one step and still in
 * the next (every step's end ends the sandbox's processes, not the app's);
 * the built-in loop reads its log with service_logs "app"; the browser check
 * stops it and starts the app its own way; teardown removes it.
 */
import type { SessionStatus } from '../../workflows/api';
import {
  containersOf,
  makeFixtureRepo,
  newSessionId,
  startSession,
  startStack,
  type TestStack,
} from '../support/helpers';
import { startFakeProviders, toolResults, type FakeProviders } from '../support/fake-providers';

let stack: TestStack;
let model: FakeProviders;
const MODEL_KEY = 'sk-fake-agent-app';

beforeAll(async () => {
  model = await startFakeProviders({ apiKey: MODEL_KEY });
  stack = await startStack({
    DRYDOCK_MODEL_BASE_URL: model.baseUrl,
    DRYDOCK_MODEL_API: 'anthropic',
    DRYDOCK_MODEL_API_KEY: MODEL_KEY,
    DRYDOCK_APPROVAL_REQUIRED: [],
  });
}, 600_000);
afterAll(async () => {
  await stack?.stop();
  await model?.close();
});

/**
 * An app that logs each request it gets and answers with its own pid (the
 * same process across steps); at its start it tries what an app changed by
 * a hostile agent would: write into the home (where a step's run state is)
 * and find the egress socket's folder.
 */
const APP = `const http = require('node:http');
const fs = require('node:fs');
try {
  fs.writeFileSync(require('node:os').homedir() + '/planted', 'x');
  console.log('home writable');
} catch (err) {
  console.log('home ' + err.code);
}
console.log('egress folder ' + fs.existsSync('/run/drydock'));
http
  .createServer((req, res) => {
    console.log('got ' + req.url);
    res.end(req.url === '/' ? '<h1>Hello drydock</h1>' : 'app pid ' + process.pid);
  })
  .listen(3000, '127.0.0.1', () => console.log('app listening'));
`;
const CONFIG = `app:
  start: node app.js
  port: 3000
  ready: { path: /, timeout: 30s }
  forAgent: true
`;
const FETCH = (path: string) =>
  `node -e "fetch('http://localhost:3000${path}').then((r) => r.text()).then(console.log, (e) => console.log('unreachable', e.cause?.code))"`;

test('the app runs for the agent across steps, its log is read with service_logs, the browser check takes over, teardown removes it', async () => {
  const repo = await makeFixtureRepo({ 'app.js': APP, '.drydock/config.yaml': CONFIG });
  const id = newSessionId('agent-app');
  const before = model.requests.length;
  model.script([
    { toolCalls: [{ name: 'run', arguments: { command: FETCH('/first') } }] },
    { toolCalls: [{ name: 'run', arguments: { command: FETCH('/second') } }] },
    { toolCalls: [{ name: 'service_logs', arguments: { service: 'app', lines: 10 } }] },
    { text: 'The app answered.' },
  ]);
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'ask the app',
    agent: { kind: 'openai', model: 'fake-1' },
    verify: { browser: { checks: [{ path: '/', expectText: 'Hello drydock' }] } },
  });
  await handle.result().catch(() => undefined);
  const final: SessionStatus = await handle.query('status');
  const app = final.timeline.find((t) => t.name === 'app');
  expect(app).toMatchObject({ ok: true, detail: 'answers on localhost:3000' });
  // Started before the agent's first step.
  const firstAgentStep = final.timeline.findIndex((t) => t.phase === 'agent' && t.name !== 'app');
  expect(final.timeline.indexOf(app!)).toBeLessThan(firstAgentStep);
  const requests = model.requests.slice(before);
  const [first] = toolResults(requests[1]).slice(-1);
  const [second] = toolResults(requests[2]).slice(-1);
  // The same process answered both steps: the first step's end did not end it.
  expect(first).toMatch(/app pid \d+/);
  expect(second).toContain(first.match(/app pid \d+/)![0]);
  const [log] = toolResults(requests[3]).slice(-1);
  expect(log).toContain('got /first');
  expect(log).toContain('got /second');
  // Its home is read-only and it has no egress folder.
  expect(log).toContain('home EROFS');
  expect(log).toContain('egress folder false');
  // The browser check stopped the agent's app (its port free again) and started the app its own way.
  expect(final.verification?.browser?.outcome).toBe('passed');
  expect(final.verification?.browser?.appLogTail).toContain('app listening');
  expect(final.phase).toBe('completed');
  expect(await containersOf(id)).toHaveLength(0);
}, 600_000);

test('an app that exits at once: noted as not ready, the session goes on, and the agent reads why in its log', async () => {
  const crash = `app:\n  start: 'echo \"config missing: DATABASE_URL\" >&2; exit 3'\n  port: 3000\n  forAgent: true\n`;
  const repo = await makeFixtureRepo({ '.drydock/config.yaml': crash });
  const id = newSessionId('agent-app-exit');
  const before = model.requests.length;
  model.script([
    { toolCalls: [{ name: 'service_logs', arguments: { service: 'app' } }] },
    { text: 'The app needs DATABASE_URL.' },
  ]);
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'why does the app not start',
    agent: { kind: 'openai', model: 'fake-1' },
  });
  await handle.result().catch(() => undefined);
  const final: SessionStatus = await handle.query('status');
  expect(final.error).toBeUndefined();
  expect(final.timeline.find((t) => t.name === 'app')).toMatchObject({
    ok: false,
    detail: expect.stringMatching(/^started, not ready: the app exited/),
  });
  const [log] = toolResults(model.requests.slice(before)[1]).slice(-1);
  expect(log).toContain('config missing: DATABASE_URL');
  expect(log).toContain('drydock: the app exited with status 3');
  expect(final.phase).toBe('completed');
  expect(await containersOf(id)).toHaveLength(0);
}, 600_000);
