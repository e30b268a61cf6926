/**
 * A plan first, end to end (docs/agents.md): real Temporal, Docker and git,
 * a local server speaking Anthropic's Messages API in place of the model. The
 * built-in loop plans while it may only read (its write is refused in the
 * sandbox's worker), waits at the plan gate, a follow-up amends the plan, the
 * amended plan is approved, and the agent carries it out: verified, pushed.
 */
import { randomBytes } from 'node:crypto';
import { decide, followup } from '../../workflows/api';
import { lastUserMessage, startFakeProviders, toolResults, type FakeProviders } from '../support/fake-providers';
import {
  approvePush,
  git,
  makeFixtureRepo,
  newSessionId,
  startSession,
  startStack,
  waitForStatus,
  type TestStack,
} from '../support/helpers';

const KEY = `sk-test-${randomBytes(12).toString('hex')}`;
let model: FakeProviders;
let stack: TestStack;
let repo: { url: string; bare: string };

beforeAll(async () => {
  model = await startFakeProviders({ apiKey: KEY });
  stack = await startStack({
    DRYDOCK_MODEL_BASE_URL: model.baseUrl,
    DRYDOCK_MODEL_API: 'anthropic',
    DRYDOCK_MODEL_API_KEY: KEY,
  });
  repo = await makeFixtureRepo();
});
afterAll(async () => {
  await stack?.stop();
  await model?.close();
});

test('a plan written reading only, amended by a follow-up, approved, then carried out and pushed', async () => {
  const id = newSessionId('plan');
  model.script([
    // Planning: it reads, and its write is refused (nothing changes before the approval).
    {
      toolCalls: [
        { name: 'read_file', arguments: { path: 'README.md' } },
        { name: 'write_file', arguments: { path: 'EARLY.md', content: 'too soon\n' } },
      ],
    },
    { text: 'Plan:\n1. Add "hello" to README.md.\n2. Run sh check.sh.' },
    // The amended plan.
    { text: 'Plan:\n1. Add "hello" to README.md.\n2. Write NOTES.md.\n3. Run sh check.sh.' },
    // The work on the approved plan.
    {
      toolCalls: [
        {
          name: 'edit_file',
          arguments: { path: 'README.md', old_string: '# fixture\n', new_string: '# fixture\nhello\n' },
        },
        { name: 'write_file', arguments: { path: 'NOTES.md', content: 'planned first\n' } },
      ],
    },
    { text: 'Done as planned.' },
  ]);
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'greet in the README',
    plan: true,
    agent: { kind: 'openai', model: 'fake-1' },
    verify: { test: 'sh check.sh' },
    approval: { required: ['push'] },
  });
  const first = await waitForStatus(handle, (s) => s.pendingApproval?.action === 'plan', 120_000);
  expect(first.phase).toBe('awaiting_approval');
  expect(first.pendingApproval!.evidence.plan).toEqual({
    text: 'Plan:\n1. Add "hello" to README.md.\n2. Run sh check.sh.',
    version: 1,
  });
  expect(first.agent!.changed).toBeUndefined(); // nothing committed before the approval
  await handle.executeUpdate(followup, { args: [{ by: 'alice', text: 'Also write NOTES.md.' }] });
  const second = await waitForStatus(handle, (s) => s.pendingApproval?.evidence.plan?.version === 2, 120_000);
  expect(second.pendingApproval!.evidence.plan!.text).toContain('Write NOTES.md');
  await handle.executeUpdate(decide, {
    args: [{ decision: 'approve', action: 'plan', by: 'alice', change: second.pendingApproval!.change }],
  });
  // The plan's approval leaves the phase awaiting_approval until the workflow moves on: wait for the push's gate.
  await waitForStatus(handle, (s) => s.pendingApproval?.action === 'push', 120_000);
  const final = await approvePush(handle);
  expect(final.phase).toBe('completed');
  expect(final.plan).toMatchObject({ state: 'approved', version: 2, approvedBy: 'alice' });

  const asked = model.requests.slice(-5);
  expect(lastUserMessage(asked[0])).toMatch(/Before you change anything, write a plan/);
  expect(toolResults(asked[1]).join('\n')).toMatch(/write_file is not available while you write the plan/);
  expect(lastUserMessage(asked[2])).toMatch(/From alice:\nAlso write NOTES.md./);
  expect(lastUserMessage(asked[3])).toContain(
    '<approved-plan>\nPlan:\n1. Add "hello" to README.md.\n2. Write NOTES.md.\n3. Run sh check.sh.\n</approved-plan>',
  );
  // The change is what the approved plan said, and not the write tried while planning.
  const files = await git(['ls-tree', '--name-only', `drydock/${id}`], repo.bare);
  expect(files.split('\n')).toEqual(expect.arrayContaining(['NOTES.md', 'README.md']));
  expect(files).not.toContain('EARLY.md');
  expect(final.timeline.filter((s) => s.name === 'approval: plan').map((s) => s.detail)).toEqual([
    'plan 1 amended by alice',
    'plan 2 approved by alice',
  ]);
});
