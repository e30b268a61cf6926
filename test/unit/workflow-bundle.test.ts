/**
 * workers/workflow-bundle.ts: the workers' workflow code is bundled once and kept; a worker
 * started again reads the same file. A traced worker's bundle is kept too, apart from the plain
 * one, and carries the tracing plugin's workflow interceptors.
 */
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { tracing } from '../../workers/telemetry';
import { workflowBundle } from '../../workers/workflow-bundle';

test('the bundle is made once and kept', async () => {
  const first = await workflowBundle();
  const written = (await stat(first.codePath)).mtimeMs;
  const again = await workflowBundle();
  expect(again.codePath).toBe(first.codePath);
  expect((await stat(again.codePath)).mtimeMs).toBe(written);
  expect(path.basename(first.codePath)).toMatch(/^workflows-[0-9a-f]{16}\.js$/);
});

test("a traced worker's bundle is kept beside the plain one, with the tracing interceptors in it", async () => {
  // Nothing is sent: no span is made here, and the collector's address is only configured.
  const traces = tracing({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_SERVICE_NAME: 'bundle-test' })!;
  try {
    const traced = await workflowBundle([traces.plugin]);
    expect(path.basename(traced.codePath)).toMatch(/^workflows\+OpenTelemetryPlugin-[0-9a-f]{16}\.js$/);
    expect(await readFile(traced.codePath, 'utf8')).toContain('interceptors-opentelemetry/lib/workflow-interceptors');
    const plain = await workflowBundle();
    expect(await readFile(plain.codePath, 'utf8')).not.toContain(
      'interceptors-opentelemetry/lib/workflow-interceptors',
    );
    expect((await workflowBundle([traces.plugin])).codePath).toBe(traced.codePath);
  } finally {
    await traces.shutdown();
  }
});
