/**
 * Before each end-to-end file: removes what the files before it left in the
 * run's temp folder (global setup points TMPDIR there). Their workers,
 * sandboxes and servers are stopped by then; a run's disk use stays that of
 * one file, however many files it runs.
 */
import { readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { removeTree } from './leftovers';

beforeAll(() => {
  const tmp = tmpdir();
  // Only the run's own folder (a file run with a TMPDIR of the caller's is left alone).
  if (!process.env.DRYDOCK_TEST_DIR || path.dirname(tmp) !== process.env.DRYDOCK_TEST_DIR) return;
  for (const name of readdirSync(tmp)) removeTree(path.join(tmp, name));
});
