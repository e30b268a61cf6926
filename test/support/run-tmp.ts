/**
 * Before each end-to-end file, what the files before it left is removed: the
 * run's temp folder (global setup points TMPDIR there; their workers,
 * sandboxes and servers are stopped by then), and on the run's dev server and
 * PostgreSQL their Schedules, their running workflows and their repo
 * registrations. A run's disk use and its dev server's load stay those of one
 * file, however many files it runs: every worker a test starts schedules a
 * snapshot refresh of every registered repo for its host, so left alone they
 * piled up (316 Schedules by the 20th file, the dev server at half a core and
 * every later file twice as slow). And the process helpers of the files
 * before (platform/processes.ts) are stopped: each file's own copy of the
 * module starts one, which would wait for this jest process to end (about
 * 50 MB each, one per file).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client as PgClient } from 'pg';
import { connectClient } from './helpers';
import { removeTree } from './leftovers';

beforeAll(async () => {
  stopEarlierProcessHelpers();
  // Only the run's own (a file run with a TMPDIR or servers of the caller's is left alone).
  if (!process.env.DRYDOCK_TEST_DIR || path.dirname(tmpdir()) !== process.env.DRYDOCK_TEST_DIR) return;
  for (const name of readdirSync(tmpdir())) removeTree(path.join(tmpdir(), name));
  await forgetEarlierWork(process.env.TEMPORAL_ADDRESS!, process.env.DATABASE_URL!);
}, 120_000);

async function forgetEarlierWork(address: string, databaseUrl: string): Promise<void> {
  const client = await connectClient(address);
  try {
    for await (const { scheduleId } of client.schedule.list()) await client.schedule.getHandle(scheduleId).delete();
    for await (const { workflowId, runId } of client.workflow.list({ query: "ExecutionStatus = 'Running'" })) {
      await client.workflow
        .getHandle(workflowId, runId)
        .terminate('an earlier test file left it running')
        .catch(() => undefined); // ended meanwhile
    }
  } finally {
    await client.connection.close();
  }
  const db = new PgClient({ connectionString: databaseUrl });
  await db.connect();
  try {
    // The table exists once a worker or serve has migrated the database.
    await db.query(
      `do $$ begin if to_regclass('snapshot_repos') is not null then delete from snapshot_repos; end if; end $$`,
    );
  } finally {
    await db.end();
  }
}

/** This process's children running platform/process-helper.mjs: this file's modules have not started theirs yet. */
function stopEarlierProcessHelpers(): void {
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (parent !== process.pid) continue;
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('process-helper.mjs')) process.kill(Number(pid));
    } catch {
      // it ended meanwhile
    }
  }
}
