/**
 * workers/workflow-bundle.ts: the workers' workflow code is bundled once and kept; a worker
 * started again reads the same file.
 */
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { workflowBundle } from '../../workers/workflow-bundle';

test('the bundle is made once and kept', async () => {
  const first = await workflowBundle();
  const written = (await stat(first.codePath)).mtimeMs;
  const again = await workflowBundle();
  expect(again.codePath).toBe(first.codePath);
  expect((await stat(again.codePath)).mtimeMs).toBe(written);
  expect(path.basename(first.codePath)).toMatch(/^workflows-[0-9a-f]{16}\.js$/);
});
