/**
 * Telemetry as an operator's collectors see it: a `drydock worker` process
 * with DRYDOCK_METRICS_PORT and OTEL_EXPORTER_OTLP_ENDPOINT runs a session;
 * Prometheus-style scrapes of the worker and of `drydock serve`, and the
 * OTLP/HTTP trace export received by a local collector.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadConfig } from '../../platform/config';
import { createLogger } from '../../platform/log';
import { startServer } from '../../workers/serve';
import { decide } from '../../workflows/api';
import {
  connectClient,
  freePort,
  makeFixtureRepo,
  newSessionId,
  pollUntil,
  scriptedSession,
  startSession,
  waitForStatus,
} from '../support/helpers';
import { testTimeLeft, watched } from '../support/waits';
import { newQueue, startWorkerProcess, workerEnv, type WorkerProcess } from '../support/workers';

jest.setTimeout(180_000);

/** A collector's OTLP/HTTP traces endpoint: keeps the names of the spans it receives (JSON encoding). */
async function startCollector(): Promise<{ server: Server; url: string; spans: string[] }> {
  const spans: string[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      if (req.url === '/v1/traces') {
        for (const rs of JSON.parse(body).resourceSpans ?? [])
          for (const ss of rs.scopeSpans ?? []) for (const s of ss.spans ?? []) spans.push(s.name);
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans };
}

async function scrape(url: string, token?: string): Promise<string> {
  const headers = token ? { authorization: `Bearer ${token}` } : undefined;
  const res = await fetch(url, { headers, signal: AbortSignal.timeout(15_000) });
  expect(res.status).toBe(200);
  return res.text();
}

test('a worker exports traces and metrics; serve counts sessions by phase', async () => {
  const collector = await startCollector();
  const metricsPort = await freePort();
  const env = await workerEnv(newQueue('otel'), {
    DRYDOCK_METRICS_PORT: String(metricsPort),
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    OTEL_BSP_SCHEDULE_DELAY: '200',
  });
  const token = randomBytes(16).toString('hex');
  const client = await connectClient();
  const config = { ...loadConfig(), ...env, DRYDOCK_HTTP_PORT: 0, DRYDOCK_API_TOKENS: `ops=${token}` };
  const serve = await startServer({ config, client, log: createLogger('silent') });
  const left = testTimeLeft(); // each wait below explains itself before jest's bare time-out
  let worker: WorkerProcess | undefined;
  try {
    worker = startWorkerProcess(env, { cli: true });
    await worker.ready;
    const repo = await makeFixtureRepo();
    const id = newSessionId('otel');
    const handle = watched(
      await startSession(
        { client, config: env },
        id,
        scriptedSession(repo.url, 'trace me', 'sleep 4; echo traced >> README.md'),
      ),
    );
    await waitForStatus(handle, (s) => s.timeline.some((t) => t.name.startsWith('step 1')), left());
    const during = await scrape(`http://127.0.0.1:${metricsPort}/metrics`);
    expect(during).toContain(`drydock_sandboxes{host="${env.DRYDOCK_HOST_ID}"} 1`);
    // The SDK runtime's own metrics come through the same endpoint.
    expect(during).toMatch(/temporal_worker_task_slots_available\{[^}]*\} \d+/);
    expect(during).toMatch(/temporal_workflow_task_schedule_to_start_latency_seconds_bucket/);
    expect(during).toContain('drydock_egress_refusals_total 0');
    await waitForStatus(handle, (s) => s.phase === 'awaiting_approval', left());
    // Serve counts sessions from visibility, which lags a phase's change: polled.
    const servedUntil = (counted: RegExp) =>
      pollUntil(
        () => scrape(`${serve.url}/metrics`, token),
        (m) => counted.test(m),
        `${counted}`,
        Math.min(30_000, left()),
      );
    await servedUntil(/drydock_sessions\{phase="awaiting_approval"\} [1-9]/);
    expect((await fetch(`${serve.url}/metrics`)).status).toBe(401);
    await handle.executeUpdate(decide, { args: [{ decision: 'reject', action: 'push', by: 'ops' }] });
    await handle.result();

    const after = await scrape(`http://127.0.0.1:${metricsPort}/metrics`);
    expect(after).toContain(`drydock_sandboxes{host="${env.DRYDOCK_HOST_ID}"} 0`);
    await servedUntil(/drydock_sessions\{phase="rejected"\} [1-9]/);
    expect(after).toMatch(/drydock_approval_wait_seconds_count [1-9]/);

    // Workflow, activity and client spans reached the collector.
    for (let i = 0; i < 50 && !collector.spans.includes('RunWorkflow:agentSession'); i++) {
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(collector.spans).toEqual(
      expect.arrayContaining([
        'RunWorkflow:agentSession',
        'StartActivity:provisionSandbox',
        'RunActivity:provisionSandbox',
      ]),
    );
  } catch (err) {
    // What the worker did is half of why a wait ran out.
    if (err instanceof Error && worker) err.message += `\nthe worker's log's end:\n${worker.logTail()}`;
    throw err;
  } finally {
    await worker?.kill();
    await serve.close();
    await client.connection.close();
    collector.server.close();
  }
});
