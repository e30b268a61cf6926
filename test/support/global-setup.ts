/**
 * Once per test run: the sandbox base image, a Temporal dev server (headless,
 * in memory, on a free port) with drydock's search attributes, and one bundle
 * of the workflow code that every in-process test worker loads.
 */
import { randomBytes } from 'node:crypto';
import { chmod, copyFile, mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { ensureSearchAttributes, startDevServer } from '../../platform/temporal';
import { ensureBaseImage } from '../../sandbox-images/base-image';
import { freePort } from './helpers';
import { own, ownProcess, reapLeftovers, reserveRunId } from './leftovers';
import { PostgresServer } from './postgres';
import { workflowBundle } from '../../workers/workflow-bundle';

export default async function globalSetup(): Promise<void> {
  // What killed runs left behind goes first (their owner process is gone).
  const reaped = await reapLeftovers();
  if (reaped.length) process.stderr.write(`removed what earlier test runs left: ${reaped.join(', ')}\n`);
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-test-'));
  // Set first: everything started from here on is listed in `dir` under this process.
  Object.assign(process.env, {
    DRYDOCK_TEST_OWNER: String(process.pid),
    DRYDOCK_TEST_DIR: dir,
    DRYDOCK_TEST_RUN: reserveRunId(),
  });
  own(dir);
  const image = await ensureBaseImage();
  // A real PostgreSQL server for the whole run (tests of the embedded PGlite path open their own).
  const postgres = new PostgresServer(await mkdtemp(path.join(tmpdir(), 'drydock-pg-')), await freePort());
  await postgres.start();
  const address = `127.0.0.1:${await freePort()}`;
  const server = await startDevServer({ address, logFile: path.join(dir, 'temporal.log') });
  ownProcess(server.pid);
  const connection = await Connection.connect({ address });
  await ensureSearchAttributes(connection, 'default');
  await connection.close();
  const bundle = await workflowBundle();
  await writeFile(path.join(dir, 'audit-key'), randomBytes(32).toString('hex'), { mode: 0o600 });
  const bundleFile = path.join(dir, 'workflow-bundle.js');
  await copyFile(bundle.codePath, bundleFile); // the run's own: a change to workflows/ meanwhile cannot remove it
  Object.assign(process.env, {
    TEMPORAL_ADDRESS: address,
    DRYDOCK_BASE_IMAGE: image,
    DRYDOCK_TEST_BUNDLE: bundleFile,
    DATABASE_URL: postgres.url,
    // One audit key for every worker, server and CLI of the run (each has its own data dir).
    DRYDOCK_AUDIT_KEY_FILE: path.join(dir, 'audit-key'),
    DRYDOCK_TEST_PG_DIR: postgres.dir,
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
    // Fixture repos are file:// URLs nobody registers; tests of the registry turn it off.
    DRYDOCK_DEV_MODE: '1',
    // The console's tests approve as soon as the change is on display; the wait itself: test/unit/policy.test.ts.
    DRYDOCK_APPROVAL_SETTLE: '0s',
  });
  Object.assign(globalThis, { drydockTemporal: server, drydockPostgres: postgres });
  // Last, so the servers above keep the machine's: every temp folder the tests make lives in
  // the run's folder, emptied between files (test/support/run-tmp.ts) and at the end, so a
  // run's disk use does not grow with its length.
  // Open as /tmp is: servers run as their own users (PostgreSQL) and sandboxes as theirs.
  process.env.TMPDIR = path.join(dir, 'tmp');
  await mkdir(process.env.TMPDIR);
  await chmod(dir, 0o755);
  await chmod(process.env.TMPDIR, 0o1777);
}
