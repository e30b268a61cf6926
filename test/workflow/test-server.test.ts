/**
 * The time-skipping test server itself: the bug that infra/test-server.patch
 * fixes, driven through the server's API with this test as the worker, so it
 * is placed exactly. A query that reaches a run while its workflow task is
 * under way, when that task continues the run as new, must not cost the task's
 * completion: unpatched, the completion fails ("workflow execution already
 * completed"), the query is never answered, and time stops skipping for good
 * (the workflow tests that waited on a timer after that hung).
 */
import { randomUUID } from 'node:crypto';
import type { WorkflowService } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { startTestServer, stopEnvironment } from './server';

const { CommandType, QueryResultType } = temporal.api.enums.v1;
type Task = temporal.api.workflowservice.v1.IPollWorkflowTaskQueueResponse;

let env: TestWorkflowEnvironment;
beforeAll(async () => {
  env = await startTestServer();
});
afterAll(async () => {
  await stopEnvironment(env);
});

const ANSWER = { metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from('"parked"') };

test('a query during the task that continues as new: the task completes, the query is answered, time skips on', async () => {
  const svc = env.client.workflowService;
  // The query must reach the server while the task is under way; a slower machine gets a longer pause.
  let held = false;
  for (let pauseMs = 200; !held; pauseMs *= 2) {
    if (pauseMs > 10_000) throw new Error('the query never reached the server during the workflow task');
    held = await queryDuringContinueAsNew(svc, pauseMs);
  }
  // Nothing holds time now: a day passes at once (a leaked lock would make it a real day).
  const before = await env.currentTimeMs();
  let timer: NodeJS.Timeout | undefined;
  const stuck = new Promise(
    (_, reject) => (timer = setTimeout(() => reject(new Error('time no longer skips')), 30_000)),
  );
  await Promise.race([env.sleep('1 day'), stuck]).finally(() => clearTimeout(timer));
  expect((await env.currentTimeMs()) - before).toBeGreaterThanOrEqual(24 * 3600_000);
});

/**
 * Starts a workflow, takes its first task, queries the workflow after `pauseMs`
 * and completes the task with continue-as-new; then answers the query and
 * completes the new run. Resolves whether the query was held by the task (the
 * case under test) rather than reaching the new run.
 */
async function queryDuringContinueAsNew(svc: WorkflowService, pauseMs: number): Promise<boolean> {
  const namespace = env.namespace ?? 'default';
  const taskQueue = { name: `test-server-${randomUUID()}` };
  const workflowId = taskQueue.name;
  const workflowType = { name: 'parked' };
  const { runId } = await svc.startWorkflowExecution({
    namespace,
    workflowId,
    workflowType,
    taskQueue,
    requestId: randomUUID(),
  });
  const first = await svc.pollWorkflowTaskQueue({ namespace, taskQueue });
  const query = svc.queryWorkflow({ namespace, execution: { workflowId }, query: { queryType: 'status' } });
  query.catch(() => undefined); // read below; a failed completion must not leave it unhandled
  await new Promise((resolve) => setTimeout(resolve, pauseMs));
  await svc.respondWorkflowTaskCompleted({
    namespace,
    taskToken: first.taskToken,
    commands: [
      {
        commandType: CommandType.COMMAND_TYPE_CONTINUE_AS_NEW_WORKFLOW_EXECUTION,
        continueAsNewWorkflowExecutionCommandAttributes: { workflowType, taskQueue },
      },
    ],
  });
  // Then the query's own task (held by the first run, or buffered by the new one) and the new run's
  // task, in either order; or the new run's task alone, carrying the query (it came after the first run's end).
  let held = false;
  let queryTask = false;
  let newRun: Task | undefined;
  while (!newRun || !(queryTask || Object.keys(newRun.queries ?? {}).length)) {
    const task: Task = await svc.pollWorkflowTaskQueue({ namespace, taskQueue });
    if (task.query) {
      queryTask = true;
      held = task.workflowExecution?.runId === runId;
      await svc.respondQueryTaskCompleted({
        namespace,
        taskToken: task.taskToken,
        completedType: QueryResultType.QUERY_RESULT_TYPE_ANSWERED,
        queryResult: { payloads: [ANSWER] },
      });
    } else {
      newRun = task;
      await completeNewRun(svc, namespace, task);
    }
  }
  const answer = await query;
  expect(Buffer.from(answer.queryResult!.payloads![0].data!).toString()).toBe('"parked"');
  return held;
}

/** Completes the new run, answering the query when it came with this task (it reached the server too late). */
async function completeNewRun(svc: WorkflowService, namespace: string, task: Task): Promise<void> {
  const queryResults = Object.fromEntries(
    Object.keys(task.queries ?? {}).map((id) => [
      id,
      { resultType: QueryResultType.QUERY_RESULT_TYPE_ANSWERED, answer: { payloads: [ANSWER] } },
    ]),
  );
  await svc.respondWorkflowTaskCompleted({
    namespace,
    taskToken: task.taskToken,
    queryResults,
    commands: [
      {
        commandType: CommandType.COMMAND_TYPE_COMPLETE_WORKFLOW_EXECUTION,
        completeWorkflowExecutionCommandAttributes: {},
      },
    ],
  });
}
