/**
 * Determinism guard: histories recorded from earlier versions of agentSession
 * must replay on the current code (regenerate with DRYDOCK_RECORD_HISTORY=1
 * npx jest test/session.test.ts -t 'happy path' only for a deliberate, patched change).
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { HISTORIES_DIR, replayHistory } from './histories';

const files = readdirSync(HISTORIES_DIR).filter((f) => f.endsWith('.json'));

test('there is at least one recorded history', () => expect(files.length).toBeGreaterThan(0));

test.each(files)('%s replays without nondeterminism', async (file) => {
  await replayHistory(JSON.parse(readFileSync(path.join(HISTORIES_DIR, file), 'utf8')));
});
