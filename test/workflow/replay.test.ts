/**
 * Determinism guard: the recorded histories in test/fixtures/histories must
 * replay on the current workflow code, bundled here (no server, no Docker).
 * Every branch of the workflow tests (agentSession-wf-*) plus a real happy path
 * and a real model loop. Before the first release they are re-recorded
 * whenever the workflow's commands change:
 *   DRYDOCK_RECORD_HISTORY=1 npx jest test/workflow
 *   DRYDOCK_RECORD_HISTORY=1 npx jest test/e2e/session.test.ts test/e2e/agent.test.ts -t 'happy path|built-in loop on anthropic'
 * After it, a release's histories are kept and never re-recorded (docs/operations.md).
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Worker } from '@temporalio/worker';
import { HISTORIES_DIR } from '../support/histories';
import { quietSdkLogs } from '../support/helpers';
import { workflowBundle as cachedBundle } from '../../workers/workflow-bundle';

const files = readdirSync(HISTORIES_DIR).filter((f) => f.endsWith('.json'));

let workflowBundle: { codePath: string };
beforeAll(async () => {
  quietSdkLogs();
  workflowBundle = await cachedBundle();
});

test('there is at least one recorded history of each workflow test and of the real sessions', () => {
  expect(files).toEqual(expect.arrayContaining(['agentSession-happy.json', 'agentSession-wf-happy.json']));
});

/**
 * The session's workflow id when its history started child sessions: their ids are made from it
 * (`<session>.child-<n>`, workflows/session/children.ts), so the replay must run under the same id.
 */
function sessionIdOf(history: { events?: Record<string, { workflowId?: string } | undefined>[] }): string | undefined {
  for (const event of history.events ?? []) {
    const child = event.startChildWorkflowExecutionInitiatedEventAttributes?.workflowId;
    const parent = child?.match(/^(.*)\.child-\d+$/)?.[1];
    if (parent) return parent;
  }
  return undefined;
}

test.each(files)('%s replays without nondeterminism', async (file) => {
  const history = JSON.parse(readFileSync(path.join(HISTORIES_DIR, file), 'utf8'));
  await Worker.runReplayHistory({ workflowBundle }, history, sessionIdOf(history));
});
