/**
 * test/support/workers.ts: a worker process that exits before it polls fails
 * the wait on it at once, with its log, instead of leaving the test to jest's
 * bare time-out (issue 45: a telemetry test ran out its 180 s saying nothing).
 */
import { startWorkerProcess } from '../support/workers';

test("a worker that exits before it polls fails its readiness with the exit and its log's end", async () => {
  const worker = startWorkerProcess(
    { DRYDOCK_DATA_DIR: '/nonexistent', DRYDOCK_METRICS_PORT: 'not-a-port' },
    { cli: true },
  );
  await expect(worker.ready).rejects.toThrow(/exited with 1 before it polled[\s\S]*DRYDOCK_METRICS_PORT/);
  expect(worker.logTail()).toContain('invalid environment');
});
