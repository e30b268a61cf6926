/** The end-to-end project's global teardown: stops what global-setup.ts started and checks nothing was left. */
import type { ChildProcess } from 'node:child_process';
import path from 'node:path';
import Docker from 'dockerode';
import { LABELS } from '../../sandbox/provider';
import { stopRunCluster } from './k8s-cluster';
import { removeTree } from './leftovers';
import type { PostgresServer } from './postgres';

/** Stops the dev server and removes the run's temp and data folders; a sandbox left behind by any test fails the run. */
export default async function globalTeardown(): Promise<void> {
  try {
    await stopAll();
  } finally {
    // The rest of the run's folder (logs, the workflow bundle) stays for a look; the next run reaps it.
    for (const sub of ['tmp', 'data']) removeTree(path.join(process.env.DRYDOCK_TEST_DIR!, sub));
  }
}

async function stopAll(): Promise<void> {
  const server = (globalThis as { drydockTemporal?: ChildProcess }).drydockTemporal;
  if (server && server.exitCode === null) {
    const exited = new Promise((resolve) => server.once('exit', resolve));
    server.kill();
    await exited;
  }
  await (globalThis as { drydockPostgres?: PostgresServer }).drydockPostgres?.stop();
  await stopRunCluster();
  const docker = new Docker();
  const prefix = process.env.DRYDOCK_TEST_RUN!;
  const leaked = (await docker.listContainers({ all: true, filters: { label: [LABELS.session] } })).filter((c) =>
    c.Labels[LABELS.session]?.startsWith(prefix),
  );
  for (const c of leaked) await docker.getContainer(c.Id).remove({ force: true });
  if (leaked.length > 0) {
    throw new Error(`leaked sandboxes: ${leaked.map((c) => c.Names.join(',')).join('; ')}`);
  }
}
