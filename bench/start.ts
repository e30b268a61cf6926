/**
 * bench/start: how fast a session reaches the agent's first command, on the
 * benchmark web app (bench/webapp.ts), median of several runs:
 *   cold      no snapshot: clone + setup (npm ci && npm run build) in the session
 *   warm +N   from the newest snapshot, N commits behind it (0, 10, 100)
 *   floor     `docker run -d --network none <snapshot> sleep infinity`
 * and the ratios warm/cold and warm/floor, as a markdown table. Everything
 * is local: a Temporal dev server, embedded PGlite, a worker, and the npm
 * registry stand-in on loopback, reached through the egress proxy.
 *
 *   npm run bench             (RUNS=5 COLD_RUNS=3 by default)
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, bundleWorkflowCode, DefaultLogger, Runtime } from '@temporalio/worker';
import type { SnapshotBuildResult } from '../activities/snapshot';
import { addRepo } from '../cli/snapshots';
import { loadConfig } from '../lib/config';
import { createLogger } from '../lib/log';
import { snapshotScheduleId } from '../lib/snapshots';
import { ensureSearchAttributes, startDevServer } from '../lib/temporal';
import { ensureBaseImage } from '../sandbox-images/base-image';
import { startNpmRegistry } from '../test/npm-registry';
import { createWorker } from '../workers/worker';
import type { SessionStatus } from '../workflows/api';
import { ensureBenchRepo } from './webapp';

const run = promisify(execFile);
const RUNS = Number(process.env.RUNS ?? 5);
const COLD_RUNS = Number(process.env.COLD_RUNS ?? 3);

const say = (line: string) => process.stderr.write(`==> ${line}\n`);

function freePort(): Promise<number> {
  return import('node:net').then(
    ({ createServer }) =>
      new Promise((resolve) => {
        const s = createServer().listen(0, '127.0.0.1', () => {
          const { port } = s.address() as { port: number };
          s.close(() => resolve(port));
        });
      }),
  );
}

interface Row {
  name: string;
  ms: number[];
  note?: string;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const fmt = (ms: number) => (ms >= 10_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`);

async function main(): Promise<void> {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const repo = await ensureBenchRepo();
  const registry = await startNpmRegistry(repo.tarballs);
  const image = await ensureBaseImage(say);
  const dataDir = await mkdtemp(path.join(tmpdir(), 'drydock-bench-'));
  const address = `127.0.0.1:${await freePort()}`;
  say(`Temporal dev server on ${address}; data in ${dataDir}`);
  const server = await startDevServer({ address, logFile: path.join(dataDir, 'temporal.log') });
  const taskQueue = `bench-${randomBytes(3).toString('hex')}`;
  const config = {
    ...loadConfig({ ...process.env, DATABASE_URL: undefined }),
    TEMPORAL_ADDRESS: address,
    DRYDOCK_DATA_DIR: dataDir,
    DRYDOCK_TASK_QUEUE: taskQueue,
    DRYDOCK_BASE_IMAGE: image,
    LOG_LEVEL: 'warn' as const,
  };
  const clientConnection = await Connection.connect({ address });
  await ensureSearchAttributes(clientConnection, 'default');
  const client = new Client({ connection: clientConnection });
  const connection = await NativeConnection.connect({ address });
  const bundle = await bundleWorkflowCode({
    workflowsPath: require.resolve('../workflows'),
    logger: { trace() {}, debug() {}, info() {}, warn() {}, error: console.error, log() {} },
  });
  const worker = await createWorker({ config, connection, log: createLogger('warn'), workflowBundle: bundle });
  const running = worker.run();
  try {
    const setup = `npm_config_noproxy=none.invalid npm ci --registry ${registry.url} --no-audit --no-fund --loglevel=error && npm run build`;
    await addRepo(client, config, repo.url, { setup, every: '30m', allow: [`127.0.0.1:${registry.port}`] });
    // Cold runs must not race a build their own cold start would request.
    await client.schedule.getHandle(snapshotScheduleId(repo.url)).delete();

    /** Milliseconds from starting the session to its first command running in the sandbox. */
    async function sessionStart(ref?: string): Promise<{ ms: number; status: SessionStatus }> {
      const id = `bench-${randomBytes(4).toString('hex')}`;
      const started = Date.now();
      const handle = await client.workflow.start('agentSession', {
        workflowId: id,
        taskQueue,
        args: [
          {
            repo: { url: repo.url, ...(ref ? { ref } : {}) },
            task: 'bench',
            agent: { steps: [{ run: 'date +%s%3N' }] },
          },
        ],
      });
      const status = (await handle.result()) as SessionStatus;
      const step = status.timeline.find((t) => t.name.startsWith('step 1'));
      const at = Number(step?.outputTail?.trim());
      if (!at) throw new Error(`session ${id} did not run its first command: ${status.error ?? JSON.stringify(step)}`);
      return { ms: at - started, status };
    }

    const rows: Row[] = [];
    const cold: Row = { name: 'cold: clone + setup in the session', ms: [] };
    for (let i = 0; i < COLD_RUNS; i++) {
      const { ms } = await sessionStart();
      say(`cold run ${i + 1}: ${fmt(ms)}`);
      cold.ms.push(ms);
    }
    rows.push(cold);

    say('building the snapshot');
    const built: SnapshotBuildResult = await client.workflow.execute('refreshSnapshot', {
      workflowId: `bench-snapshot-${randomBytes(3).toString('hex')}`,
      taskQueue,
      args: [{ repo: repo.url }],
    });
    say(`snapshot ${built.image}: ${fmt(built.durationMs ?? 0)}, ${Math.round((built.sizeBytes ?? 0) / 1024 ** 2)} MB`);

    const ages: number[] = [];
    for (const drift of [0, 10, 100]) {
      const row: Row = { name: `warm: snapshot, ${drift} new commits`, ms: [] };
      for (let i = 0; i < RUNS; i++) {
        const ref = drift
          ? await driftBranch(repo.work, repo.bare, built.commit, drift, `drift-${drift}-${i}`)
          : undefined;
        const { ms, status } = await sessionStart(ref);
        if (status.snapshot?.behind !== drift)
          throw new Error(`expected ${drift} commits behind, got ${status.snapshot?.behind}`);
        ages.push(status.snapshot.ageMs);
        say(`warm +${drift} run ${i + 1}: ${fmt(ms)}`);
        row.ms.push(ms);
      }
      rows.push(row);
    }

    const floor: Row = { name: `floor: docker run -d --network none <snapshot> sleep`, ms: [] };
    for (let i = 0; i < RUNS; i++) {
      const t = Date.now();
      const { stdout } = await run('docker', ['run', '-d', '--network', 'none', built.image!, 'sleep', 'infinity']);
      floor.ms.push(Date.now() - t);
      await run('docker', ['rm', '-f', stdout.trim()]);
    }
    rows.push(floor);

    const warm0 = median(rows[1].ms);
    const lines = [
      `Benchmark web app: express, vitest, typescript, esbuild (${built.sizeBytes ? Math.round(built.sizeBytes / 1024 ** 2) : '?'} MB snapshot image); setup \`npm ci && npm run build\`; snapshot build ${fmt(built.durationMs ?? 0)}.`,
      '',
      '| start | median | min – max | runs |',
      '| --- | ---: | ---: | ---: |',
      ...rows.map(
        (r) =>
          `| ${r.name} | ${fmt(median(r.ms))} | ${fmt(Math.min(...r.ms))} – ${fmt(Math.max(...r.ms))} | ${r.ms.length} |`,
      ),
      '',
      `| ratio | value | goal |`,
      '| --- | ---: | ---: |',
      `| warm (0 commits) / cold | ${(warm0 / median(cold.ms)).toFixed(3)} | ≤ 0.05 |`,
      `| warm (0 commits) / floor | ${(warm0 / median(floor.ms)).toFixed(2)} | ≤ 1.5 |`,
      `| snapshot age at session start (max) | ${fmt(Math.max(...ages))} | ≤ 30 min (the schedule period) |`,
    ];
    console.log(lines.join('\n'));
  } finally {
    worker.shutdown();
    await running;
    await connection.close();
    await clientConnection.close();
    await registry.close();
    server.kill();
  }
}

/** A branch with `count` small commits on top of the snapshot's commit. */
async function driftBranch(work: string, bare: string, base: string, count: number, branch: string): Promise<string> {
  const g = (args: string[]) => run('git', ['-c', 'user.name=bench', '-c', 'user.email=b@x', ...args], { cwd: work });
  await g(['checkout', '--quiet', '-B', branch, base]);
  for (let i = 0; i < count; i++) {
    await writeFile(path.join(work, 'src', `drift-${i}.ts`), `export const drift${i} = ${i};\n`);
    await g(['add', '.']);
    await g(['commit', '--quiet', '-m', `drift ${i}`]);
  }
  await g(['push', '--quiet', '--force', bare, branch]);
  await g(['checkout', '--quiet', 'main']);
  return branch;
}

main().then(
  () => process.exit(0),
  (err: Error) => {
    console.error(`bench: ${err.stack ?? err.message}`);
    process.exit(1);
  },
);
