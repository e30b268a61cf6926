/**
 * bench/services: a session's start with a PostgreSQL service (setup's
 * migrated data in its snapshot) against `docker run` of the same two
 * containers, median of several runs:
 *   start (snapshot)     session start → its first command, from a warm
 *                        snapshot: the sandbox, the service from setup's
 *                        data (copy-on-write), healthy (pg_isready over TCP)
 *   start (warm pool)    the same when the session claims a pooled sandbox,
 *                        whose service already runs
 *   floor                `docker run -d --network none <snapshot> sleep` and
 *                        `docker run -d --network container:<it> <data image>`
 *                        (PostgreSQL on the migrated data), until pg_isready
 *                        answers, polled as drydock polls it
 * The goals (issue 51's goal 2): ≤ 1.2 × the floor from the snapshot, ≤ 0.5 × from the pool.
 *
 *   npx tsx bench/services.ts     (RUNS=5 by default)
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { promisify } from 'node:util';
import type { SnapshotBuildResult } from '../sandbox/activities/snapshot-build';
import { addRepo } from '../cli/snapshots';
import { POOL_LABEL } from '../sandbox/pool-registry';
import { DockerProvider } from '../sandbox/docker/provider';
import { ensureServiceImage } from '../sandbox-images/service-images';
import { makeFixtureRepo } from '../test/support/helpers';
import { configServices, PG_CLIENT, REDIS_CLIENT } from '../test/support/service-clients';
import type { SessionStatus } from '../workflows/api';
import { atExit, benchMain, startStack, type BenchStack } from './stack';
import { fmt, median, ratioTable, runsFromEnv, say, timingTable, type Row } from './table';

const run = promisify(execFile);
const RUNS = runsFromEnv(5);

/** A session's start → its first command (ms), and whether it claimed a pooled sandbox. */
async function startMs(stack: BenchStack, url: string): Promise<{ ms: number; pooled: boolean }> {
  const id = `bench-svc-${randomBytes(4).toString('hex')}`;
  const started = Date.now();
  const handle = await stack.client.workflow.start('agentSession', {
    workflowId: id,
    taskQueue: stack.taskQueue,
    args: [{ repo: { url }, task: 'bench', agent: { steps: [{ run: 'date +%s%3N' }] } }],
  });
  const status = (await handle.result()) as SessionStatus;
  if (status.phase !== 'completed') throw new Error(`session ${id}: ${status.error}`);
  const first = Number(status.timeline.find((t) => t.name.startsWith('step 1'))?.outputTail?.trim());
  const provision = status.timeline.find((t) => t.name.startsWith('provision'));
  say(`provision ${provision?.durationMs} ms`);
  return { ms: first - started, pooled: status.sandbox!.name.startsWith('drydock-pool-') };
}

/** The floor: the same two containers with `docker run`, until PostgreSQL answers over TCP. */
async function floorMs(snapshot: string, dataImage: string): Promise<number> {
  const t = Date.now();
  const sandbox = (
    await run('docker', ['run', '-d', '--network', 'none', snapshot, 'sleep', 'infinity'])
  ).stdout.trim();
  const pg = (
    await run('docker', [
      'run',
      '-d',
      '--network',
      `container:${sandbox}`,
      '-e',
      'POSTGRES_HOST_AUTH_METHOD=trust',
      '-e',
      'PGDATA=/drydock-data/0/data',
      dataImage,
    ])
  ).stdout.trim();
  try {
    for (;;) {
      const ok = await run('docker', ['exec', pg, 'pg_isready', '-q', '-h', '127.0.0.1']).then(
        () => true,
        () => false,
      );
      if (ok) return Date.now() - t;
      if (Date.now() - t > 60_000) throw new Error('the floor PostgreSQL did not answer within a minute');
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    await run('docker', ['rm', '-f', '-v', pg, sandbox]);
  }
}

/** Waits until the pool holds a sandbox whose PostgreSQL is healthy (its row is written after that). */
async function poolFilled(url: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    const { stdout } = await run('docker', ['ps', '--filter', `label=${POOL_LABEL}=${url}`, '--format', '{{.Names}}']);
    for (const name of stdout.split('\n').filter((n) => n && !n.endsWith('-svc-db'))) {
      const health = await run('docker', ['inspect', '-f', '{{.State.Health.Status}}', `${name}-svc-db`]).catch(() => ({
        stdout: '',
      }));
      // Healthy, and its row written just after (the sandbox is only claimable then).
      if (health.stdout.trim() === 'healthy') return void (await new Promise((r) => setTimeout(r, 500)));
    }

    await new Promise((r) => setTimeout(r, 100));
  }
  const { stdout } = await run('docker', ['ps', '-a', '--format', '{{.Names}} {{.Status}}']);
  throw new Error(`the pool was not refilled within a minute; containers:\n${stdout}`);
}

