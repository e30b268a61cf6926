/**
 * RetryUntilClosed (platform/temporal-connection.ts): a call that failed just before its
 * connection was closed had its retry timed by the SDK; that retry must not start on the closed
 * channel, where it threw "Channel has been shut down" out of the SDK's timer (CI after session
 * 26 lost a whole test file to a file before it). Nothing listens at the address, so every try
 * fails at once with UNAVAILABLE, which the SDK retries.
 */
import { Connection } from '@temporalio/client';
import { RetryUntilClosed } from '../../platform/temporal-connection';
import { freePort } from '../support/ports';

test('a retry timed before close starts on the open channel, and the call ends with its error', async () => {
  const retry = new RetryUntilClosed();
  const connection = Connection.lazy({ address: `127.0.0.1:${await freePort()}`, interceptors: [retry.interceptor] });
  const outcome = connection.workflowService.getSystemInfo({}).then(
    () => 'answered',
    (err: Error) => err.message,
  );
  await new Promise((resolve) => setTimeout(resolve, 30)); // the first try failed; its retry is timed
  await retry.close();
  await connection.close();
  // On the closed channel the retry threw out of the SDK's timer and the call never ended.
  expect(await outcome).toMatch(/UNAVAILABLE/);
}, 15_000);
