/**
 * `drydock worker` for fault drills: the same worker and activities, loading
 * the test run's workflow bundle (quicker to start), plus one hook. With
 * DRYDOCK_TEST_HOLD_AFTER=<activity type>, that activity does its work and
 * then, instead of reporting back, writes "holding after <type> <JSON of the
 * call: workflowId, runId, activityId, attempt>" to stderr and waits: the test
 * kills the worker at that exact point (the work is done, Temporal has not
 * heard of it), and a new worker must not do it twice. `<type>:<field>` holds
 * only after a call whose result has that field truthy (e.g.
 * `modelCall:compacted`); `<type>@<n>` only after the n-th call of the type.
 * With DRYDOCK_TEST_HOLD_RUNNER=<point>, each runStep's drydock-run gets that
 * variable and holds at that point in the sandbox (see its header): inside
 * the activity, where this hook cannot reach.
 */
import { readFileSync } from 'node:fs';
import type { ActivityExecuteInput } from '@temporalio/worker';
import type { StepInput } from '../../sandbox/contract';
import { loadConfig } from '../../platform/config';
import { connectWorker } from '../../platform/temporal-connection';
import { createLogger } from '../../platform/log';
import { createWorker, drainOnSignals, logUnhandledRejections } from '../../workers/worker';
import { installTemporalRuntime } from '../../workers/telemetry';

async function main(): Promise<void> {
  const config = loadConfig();
  const log = createLogger(config.LOG_LEVEL);
  const sdkMetricsUrl = await installTemporalRuntime(log, config);
  logUnhandledRejections(log);
  const [hold, nth] = (process.env.DRYDOCK_TEST_HOLD_AFTER ?? '').split('@');
  const [holdAfter, holdField] = hold.split(':');
  let calls = 0;
  const holdRunner = process.env.DRYDOCK_TEST_HOLD_RUNNER;
  const connection = await connectWorker(config);
  const worker = await createWorker({
    config,
    connection,
    log,
    sdkMetricsUrl,
    workflowBundle: { code: readFileSync(process.env.DRYDOCK_TEST_BUNDLE!, 'utf8') },
    activityInterceptors: [
      (ctx) => ({
        inbound: {
          async execute(input, next) {
            const result = await next(holdRunner ? holdingRunner(ctx.info.activityType, input, holdRunner) : input);
            const field = holdField ? (result as Record<string, unknown> | undefined)?.[holdField] : true;
            if (ctx.info.activityType === holdAfter && field && ++calls >= Number(nth ?? 1)) {
              const { workflowExecution, activityId, attempt } = ctx.info;
              const call = {
                workflowId: workflowExecution?.workflowId,
                runId: workflowExecution?.runId,
                activityId,
                attempt,
              };
              process.stderr.write(`holding after ${holdAfter} ${JSON.stringify(call)}\n`);
              await new Promise(() => undefined);
            }
            return result;
          },
        },
      }),
    ],
  });
  drainOnSignals(worker, config, log);
  process.stderr.write('worker polling\n');
  await worker.run();
  await connection.close();
}

/** A runStep call whose step's environment tells drydock-run to hold at `point`; any other call as it is. */
function holdingRunner(type: string, input: ActivityExecuteInput, point: string): ActivityExecuteInput {
  if (type !== 'runStep') return input;
  const step = input.args[0] as StepInput;
  return { ...input, args: [{ ...step, env: { ...step.env, DRYDOCK_TEST_HOLD_RUNNER: point } }] };
}

main().catch((err: unknown) => {
  process.stderr.write(`${String(err)}\n`);
  process.exit(1);
});