async function main(): Promise<string> {
  const images = { postgres: await ensureServiceImage('postgres') };
  const repo = await makeFixtureRepo({
    'pgq.js': PG_CLIENT,
    'redisq.js': REDIS_CLIENT,
    // PostgreSQL alone: the floor is two containers.
    '.drydock/config.yaml': configServices({ postgres: images.postgres }),
  });
  const stack = await startStack();
  const register = (pool: string) => addRepo(stack.client, stack.config, repo.url, { every: '1h', pool });
  const build = async (): Promise<SnapshotBuildResult> => {
    const built: SnapshotBuildResult = await stack.client.workflow.execute('refreshSnapshot', {
      workflowId: `bench-snapshot-${randomBytes(3).toString('hex')}`,
      taskQueue: stack.taskQueue,
      args: [{ repo: repo.url }],
    });
    if (built.status !== 'ready') throw new Error(`snapshot build failed: ${built.error}`);
    const labels = (await new DockerProvider().image(built.image!))!.labels;
    const data = (JSON.parse(labels['drydock.snapshot.services']) as { dataImage: string }[])[0].dataImage;
    atExit(() => run('docker', ['rmi', '-f', built.image!, data]));
    return { ...built, removed: [data] };
  };

  await register('0');
  say('building the snapshot: PostgreSQL 17 started, migrated by setup, its data captured');
  const first = await build();
  const plain: Row = { name: 'session start → first command: from the snapshot (no pool)', ms: [] };
  for (let i = 0; i < RUNS; i++) {
    plain.ms.push((await startMs(stack, repo.url)).ms);
    say(`run ${i + 1}: start ${fmt(plain.ms.at(-1)!)}`);
  }

  await register('1');
  const sandboxes = new DockerProvider(undefined, path.join(stack.config.DRYDOCK_DATA_DIR, 'sandboxes'));
  atExit(async () => {
    const { stdout } = await run('docker', ['ps', '-aq', '--filter', `label=${POOL_LABEL}=${repo.url}`]);
    for (const id of stdout.split('\n').filter(Boolean)) await sandboxes.destroy(id);
  });
  say('building again with a pool of 1 (the build fills it, its PostgreSQL running)');
  const second = await build();
  const pooled: Row = { name: 'session start → first command: claims a warm-pool sandbox', ms: [] };
  for (let i = 0; i < RUNS; i++) {
    await poolFilled(repo.url);
    const r = await startMs(stack, repo.url);
    if (!r.pooled) throw new Error('the session did not claim the pooled sandbox');
    say(`pooled run ${i + 1}: start ${fmt(r.ms)}`);
    pooled.ms.push(r.ms);
  }

  const floor: Row = { name: 'floor: docker run of the sandbox and of PostgreSQL on the data, until ready', ms: [] };
  for (let i = 0; i < RUNS; i++) floor.ms.push(await floorMs(second.image!, second.removed[0]));
  void first;
  return [
    timingTable([plain, pooled, floor], 'start with PostgreSQL'),
    '',
    ratioTable([
      {
        name: 'start with PostgreSQL from the snapshot / floor',
        value: median(plain.ms) / median(floor.ms),
        goal: { max: 1.2 },
      },
      {
        name: 'start with PostgreSQL from the warm pool / floor',
        value: median(pooled.ms) / median(floor.ms),
        goal: { max: 0.5 },
      },
    ]),
  ].join('\n');
}

benchMain('bench/services', main);
