/**
 * Child sessions from an agent CLI end to end (docs/agents.md, Child
 * sessions), on real Temporal, Docker, git and PostgreSQL: the real, pinned
 * Claude Code in the parent's sandbox finds `start_child` at the model
 * gateway's /mcp/drydock endpoint (configured by drydock, with its step's
 * token), calls it; the session starts the child (its own sandbox, Claude Code
 * too, at the parent's base commit), which edits and verifies; the call's
 * answer is the child's outcome and fenced words, and the child's diff is in
 * the parent's sandbox, where the parent's Claude Code takes it with
 * `git apply`. Only the parent's change is pushed. The model is the local
 * Anthropic stand-in (test/support/fake-providers.ts).
 */
import { randomBytes } from 'node:crypto';
import { Pool } from 'pg';
import { status as statusQuery } from '../../workflows/api';
import { childDiffPath } from '../../workflows/rules/children';
import { startFakeProviders, type FakeProviders, type RecordedRequest, type Turn } from '../support/fake-providers';
import {
  approvePush,
  containersOf,
  git,
  makeFixtureRepo,
  newSessionId,
  startSession,
  startStack,
  type FixtureRepo,
  type TestStack,
} from '../support/helpers';

const KEY = `sk-real-${randomBytes(12).toString('hex')}`;
const START_CHILD = 'mcp__drydock__start_child';
const CHILD_TASK = 'add a line "hello" under the title of README.md';

let fake: FakeProviders;
let stack: TestStack;
let repo: FixtureRepo;

beforeAll(async () => {
  fake = await startFakeProviders({ apiKey: KEY });
  stack = await startStack({ DRYDOCK_ANTHROPIC_BASE_URL: fake.url, DRYDOCK_ANTHROPIC_API_KEY: KEY });
  repo = await makeFixtureRepo();
}, 600_000);
afterAll(async () => {
  await stack?.stop();
  await fake?.close();
});

const results = (r: RecordedRequest) => r.messages.filter((m) => m.role === 'tool');

/**
 * The parent (offered start_child) starts the child, then applies its diff; the
 * child (not offered it: children.depth 1) writes README.md. Side requests get text.
 */
function script(diffAt: () => string) {
  return (r: RecordedRequest): Turn => {
    const usage = { input: 400, output: 40 };
    if (!r.tools.includes('Write')) return { text: 'ok', usage: { input: 50, output: 5 } };
    const done = results(r).length;
    if (r.tools.includes(START_CHILD)) {
      if (done === 0) return { toolCalls: [{ name: START_CHILD, arguments: { task: CHILD_TASK } }], usage };
      if (done === 1) {
        const command = `git apply ${diffAt()}`;
        return { toolCalls: [{ name: 'Bash', arguments: { command, description: 'take the change' } }], usage };
      }
      return { text: "Took the child's change.", usage };
    }
    if (done === 0) {
      // Bash, not Write: Claude Code writes over a file only after reading it.
      const command = "printf '# fixture\\nhello\\n' > README.md";
      return { toolCalls: [{ name: 'Bash', arguments: { command, description: 'greet' } }], usage };
    }
    return { text: 'Added hello.', usage };
  };
}

test("Claude Code starts a child through the gateway's start_child and takes its diff into its change", async () => {
  const id = newSessionId('cli-kids');
  const childId = `${id}.child-1`;
  fake.script(script(() => childDiffPath(childId)));
  const before = fake.requests.length;
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'greet, with a child session doing the work',
    agent: { kind: 'cli', command: 'claude', model: 'claude-sonnet-4-5' },
    verify: { test: 'sh check.sh' },
  });
  const final = await approvePush(handle, 'alice', 900_000);
  expect(final).toMatchObject({ phase: 'completed' });
  expect(git(['show', `drydock/${id}:README.md`], repo.bare)).toBe('# fixture\nhello\n');

  const requests = fake.requests.slice(before).filter((r) => r.tools.includes('Write'));
  const parent = requests.filter((r) => r.tools.includes(START_CHILD));
  const child = requests.filter((r) => !r.tools.includes(START_CHILD));
  expect(parent.length).toBeGreaterThanOrEqual(3);
  expect(child.length).toBeGreaterThanOrEqual(2);
  // The call's answer, as the parent's Claude Code read it: the outcome, the fenced words, the diff's path.
  const answer = results(parent[1])[0].text;
  expect(answer).toContain(`child session ${childId} ended: completed`);
  expect(answer).toContain(`<child-words session="${childId}">`);
  expect(answer).toContain('verification: passed');
  expect(answer).toContain('Added hello.');
  expect(answer).toContain(`git apply ${childDiffPath(childId)}`);
  expect(results(parent[2])[1].text).toMatch(/^(?!.*error)/);

  expect(final.children).toEqual([expect.objectContaining({ sessionId: childId, phase: 'completed', verified: true })]);
  expect(final.timeline.map((t) => t.name)).toEqual(expect.arrayContaining(['child: started', 'child: completed']));
  const kid = await stack.client.workflow.getHandle(childId).query(statusQuery);
  expect(kid).toMatchObject({ phase: 'completed', childOf: id });
  expect(kid.pushed).toBeUndefined();
  // The call is in the parent's audit trail, as the built-in loop's are.
  const pool = new Pool({ connectionString: process.env.DATABASE_URL });
  const { rows } = await pool
    .query(`select data from audit_events where session_id = $1 and kind = 'tool_call'`, [id])
    .finally(() => pool.end());
  expect(rows.map((r) => r.data).filter((d) => d.tool === 'start_child')).toEqual([
    expect.objectContaining({ via: 'gateway', child: childId, ok: true }),
  ]);
  expect(await containersOf(id)).toHaveLength(0);
  expect(await containersOf(childId)).toHaveLength(0);
}, 1_200_000);
