/**
 * bench/pool: claiming a warm-pool sandbox against the `docker run` floor, on
 * the benchmark web app (bench/webapp.ts), median of several runs:
 *   provision (snapshot)   the provisionSandbox activity of a warm start, no pool
 *   provision (warm pool)  the same activity when it claims a pooled sandbox
 *                          (claim, catch-up at 0 commits, setup check)
 *   start (both ways)      the whole start, to the first command (as bench/start)
 *   floor                  `docker run -d --network none <snapshot> sleep infinity`
 * Activity times come from the session's Temporal history (scheduled →
 * completed). Each pooled run waits for the background refill first.
 *
 *   npx tsx bench/pool.ts     (RUNS=5 by default)
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { promisify } from 'node:util';
import type { SnapshotBuildResult } from '../sandbox/activities/snapshot-build';
import { addRepo } from '../cli/snapshots';
import { POOL_LABEL } from '../sandbox/pool-registry';
import { DockerProvider } from '../sandbox/docker/provider';
import { startNpmRegistry } from '../test/support/npm-registry';
import type { SessionStatus } from '../workflows/api';
import { atExit, benchMain, startStack, type BenchStack } from './stack';
import { fmt, median, ratioTable, runsFromEnv, say, timingTable, type Row } from './table';
import { ensureBenchRepo } from './webapp';

const run = promisify(execFile);
const RUNS = runsFromEnv(5);

/**
 * A session's provisionSandbox activity (ms), its whole start (start → its first command
 * runs, as bench/start measures it), and whether it claimed a pooled sandbox.
 */
async function provisionMs(stack: BenchStack, url: string): Promise<{ ms: number; startMs: number; pooled: boolean }> {
  const id = `bench-pool-${randomBytes(4).toString('hex')}`;
  const started = Date.now();
  const handle = await stack.client.workflow.start('agentSession', {
    workflowId: id,
    taskQueue: stack.taskQueue,
    args: [{ repo: { url }, task: 'bench', agent: { steps: [{ run: 'date +%s%3N' }] } }],
  });
  const status = (await handle.result()) as SessionStatus;
  if (status.phase !== 'completed') throw new Error(`session ${id}: ${status.error}`);
  const firstCommand = Number(status.timeline.find((t) => t.name.startsWith('step 1'))?.outputTail?.trim());
  const events = (await handle.fetchHistory()).events ?? [];
  const scheduled = events.find(
    (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'provisionSandbox',
  )!;
  const completed = events.find(
    (e) => Number(e.activityTaskCompletedEventAttributes?.scheduledEventId) === Number(scheduled.eventId),
  )!;
  const ms = (t: typeof scheduled) => Number(t.eventTime!.seconds) * 1000 + Math.round(t.eventTime!.nanos! / 1e6);
  return {
    ms: ms(completed) - ms(scheduled),
    startMs: firstCommand - started,
    pooled: status.sandbox!.name.startsWith('drydock-pool-'),
  };
}

/** Waits until `n` pool containers of the repo are up (claimed ones are gone with their session). */
async function poolFilled(url: string, n: number): Promise<void> {
  for (let i = 0; i < 600; i++) {
    const { stdout } = await run('docker', ['ps', '-q', '--filter', `label=${POOL_LABEL}=${url}`]);
    if (stdout.trim().split('\n').filter(Boolean).length >= n) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('the pool was not refilled within a minute');
}

async function main(): Promise<string> {
  const repo = await ensureBenchRepo();
  const registry = await startNpmRegistry(repo.tarballs);
  atExit(() => registry.close());
  const stack = await startStack();
  const setup = `npm_config_noproxy=none.invalid npm ci --registry ${registry.url} --no-audit --no-fund --loglevel=error && npm run build`;
  const register = (pool: string) =>
    addRepo(stack.client, stack.config, repo.url, { setup, every: '30m', allow: [`127.0.0.1:${registry.port}`], pool });
  const build = async (): Promise<SnapshotBuildResult> => {
    const built: SnapshotBuildResult = await stack.client.workflow.execute('refreshSnapshot', {
      workflowId: `bench-snapshot-${randomBytes(3).toString('hex')}`,
      taskQueue: stack.taskQueue,
      args: [{ repo: repo.url }],
    });
    atExit(() => run('docker', ['rmi', '-f', built.image!]));
    return built;
  };

  await register('0');
  say('building the snapshot (no pool)');
  const first = await build();
  const plain: Row = { name: 'provisionSandbox: from the snapshot (no pool)', ms: [] };
  const plainStart: Row = { name: 'session start → first command: from the snapshot (no pool)', ms: [] };
  for (let i = 0; i < RUNS; i++) {
    const r = await provisionMs(stack, repo.url);
    plain.ms.push(r.ms);
    plainStart.ms.push(r.startMs);
  }

  await register('1');
  // At exit the idle pool sandbox goes with its storage (atExit runs last-in first: before the stack stops).
  const sandboxes = new DockerProvider(undefined, path.join(stack.config.DRYDOCK_DATA_DIR, 'sandboxes'));
  atExit(async () => {
    const { stdout } = await run('docker', ['ps', '-aq', '--filter', `label=${POOL_LABEL}=${repo.url}`]);
    for (const id of stdout.split('\n').filter(Boolean)) await sandboxes.destroy(id);
  });
  say('building again with a pool of 1 (the build fills it)');
  await build();
  const pooled: Row = { name: 'provisionSandbox: claims a warm-pool sandbox', ms: [] };
  const pooledStart: Row = { name: 'session start → first command: claims a warm-pool sandbox', ms: [] };
  for (let i = 0; i < RUNS; i++) {
    await poolFilled(repo.url, 1);
    const r = await provisionMs(stack, repo.url);
    if (!r.pooled) throw new Error('the session did not claim the pooled sandbox');
    say(`pooled run ${i + 1}: ${fmt(r.ms)}, start ${fmt(r.startMs)}`);
    pooled.ms.push(r.ms);
    pooledStart.ms.push(r.startMs);
  }

  const floor: Row = { name: 'floor: docker run -d --network none <snapshot> sleep', ms: [] };
  for (let i = 0; i < RUNS; i++) {
    const t = Date.now();
    const { stdout } = await run('docker', ['run', '-d', '--network', 'none', first.image!, 'sleep', 'infinity']);
    floor.ms.push(Date.now() - t);
    await run('docker', ['rm', '-f', stdout.trim()]);
  }
  return [
    timingTable([plain, pooled, plainStart, pooledStart, floor], 'provisioning'),
    '',
    ratioTable([
      { name: 'warm-pool claim / floor (docker run)', value: median(pooled.ms) / median(floor.ms), goal: { max: 0.5 } },
      { name: 'warm-pool claim / snapshot provision', value: median(pooled.ms) / median(plain.ms) },
      {
        name: 'warm start (0 commits) from the warm pool / floor (docker run)',
        value: median(pooledStart.ms) / median(floor.ms),
        goal: { max: 1.5 },
      },
      // Issue 51's moonshot (goal 6): Daytona's time to interactive is 110 ms.
      { name: 'pooled start → first command (ms)', value: median(pooledStart.ms), goal: { max: 100 }, digits: 0 },
    ]),
  ].join('\n');
}

benchMain('bench/pool', main);
