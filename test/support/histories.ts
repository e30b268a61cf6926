/**
 * Workflow histories of the end-to-end tests: each must replay on the current
 * code, and with DRYDOCK_RECORD_HISTORY set it is kept as a fixture that
 * test/workflow/replay.test.ts replays on every later version.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { Worker } from '@temporalio/worker';
import { quietSdkLogs } from './helpers';

export const HISTORIES_DIR = path.join(__dirname, '..', 'fixtures', 'histories');

/** Replays a history (fetched, or parsed from a fixture) on the test run's bundle; throws on nondeterminism. */
export function replayHistory(history: Parameters<typeof Worker.runReplayHistory>[1]): Promise<void> {
  quietSdkLogs();
  return Worker.runReplayHistory({ workflowBundle: { codePath: process.env.DRYDOCK_TEST_BUNDLE! } }, history);
}

type History = Awaited<ReturnType<WorkflowHandle['fetchHistory']>>;

/**
 * With DRYDOCK_RECORD_HISTORY set, writes the session's history (or the one
 * given) to fixtures/histories/agentSession-<name>.json.
 */
export async function recordHistory(source: WorkflowHandle | History, name: string): Promise<void> {
  if (!process.env.DRYDOCK_RECORD_HISTORY) return;
  const history = 'fetchHistory' in source ? await source.fetchHistory() : source;
  await mkdir(HISTORIES_DIR, { recursive: true });
  await writeFile(path.join(HISTORIES_DIR, `agentSession-${name}.json`), historyToJSON(history));
}

/**
 * The history as text with every payload's data decoded (historyToJSON keeps
 * it base64): what a search of the history for a value must read.
 */
export function historyText(history: History): string {
  return historyToJSON(history).replace(
    /"data": "([A-Za-z0-9+/=]*)"/g,
    (_m, encoded: string) => `"data": ${JSON.stringify(Buffer.from(encoded, 'base64').toString('utf8'))}`,
  );
}
