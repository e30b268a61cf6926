/**
 * platform/heartbeat.ts: every activity heartbeats on a timer while it runs,
 * but a local activity (the session's records, workflows/session/proxies.ts)
 * has no heartbeats to send: its worker holds the workflow's task meanwhile.
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { heartbeating, HEARTBEAT_INTERVAL_MS } from '../../platform/heartbeat';
import { Redactor } from '../../platform/scrub';

/** How many heartbeats an activity that runs for two and a half intervals sends. */
async function heartbeatsOf(isLocal: boolean): Promise<number> {
  const env = new MockActivityEnvironment({ isLocal }, { logger: new DefaultLogger('ERROR') });
  let beats = 0;
  env.on('heartbeat', () => beats++);
  const { slow } = heartbeating(
    { slow: () => new Promise((resolve) => setTimeout(resolve, HEARTBEAT_INTERVAL_MS * 2.5)) },
    new Redactor([]),
  );
  await env.run(slow);
  return beats;
}

test('an activity heartbeats while it runs; a local activity does not', async () => {
  const [activity, local] = await Promise.all([heartbeatsOf(false), heartbeatsOf(true)]);
  expect(activity).toBeGreaterThanOrEqual(1);
  expect(local).toBe(0);
}, 20_000);
