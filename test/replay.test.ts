/**
 * Determinism guard: histories recorded from earlier versions of agentSession
 * must replay on the current code (regenerate with DRYDOCK_RECORD_HISTORY=1
 * npx jest test/session.test.ts -t 'happy path' only for a deliberate, patched change).
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Worker } from '@temporalio/worker';

const dir = path.join(__dirname, 'fixtures', 'histories');
const files = readdirSync(dir).filter((f) => f.endsWith('.json'));

test('there is at least one recorded history', () => expect(files.length).toBeGreaterThan(0));

test.each(files)('%s replays without nondeterminism', async (file) => {
  const history = JSON.parse(readFileSync(path.join(dir, file), 'utf8'));
  await Worker.runReplayHistory({ workflowBundle: { codePath: process.env.DRYDOCK_TEST_BUNDLE! } }, history);
});
