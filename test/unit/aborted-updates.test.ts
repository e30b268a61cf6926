/**
 * retryAbortedUpdates (platform/temporal-connection.ts): an update the server
 * aborted with its failed workflow task is sent again with the same input (so
 * the same update id); any other failure is not. The errors are the client's
 * own, shaped as the server sent them in an e2e run (pilot.test.ts, a busy
 * worker's 8.8 s workflow task).
 */
import { ServiceError, type WorkflowStartUpdateInput, type WorkflowStartUpdateOutput } from '@temporalio/client';
import { retryAbortedUpdates } from '../../platform/temporal-connection';

const grpcError = (code: number, details: string) => Object.assign(new Error(`${code} ${details}`), { code, details });
const aborted = () =>
  new ServiceError('Workflow Update failed', {
    cause: grpcError(9, 'Unable to perform workflow execution update due to unexpected workflow task failure.'),
  });
const input = {
  updateName: 'stopPilot',
  args: [{ by: 'ops' }],
  options: { updateId: 'u-1' },
} as unknown as WorkflowStartUpdateInput;
const accepted = { updateId: 'u-1', outcome: undefined } as unknown as WorkflowStartUpdateOutput;

/** Calls the interceptor with a `next` that fails with `failures` in turn, then accepts; returns what `next` saw. */
async function send(failures: Error[], attempts = 3, sent = input) {
  const seen: WorkflowStartUpdateInput[] = [];
  const next = async (i: WorkflowStartUpdateInput) => {
    seen.push(i);
    const failure = failures.shift();
    if (failure) throw failure;
    return accepted;
  };
  const result = retryAbortedUpdates(attempts, 1).startUpdate!(sent, next);
  return { result, seen };
}

test('an update aborted with its workflow task is sent again, the same update', async () => {
  const { result, seen } = await send([aborted(), aborted()]);
  await expect(result).resolves.toBe(accepted);
  expect(seen).toEqual([input, input, input]);
});

test('an update sent without an id gets one, the same on every try (T4-L2)', async () => {
  // The client makes an id per call when the options hold none: each retry was a new update.
  const internal = Symbol('internal options');
  const bare = { ...input, options: { [internal]: 'kept' } } as unknown as WorkflowStartUpdateInput;
  const { result, seen } = await send([aborted(), aborted()], 3, bare);
  await result;
  const ids = seen.map((i) => i.options.updateId);
  expect(ids[0]).toMatch(/^[0-9a-f-]{36}$/);
  expect(ids).toEqual([ids[0], ids[0], ids[0]]);
  expect((seen[2].options as unknown as Record<symbol, string>)[internal]).toBe('kept');
});

test('it gives up after its attempts, with the server’s error', async () => {
  const { result, seen } = await send([aborted(), aborted(), aborted()]);
  await expect(result).rejects.toThrow('Workflow Update failed');
  expect(seen).toHaveLength(3);
});

test('any other failure is not sent again', async () => {
  for (const failure of [
    new ServiceError('Workflow Update failed', { cause: grpcError(5, 'workflow not found') }),
    new ServiceError('Workflow Update failed', { cause: grpcError(9, 'workflow execution already completed') }),
    new Error('validator: the pilot was stopped by ops'),
  ]) {
    const { result, seen } = await send([failure]);
    await expect(result).rejects.toBe(failure);
    expect(seen).toHaveLength(1);
  }
});
