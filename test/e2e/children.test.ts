/**
 * Child sessions end to end (docs/agents.md, Child sessions) on real
 * Temporal, Docker, git and PostgreSQL, with the model stand-in: the parent's
 * built-in loop starts a child (start_child), the child works in its own
 * sandbox at the parent's base commit, verifies and ends without publishing;
 * its diff comes back into the parent's sandbox, the parent takes it with
 * `git apply`, and only the parent's change waits at the gate and is pushed.
 */
import { randomBytes } from 'node:crypto';
import { chromium, type Browser } from 'playwright-core';
import { formatStatus } from '../../cli/sessions';
import { status as statusQuery } from '../../workflows/api';
import { childDiffPath } from '../../workflows/rules/children';
import { startFakeProviders, toolResults, type FakeProviders } from '../support/fake-providers';
import { personalTokens } from '../support/identity';
import {
  approvePush,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  startSession,
  startServe,
  startStack,
  waitForStatus,
  type TestStack,
} from '../support/helpers';

const KEY = `sk-test-${randomBytes(12).toString('hex')}`;
let model: FakeProviders;
let stack: TestStack;
let repo: { url: string; bare: string };
let serve: Awaited<ReturnType<typeof startServe>>;
let browser: Browser;
let alice: string;

beforeAll(async () => {
  ({ alice } = await personalTokens('alice'));
  model = await startFakeProviders({ apiKey: KEY });
  stack = await startStack({
    DRYDOCK_MODEL_BASE_URL: model.baseUrl,
    DRYDOCK_MODEL_API: 'anthropic',
    DRYDOCK_MODEL_API_KEY: KEY,
  });
  serve = await startServe(stack);
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-background-networking', '--disable-dev-shm-usage', '--disable-gpu'],
  });
  repo = await makeFixtureRepo();
});
afterAll(async () => {
  await browser?.close();
  await serve?.close();
  await stack?.stop();
  await model?.close();
});

/** The review console's page of the parent: its children as a tree one level down, each a link to a child's page that names its parent. */
async function consoleTree(parent: string, childId: string): Promise<void> {
  const page = await browser.newPage();
  try {
    await page.goto(serve.url);
    await page.fill('input[name=token]', alice);
    await page.click('button[type=submit]');
    await page.goto(`${serve.url}/sessions/${parent}`);
    const rows = await page.locator('#children li').allTextContents();
    expect(rows).toEqual([
      expect.stringMatching(new RegExp(`^${childId.replace(/\./g, '\\.')}: completed, verified · add a line`)),
    ]);
    await page.locator(`#children a[href="/sessions/${childId}"]`).click();
    await page.waitForURL(`${serve.url}/sessions/${childId}`);
    expect(await page.textContent('h1')).toContain(childId);
    expect(await page.textContent('body')).toContain(`A child session of ${parent}: its change goes there.`);
    await page.locator(`a[href="/sessions/${parent}"]`).first().click();
    await page.waitForURL(`${serve.url}/sessions/${parent}`);
  } finally {
    await page.close();
  }
}

test("a parent's agent starts a child; the child's diff comes back and the parent takes it into its change", async () => {
  const parent = newSessionId('kids');
  const childId = `${parent}.child-1`;
  const before = model.requests.length;
  model.script([
    { toolCalls: [{ name: 'start_child', arguments: { task: 'add a line "hello" under the title of README.md' } }] },
    // The child's turns: the parent waits for it meanwhile.
    {
      toolCalls: [
        {
          name: 'edit_file',
          arguments: { path: 'README.md', old_string: '# fixture\n', new_string: '# fixture\nhello\n' },
        },
      ],
    },
    { text: 'Added hello.' },
    { toolCalls: [{ name: 'run', arguments: { command: `git apply ${childDiffPath(childId)}` } }] },
    { text: "Took the child's change." },
  ]);
  const handle = await startSession(stack, parent, {
    repo: { url: repo.url },
    task: 'greet, with a child session doing the work',
    agent: { kind: 'openai', model: 'fake-1' },
    verify: { test: 'sh check.sh' },
  });
  const atGate = await waitForStatus(handle, inPhase('awaiting_approval'), 240_000);
  // start_child is offered to the parent, not to the child (children.depth 1).
  expect(model.requests[before].tools).toContain('start_child');
  expect(model.requests[before + 1].tools).not.toContain('start_child');
  expect(model.requests[before + 1].tools).toContain('edit_file');
  // start_child's result, as the parent's model read it at its next turn.
  const answer = toolResults(model.requests[before + 3])[0];
  expect(answer).toContain(`child session ${childId} ended: completed`);
  expect(answer).toContain('verification: passed');
  expect(answer).toContain('Added hello.');
  expect(answer).toContain(`git apply ${childDiffPath(childId)}`);
  expect(toolResults(model.requests[before + 4])[1]).toMatch(/^exit code 0/);
  expect(atGate.children).toEqual([
    expect.objectContaining({ sessionId: childId, phase: 'completed', verified: true }),
  ]);
  expect(formatStatus(atGate)).toContain(`children:\n  ${childId}: completed, verified, $`);
  expect(atGate.agent?.diffstat).toContain('README.md');
  expect(atGate.verification?.passed).toBe(true);
  // The child: its own sandbox, torn down; nothing published.
  const child = await stack.client.workflow.getHandle(childId).query(statusQuery);
  expect(child).toMatchObject({ phase: 'completed', childOf: parent });
  expect(child.pushed).toBeUndefined();
  expect(formatStatus(child)).toContain(`child of: ${parent}`);
  expect(child.sandbox?.name).not.toBe(atGate.sandbox?.name);
  expect(child.removedSandboxes).toEqual([child.sandbox?.name]);
  expect(child.timeline.find((s) => s.name === 'publish')?.detail).toBe(
    `nothing published: a child session's change goes to ${parent}`,
  );
  await consoleTree(parent, childId);
  const done = await approvePush(handle);
  expect(done.phase).toBe('completed');
  expect(done.pushed?.commit).toBeDefined();
});
