/**
 * workers/workflow-bundle.ts: the workers' workflow code is bundled once and kept; a worker
 * started again reads the same file, and one whose SDK plugins differ (OpenTelemetry's adds
 * its workflow interceptors to the bundle) has a bundle of its own.
 */
import { stat } from 'node:fs/promises';
import type { BundlerPlugin } from '@temporalio/worker';
import { workflowBundle } from '../../workers/workflow-bundle';

test('the bundle is made once and kept; other plugins, another bundle', async () => {
  const first = await workflowBundle();
  const written = (await stat(first.codePath)).mtimeMs;
  const again = await workflowBundle();
  expect(again.codePath).toBe(first.codePath);
  expect((await stat(again.codePath)).mtimeMs).toBe(written);

  const marked: BundlerPlugin = {
    name: 'drydock-test-marker',
    configureBundler: (options) => ({ ...options, ignoreModules: [...(options.ignoreModules ?? []), 'marker'] }),
  };
  const withPlugin = await workflowBundle([marked]);
  expect(withPlugin.codePath).not.toBe(first.codePath);
  expect((await stat(withPlugin.codePath)).size).toBeGreaterThan(0);
});
