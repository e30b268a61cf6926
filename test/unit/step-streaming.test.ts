/**
 * While a step runs, runStep copies its output out of the sandbox (an exec
 * each time) and syncs its services' logs (the engine's container list each
 * time). Both are the engine's work per running step, so they are done less
 * often the longer a step runs, and a sandbox without services is asked
 * about them once (sandbox/activities/steps.ts streamOutput).
 */
import { DockerProvider } from '../../sandbox';
import { syncServiceLogs } from '../../sandbox/activities/services';
import { streamDelayMs } from '../../sandbox/activities/steps';

test('the first copy comes 2 s into a step, then every 2 s more up to every 8 s', () => {
  expect([0, 1, 2, 3, 4, 50].map(streamDelayMs)).toEqual([2_000, 4_000, 6_000, 8_000, 8_000, 8_000]);
});

test('a 60 s step is copied out 8 times (at 2, 6, 12, 20 … 52 s), not 29 (every 2 s)', () => {
  let copies = 0;
  for (let at = streamDelayMs(0); at < 60_000; at += streamDelayMs(++copies));
  expect(copies).toBe(8);
});

test("a sandbox without services says so (0), and the step's later syncs are skipped on that word", async () => {
  const sandboxes = new DockerProvider();
  expect(await syncServiceLogs({ sandboxes, egressRoot: '/nonexistent' }, 'drydock-no-such-sandbox')).toBe(0);
});
