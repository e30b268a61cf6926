/**
 * Status without a worker: the last known state from the session's memo,
 * marked as such, with what Temporal says is pending.
 */
import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { answeredStatus, getStatus, listSessions, startSession, StatusUnanswered } from '../../platform/sessions';
import { reject, type SessionStatus } from '../../workflows/api';
import {
  clientSettings,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  pollUntil,
  runCli,
  startStack,
  waitForStatus,
} from '../support/helpers';
import { connectTemporal } from '../../platform/temporal-connection';

let client: Client;
let connection: Connection;
beforeAll(async () => {
  connection = await connectTemporal(clientSettings(process.env.TEMPORAL_ADDRESS!));
  client = new Client({ connection });
});
afterAll(() => connection?.close());

test('a session no worker ever picked up: status, list and the CLI show its last known state', async () => {
  const id = newSessionId('workerless');
  const taskQueue = `nobody-${randomBytes(4).toString('hex')}`;
  const input = { repo: { url: 'file:///nowhere.git' }, task: 'fix the typo in README' };
  await startSession(client, input, { sessionId: id, taskQueue });
  try {
    const s = await getStatus(client, id);
    expect(s).toMatchObject({ sessionId: id, phase: 'provisioning', task: input.task, repo: input.repo.url });
    expect(s.unanswered?.message).toBe(`no worker is polling task queue ${taskQueue}`);
    // What a webhook must not act on (its pull request, its agent's kind are the worker's to say): an error, not the memo.
    await expect(answeredStatus(client, id)).rejects.toThrow(
      new StatusUnanswered(id, `no worker is polling task queue ${taskQueue}`),
    );
    // Visibility is eventually consistent: the list shows a session once its start is indexed.
    const listed = await pollUntil(
      async () => (await listSessions(client, { repo: input.repo.url, limit: 10 })).find((r) => r.sessionId === id),
      (row) => row !== undefined,
      'the session is listed',
      30_000,
    );
    expect(listed).toMatchObject({ task: input.task, phase: 'provisioning' });
    const cli = await runCli(['status', id], {});
    expect(cli.stdout).toContain(`last known state: no worker is polling task queue ${taskQueue}`);
  } finally {
    await client.workflow.getHandle(id).terminate('test over');
  }
});

test('a session whose worker stopped: its phase and pending approval from the memo, then it goes on', async () => {
  const repo = await makeFixtureRepo();
  const first = await startStack();
  const id = newSessionId('stopped');
  const input = {
    repo: { url: repo.url },
    task: 'greet',
    agent: { kind: 'script' as const, steps: [{ run: 'echo hello >> README.md' }] },
  };
  await startSession(first.client, input, { sessionId: id, taskQueue: first.config.DRYDOCK_TASK_QUEUE });
  const handle = client.workflow.getHandle(id);
  const waiting = await waitForStatus(handle, inPhase('awaiting_approval'));
  await first.stop();

  const s = await getStatus(client, id);
  expect(s.phase).toBe('awaiting_approval');
  expect(s.unanswered?.pendingApproval).toMatchObject({ action: 'push', change: waiting.pendingApproval!.change });
  expect(s.unanswered?.message).toMatch(/^no worker (answered within|is polling)/);

  // A worker on the same queues again: the query answers and the session ends as usual.
  const { DRYDOCK_TASK_QUEUE, DRYDOCK_HOST_ID } = first.config;
  const second = await startStack({ DRYDOCK_TASK_QUEUE, DRYDOCK_HOST_ID });
  try {
    await handle.signal(reject, { action: 'push', by: 'test' });
    const final = (await handle.result()) as SessionStatus;
    expect(final.phase).toBe('rejected');
    expect(final.unanswered).toBeUndefined();
    expect((await getStatus(client, id)).phase).toBe('rejected');
  } finally {
    await second.stop();
  }
});
