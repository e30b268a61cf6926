/**
 * drydock's Prometheus metrics (docs/operations.md lists them with their
 * units). Counters and histograms are recorded where the event happens, in
 * this process; gauges are read when scraped. A worker serves them, with the
 * Temporal SDK runtime's own metrics, on DRYDOCK_METRICS_PORT; `drydock
 * serve` serves the session counts on its /metrics.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Client } from '@temporalio/client';
import type { Pool } from 'pg';
import { OUTCOMES, RUNNING_PHASES, WORKFLOW_TYPE } from '../workflows/api';

/** What a worker process records. */
export const workerMetrics = new Registry();

export const egressRefusals = new Counter({
  name: 'drydock_egress_refusals_total',
  help: 'Connections and requests from sandboxes that the egress proxy refused',
  registers: [workerMetrics],
});

export const approvalWait = new Histogram({
  name: 'drydock_approval_wait_seconds',
  help: "Waiting for review: time a session's changes waited for a decision, over all its approval gates, recorded when it ends (sessions that needed a reviewer's decision)",
  buckets: [60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600],
  registers: [workerMetrics],
});

export const reviewTime = new Histogram({
  name: 'drydock_review_seconds',
  help: 'Review time, measured: what every reviewer of a session spent on its changes (console: visible and in use; CLI: view to decision), recorded when it ends',
  buckets: [15, 30, 60, 120, 300, 600, 1200, 3600],
  registers: [workerMetrics],
});

export const decisionsUnmeasured = new Counter({
  name: 'drydock_decisions_unmeasured_total',
  help: 'Decisions made without a measured review time (a signal from the Temporal UI or CLI, the API without a view), counted when their session ends',
  registers: [workerMetrics],
});

/**
 * The figures over time as counters (docs/pilot.md), recorded when a session
 * ends (its metrics row), when its pull request is merged, and when the
 * escaped-defect sweep finds one. Labels stay few: the repo and the agent
 * configuration, never a person.
 */
export const sessionsEnded = new Counter({
  name: 'drydock_sessions_ended_total',
  help: 'Sessions that ended, by outcome, repo and agent configuration',
  labelNames: ['outcome', 'repo', 'agent'],
  registers: [workerMetrics],
});

export const sandboxSeconds = new Counter({
  name: 'drydock_sandbox_seconds_total',
  help: "Seconds sessions' sandboxes existed (ready to torn down), recorded when a session ends",
  labelNames: ['repo', 'agent'],
  registers: [workerMetrics],
});

export const modelCost = new Counter({
  name: 'drydock_model_cost_usd_total',
  help: "Sessions' model cost in US dollars, recorded when a session ends",
  labelNames: ['repo', 'agent'],
  registers: [workerMetrics],
});

export const activityRetries = new Counter({
  name: 'drydock_activity_retries_total',
  help: "Activity attempts beyond the first, over ended sessions' audit rows",
  labelNames: ['repo'],
  registers: [workerMetrics],
});

export const sessionRefusals = new Counter({
  name: 'drydock_session_refusals_total',
  help: 'Refusals in ended sessions: egress (proxy and model gateway), decisions refused, budgets that stopped the agent',
  labelNames: ['kind'],
  registers: [workerMetrics],
});

export const mergedChanges = new Counter({
  name: 'drydock_merged_changes_total',
  help: "drydock pull requests merged (GitHub's pull_request webhook)",
  labelNames: ['repo'],
  registers: [workerMetrics],
});

export const escapedDefectsFound = new Counter({
  name: 'drydock_escaped_defects_total',
  help: 'Merged drydock changes reverted (revert) or whose lines a fix changed (fix) within the window',
  labelNames: ['kind'],
  registers: [workerMetrics],
});

/** The gauges of one host, read at each scrape: its sandboxes and the age of its newest snapshot per repo. */
export function hostGauges(host: string, read: { sandboxes(): Promise<number>; pool: Pool }): void {
  new Gauge({
    name: 'drydock_sandboxes',
    help: 'Session sandboxes (running or stopped) on this Docker host',
    labelNames: ['host'],
    registers: [workerMetrics],
    async collect() {
      this.set({ host }, await read.sandboxes());
    },
  });
  new Gauge({
    name: 'drydock_snapshot_age_seconds',
    help: "Age of each repository's newest ready snapshot on this host",
    labelNames: ['host', 'repo'],
    registers: [workerMetrics],
    async collect() {
      this.reset();
      const { rows } = await read.pool.query<{ repo: string; age: number }>(
        `select repo, extract(epoch from now() - max(finished_at))::float8 as age
           from snapshot_builds where host = $1 and status = 'ready' group by repo`,
        [host],
      );
      for (const row of rows) this.set({ host, repo: row.repo }, row.age);
    },
  });
}

/**
 * Sessions by phase: running ones by their current phase, closed ones by
 * outcome (as long as Temporal keeps them: its retention period). Counted from
 * Temporal's visibility store at each scrape, one count per phase.
 */
export function sessionGauge(client: Client): Registry {
  const registry = new Registry();
  new Gauge({
    name: 'drydock_sessions',
    help: 'Sessions by phase (running) or outcome (closed, within the namespace retention)',
    labelNames: ['phase'],
    registers: [registry],
    async collect() {
      const phases = [...RUNNING_PHASES, ...OUTCOMES];
      const counts = await Promise.all(
        phases.map((phase) => client.workflow.count(`WorkflowType = '${WORKFLOW_TYPE}' AND DrydockPhase = '${phase}'`)),
      );
      phases.forEach((phase, i) => this.set({ phase }, counts[i]!.count));
    },
  });
  return registry;
}

/**
 * Serves GET /metrics: `registry`, then the text of `more` (the SDK
 * runtime's exporter). Only that path; nothing else is exposed.
 */
export async function serveMetrics(
  registry: Registry,
  port: number,
  host: string,
  more?: () => Promise<string>,
): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || req.url !== '/metrics') return void res.writeHead(404).end();
    Promise.all([registry.metrics(), more?.() ?? ''])
      .then(([own, extra]) => {
        res.writeHead(200, { 'content-type': registry.contentType });
        res.end(own + extra);
      })
      .catch((err: Error) => res.writeHead(500).end(`metrics failed: ${err.message}\n`));
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(port, host, resolve));
  return { server, port: (server.address() as AddressInfo).port };
}
