/**
 * A worker killed (SIGKILL) while two child sessions run (docs/agents.md,
 * Child sessions): the parent starts two children in one answer; each holds
 * its step in its own sandbox; the only worker dies, a new one starts; both
 * children finish their step and their session, the parent, which was
 * waiting on them, gets both answers and diffs, takes exactly one child's
 * change (the second's) and reaches the gate; approved, it pushes that
 * child's edit and not the other's. Real Temporal, Docker, git and
 * PostgreSQL; the model is the local stand-in, answering by what each request
 * holds (a retried call gets the same answer).
 */
import { status as statusQuery } from '../../workflows/api';
import { childDiffPath } from '../../workflows/rules/children';
import { toolResults, type RecordedRequest } from '../support/fake-providers';
import {
  approvePush,
  containersOf,
  git,
  makeFixtureRepo,
  newSessionId,
  startSession,
  waitForStatus,
} from '../support/helpers';
import { gate, heldCommand, stopGates } from '../support/drills';
import { modelDrill, startWorkerProcess, type ModelDrill } from '../support/workers';

let drill: ModelDrill;

beforeAll(async () => {
  drill = await modelDrill('kids-crash', 'anthropic');
});
afterAll(async () => {
  stopGates();
  await drill?.close();
});

const HELD = 'child-step';
/** Each child's task and the edit its model makes (both pass check.sh, which wants "hello" in README.md). */
const CHILDREN = [
  { task: 'greet in README.md and add ONE.md', edit: 'echo hello >> README.md; echo one > ONE.md' },
  { task: 'greet in README.md and add TWO.md', edit: 'echo hello >> README.md; echo two > TWO.md' },
];

/**
 * The parent (offered start_child) starts both children in one answer, then
 * applies the second one's diff only; each child runs its edit as a held step.
 */
function script(parentId: string) {
  return (r: RecordedRequest) => {
    const done = toolResults(r).length;
    if (r.tools.includes('start_child')) {
      if (done === 0) return { toolCalls: CHILDREN.map(({ task }) => ({ name: 'start_child', arguments: { task } })) };
      if (done === 2) {
        const command = `git apply ${childDiffPath(`${parentId}.child-2`)}`;
        return { toolCalls: [{ name: 'run', arguments: { command } }] };
      }
      return { text: "Took the second child's change." };
    }
    const child = CHILDREN.find((c) => r.messages.some((m) => m.role === 'user' && m.text.includes(c.task)))!;
    if (done === 0) return { toolCalls: [{ name: 'run', arguments: { command: heldCommand(HELD, child.edit) } }] };
    return { text: `Done: ${child.task}.` };
  };
}

test('kill -9 the worker while two children run: after the restart both finish and the parent takes one change', async () => {
  const { model, env, client } = drill;
  const repo = await makeFixtureRepo();
  const id = newSessionId('kids-crash');
  const childIds = [`${id}.child-1`, `${id}.child-2`];
  model.script(script(id));
  let worker = startWorkerProcess(env, { cli: true });
  try {
    const handle = await startSession({ client, config: env }, id, {
      repo: { url: repo.url },
      task: 'greet, with two child sessions doing the work',
      agent: { kind: 'openai', model: 'fake-1' },
      verify: { test: 'sh check.sh' },
    });
    const held = childIds.map((childId) => gate(childId, HELD));
    // Both children's steps run in their sandboxes; the parent waits on the first.
    await Promise.all(held.map((g) => g.reached));
    await worker.kill();
    for (const g of held) g.open();
    worker = startWorkerProcess(env, { cli: true });

    const atGate = await waitForStatus(handle, (s) => s.phase === 'awaiting_approval', 900_000);
    expect(atGate.children).toEqual(
      childIds.map((sessionId) => expect.objectContaining({ sessionId, phase: 'completed', verified: true })),
    );
    for (const childId of childIds) {
      const child = await client.workflow.getHandle(childId).query(statusQuery);
      expect(child).toMatchObject({ phase: 'completed', childOf: id });
      expect(child.pushed).toBeUndefined();
    }
    expect(atGate.verification?.passed).toBe(true);
    const done = await approvePush(handle, 'alice', 300_000);
    expect(done.phase).toBe('completed');
    // The second child's edit, and nothing of the first's.
    expect(git(['show', `drydock/${id}:README.md`], repo.bare)).toBe('# fixture\nhello\n');
    expect(git(['show', `drydock/${id}:TWO.md`], repo.bare)).toBe('two\n');
    expect(git(['ls-tree', '--name-only', `drydock/${id}`], repo.bare).split('\n')).not.toContain('ONE.md');
    for (const sessionId of [id, ...childIds]) expect(await containersOf(sessionId)).toHaveLength(0);
  } finally {
    await worker.kill();
  }
}, 1_500_000);
