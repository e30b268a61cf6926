/** The end-to-end project's global teardown: stops what global-setup.ts started and checks nothing was left. */
import type { ChildProcess } from 'node:child_process';
import { readdirSync } from 'node:fs';
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
  const prefix = process.env.DRYDOCK_TEST_RUN!;
  const leaked: string[] = [];
  // This machine's engine and the tests' other hosts (infra/docker-host.sh), which outlive the run.
  for (const [engine, other] of [[new Docker(), false] as const, ...otherEngines().map((e) => [e, true] as const)]) {
    const found = await engine
      .listContainers({ all: true, filters: { label: [LABELS.session] } })
      .catch((err: unknown) => (other ? [] : Promise.reject(err))); // another host that is not running holds nothing
    for (const c of found.filter((c) => c.Labels[LABELS.session]?.startsWith(prefix))) {
      leaked.push(c.Names.join(','));
      await engine.getContainer(c.Id).remove({ force: true });
    }
  }
  if (leaked.length > 0) throw new Error(`leaked sandboxes: ${leaked.join('; ')}`);
}

/** The engines infra/docker-host.sh starts: a socket /run/drydock-<name>.sock each. */
function otherEngines(): Docker[] {
  return readdirSync('/run')
    .filter((f) => /^drydock-[a-z0-9-]+\.sock$/.test(f))
    .map((f) => new Docker({ socketPath: path.join('/run', f), timeout: 10_000 }));
}
