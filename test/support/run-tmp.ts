/**
 * Before each end-to-end file, what the files before it left is removed: the
 * run's temp folder (global setup points TMPDIR there; their workers,
 * sandboxes and servers are stopped by then), and on the run's dev server and
 * PostgreSQL their Schedules, their running workflows and their repo
 * registrations. A run's disk use and its dev server's load stay those of one
 * file, however many files it runs: every worker a test starts schedules a
 * snapshot refresh of every registered repo for its host, so left alone they
 * piled up (316 Schedules by the 20th file, the dev server at half a core and
 * every later file twice as slow).
 */
import { readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client as PgClient } from 'pg';
import { connectClient } from './helpers';
import { removeTree } from './leftovers';

beforeAll(async () => {
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
