/**
 * bench/round-trip: what one activity costs in Temporal alone, on each server
 * drydock runs on and with each dynamic configuration:
 *   - the CLI's dev server (SQLite in memory, one history shard) and the
 *     server on PostgreSQL of infra/temporal-pg.sh (four shards; when
 *     PostgreSQL is installed), each with the server's defaults and with
 *     drydock's settings (infra/compose/dynamicconfig/drydock.yaml);
 *   - an empty activity round trip (per call, RT_N in a row): on the
 *     workflow's own task queue (a session's provisioning, settings and audit
 *     trail), and on another queue (a session's activities on its host);
 *   - a workflow with no activity, start to result.
 * No drydock worker and no Docker: a worker of the bench workflows only
 * (bench/workflows), with a no-op activity on both queues.
 *
 *   npx tsx bench/round-trip.ts      RUNS=5, RT_N=50
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { startDevServer } from '../platform/temporal';
import { startTemporalPg } from '../test/support/temporal-pg';
import { atExit, benchMain, freePort, tempDir } from './stack';
import { fmt, markdownTable, median, runsFromEnv, say, spread } from './table';
import type { BenchActivities } from './workflows';

const RUNS = runsFromEnv(5);
const RT_N = Number(process.env.RT_N ?? 50);

interface Server {
  name: string;
  tuned: boolean;
  start(): Promise<{ address: string; stop(): Promise<void> }>;
}

async function devServer(tuned: boolean) {
  const dir = await tempDir('rt-dev');
  const address = `127.0.0.1:${await freePort()}`;
  const child = await startDevServer({ address, tuned, logFile: path.join(dir, 'temporal.log') });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  return {
    address,
    stop: async () => {
      child.kill('SIGTERM');
      await exited;
    },
  };
}

async function pgServer(tuned: boolean) {
  const server = await startTemporalPg(await tempDir('rt-pg'), { tuned });
  return { address: server.address, stop: () => server.stop() };
}

const SERVERS: Server[] = [
  { name: 'dev server', tuned: false, start: () => devServer(false) },
  { name: 'dev server', tuned: true, start: () => devServer(true) },
  ...(existsSync('/usr/lib/postgresql')
    ? [
        { name: 'PostgreSQL', tuned: false, start: () => pgServer(false) },
        { name: 'PostgreSQL', tuned: true, start: () => pgServer(true) },
      ]
    : []),
];

interface Measured {
  ownQueue: number[];
  otherQueue: number[];
  empty: number[];
}

/** RUNS × (a workflow with no activity, RT_N activities on its queue, RT_N on another). */
async function measure(address: string): Promise<Measured> {
  const connection = await NativeConnection.connect({ address });
  const queue = `rt-${randomBytes(3).toString('hex')}`;
  const activities: BenchActivities = { noop: async () => undefined };
  const workflowsPath = require.resolve('./workflows');
  const quiet = { trace() {}, debug() {}, info() {}, warn() {}, error: console.error, log() {} };
  const own = await Worker.create({
    connection,
    taskQueue: queue,
    workflowBundle: await bundleWorkflowCode({ workflowsPath, logger: quiet }),
    activities: { ...activities },
  });
  const other = await Worker.create({ connection, taskQueue: `${queue}-other`, activities: { ...activities } });
  const running = [own.run(), other.run()];
  const clientConnection = await Connection.connect({ address });
  try {
    const client = new Client({ connection: clientConnection });
    const workflow = (n: number, taskQueue?: string) =>
      client.workflow.execute('roundTrips', {
        workflowId: `${queue}-${randomBytes(4).toString('hex')}`,
        taskQueue: queue,
        args: taskQueue ? [n, taskQueue] : [n],
      });
    const timed = async (fn: () => Promise<unknown>) => {
      const t = performance.now();
      await fn();
      return performance.now() - t;
    };
    await workflow(5); // warm-up
    await workflow(5, `${queue}-other`);
    const m: Measured = { ownQueue: [], otherQueue: [], empty: [] };
    for (let i = 0; i < RUNS; i++) {
      const empty = await timed(() => workflow(0));
      m.empty.push(empty);
      m.ownQueue.push(((await timed(() => workflow(RT_N))) - empty) / RT_N);
      m.otherQueue.push(((await timed(() => workflow(RT_N, `${queue}-other`))) - empty) / RT_N);
    }
    return m;
  } finally {
    await clientConnection.close();
    own.shutdown();
    other.shutdown();
    await Promise.all(running);
    await connection.close();
  }
}

async function main(): Promise<string> {
  Runtime.install({ logger: new DefaultLogger('WARN'), shutdownSignals: [] });
  const rows: string[][] = [];
  for (const server of SERVERS) {
    const label = `${server.name}, ${server.tuned ? "drydock's settings" : "the server's defaults"}`;
    say(`${label}: starting`);
    const { address, stop } = await server.start();
    atExit(stop);
    const m = await measure(address);
    await stop();
    say(`${label}: round trip ${fmt(median(m.ownQueue))} (own queue), ${fmt(median(m.otherQueue))} (other queue)`);
    rows.push(
      [
        label,
        `activity on the workflow's queue (per call, ${RT_N} in a row)`,
        fmt(median(m.ownQueue)),
        spread(m.ownQueue),
      ],
      [
        label,
        `activity on another queue (per call, ${RT_N} in a row)`,
        fmt(median(m.otherQueue)),
        spread(m.otherQueue),
      ],
      [label, 'workflow with no activity (start → result)', fmt(median(m.empty)), spread(m.empty)],
    );
  }
  return [
    `${RUNS} runs each. The dev server: \`temporal server start-dev\` (SQLite in memory, 1 history shard); PostgreSQL: infra/temporal-pg.sh (4 shards, fsync off). drydock's settings: infra/compose/dynamicconfig/drydock.yaml (eager activity dispatch, transfer queue read at up to 200 times a second per shard).`,
    '',
    markdownTable(['server', 'round trip', 'median', 'min – max'], rows, [2, 3]),
  ].join('\n');
}

benchMain('bench/round-trip', main);
