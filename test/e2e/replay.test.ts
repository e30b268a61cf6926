/**
 * Determinism guard: recorded histories of agentSession must replay on the
 * current code. Every branch of the workflow tests (agentSession-wf-*) plus a
 * real happy path and a real model loop. Before the first release they are
 * re-recorded whenever the workflow changes:
 *   DRYDOCK_RECORD_HISTORY=1 npx jest test/workflow
 *   DRYDOCK_RECORD_HISTORY=1 npx jest test/e2e/session.test.ts test/e2e/agent.test.ts -t 'happy path|openai'
 * After it, a release's histories are kept and never re-recorded (docs/operations.md).
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { HISTORIES_DIR, replayHistory } from '../support/histories';

const files = readdirSync(HISTORIES_DIR).filter((f) => f.endsWith('.json'));

test('there is at least one recorded history', () => expect(files.length).toBeGreaterThan(0));

test.each(files)('%s replays without nondeterminism', async (file) => {
  await replayHistory(JSON.parse(readFileSync(path.join(HISTORIES_DIR, file), 'utf8')));
});
