/**
 * A worker killed (SIGKILL) while a child session runs (docs/agents.md, Child
 * sessions): the child's step is held in its sandbox, the only worker dies,
 * a new one starts; the child finishes its step and its session, the parent,
 * which was waiting on it, gets its answer and diff, takes the change and
 * reaches the gate; approved, it pushes the child's line. Real Temporal,
 * Docker, git and PostgreSQL; the model is the local stand-in, answering by
 * what each request holds (a retried call gets the same answer).
 */
import { randomBytes } from 'node:crypto';
import { status as statusQuery } from '../../workflows/api';
import { childDiffPath } from '../../workflows/rules/children';
import { startFakeProviders, toolResults, type FakeProviders, type RecordedRequest } from '../support/fake-providers';
import {
  approvePush,
  connectClient,
  containersOf,
  git,
  makeFixtureRepo,
  newSessionId,
  startSession,
  waitForStatus,
} from '../support/helpers';
import { gate, heldCommand, stopGates } from '../support/drills';
import { newQueue, startWorkerProcess, workerEnv } from '../support/workers';

const KEY = `sk-test-${randomBytes(12).toString('hex')}`;
let model: FakeProviders;

beforeAll(async () => {
  model = await startFakeProviders({ apiKey: KEY });
});
afterAll(async () => {
  stopGates();
  await model?.close();
});

const HELD = 'child-step';

/** The parent (offered start_child) starts one child, then applies its diff; the child runs its held step. */
function script(childId: string) {
  return (r: RecordedRequest) => {
    const done = toolResults(r).length;
    if (r.tools.includes('start_child')) {
      if (done === 0)
        return { toolCalls: [{ name: 'start_child', arguments: { task: 'add a line "hello" to README.md' } }] };
      if (done === 1)
        return { toolCalls: [{ name: 'run', arguments: { command: `git apply ${childDiffPath(childId)}` } }] };
      return { text: "Took the child's change." };
    }
    if (done === 0) {
      const command = heldCommand(HELD, 'echo hello >> README.md');
      return { toolCalls: [{ name: 'run', arguments: { command } }] };
    }
    return { text: 'Added hello.' };
  };
}

test('kill -9 the worker while a child runs: after the restart the child and its parent both finish', async () => {
  const repo = await makeFixtureRepo();
  const env = await workerEnv(newQueue('kids-crash'), {
    DRYDOCK_MODEL_BASE_URL: model.baseUrl,
    DRYDOCK_MODEL_API: 'anthropic',
    DRYDOCK_MODEL_API_KEY: KEY,
  });
  const client = await connectClient();
  const id = newSessionId('kids-crash');
  const childId = `${id}.child-1`;
  model.script(script(childId));
  let worker = startWorkerProcess(env, { cli: true });
  try {
    const handle = await startSession({ client, config: env }, id, {
      repo: { url: repo.url },
      task: 'greet, with a child session doing the work',
      agent: { kind: 'openai', model: 'fake-1' },
      verify: { test: 'sh check.sh' },
    });
    const held = gate(childId, HELD);
    await held.reached; // the child's step runs in its sandbox, the parent waits on the child
    await worker.kill();
    held.open();
    worker = startWorkerProcess(env, { cli: true });

    const atGate = await waitForStatus(handle, (s) => s.phase === 'awaiting_approval', 600_000);
    expect(atGate.children).toEqual([
      expect.objectContaining({ sessionId: childId, phase: 'completed', verified: true }),
    ]);
    const child = await client.workflow.getHandle(childId).query(statusQuery);
    expect(child).toMatchObject({ phase: 'completed', childOf: id });
    expect(atGate.verification?.passed).toBe(true);
    const done = await approvePush(handle, 'alice', 300_000);
    expect(done.phase).toBe('completed');
    expect(git(['show', `drydock/${id}:README.md`], repo.bare)).toBe('# fixture\nhello\n');
    expect(await containersOf(id)).toHaveLength(0);
    expect(await containersOf(childId)).toHaveLength(0);
  } finally {
    await worker.kill();
    await client.connection.close();
  }
}, 1_200_000);
