/**
 * Temporal on PostgreSQL for a test file: infra/temporal-pg.sh run (the server
 * built from Go modules, on a throwaway PostgreSQL cluster of its own), on free
 * loopback ports, owned by the test run (a killed run's next one stops it).
 */
import { spawn } from 'node:child_process';
import { chmodSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { projectRoot } from './helpers';
import { freePortRange } from './ports';
import { ownProcess } from './leftovers';

export interface TemporalPg {
  /** host:port of the frontend. */
  address: string;
  /** The server's process, and PostgreSQL's postmaster (for CPU accounting). */
  pids: { server: number; postgres: number };
  /** SIGTERM to the script, which stops the server and PostgreSQL; resolves when it exited. */
  stop(): Promise<void>;
}

/**
 * Starts the server with its state in `dir`/state (`dir` is made reachable for the
 * postgres user when run as root); `tls`: a folder of certificates for mTLS.
 * Resolves once it printed "ready <address>". The first run on a machine builds
 * the server (minutes); later ones start in seconds.
 */
export async function startTemporalPg(
  dir: string,
  /** `tuned: false`: the server's default dynamic configuration, not drydock's. */
  /** `port`: the base of its 11 ports (a restart keeps its address); free ones when absent. */
  opts: { tls?: string; tuned?: boolean; port?: number } = {},
): Promise<TemporalPg> {
  chmodSync(dir, 0o755); // as root, PostgreSQL runs as the postgres user and must reach its folder
  const state = path.join(dir, 'state');
  const server = spawn('bash', [path.join(projectRoot, 'infra/temporal-pg.sh'), 'run'], {
    env: {
      ...process.env,
      TEMPORAL_PG_DIR: state,
      TEMPORAL_PG_PORT: String(opts.port ?? (await freePortRange(11))),
      ...(opts.tls ? { TEMPORAL_PG_TLS: opts.tls } : {}),
      ...(opts.tuned === false ? { TEMPORAL_PG_DYNAMIC_CONFIG: '/dev/null' } : {}),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  ownProcess(server.pid);
  let stderr = '';
  server.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<void>((resolve) => server.once('exit', () => resolve()));
  const address = await new Promise<string>((resolve, reject) => {
    server.stdout!.on('data', (c: Buffer) => {
      const ready = /^ready (\S+)$/m.exec(c.toString());
      if (ready) resolve(ready[1]);
    });
    server.once('exit', (code) => reject(new Error(`infra/temporal-pg.sh exited with ${code}:\n${stderr}`)));
  });
  const pids = {
    server: Number(readFileSync(path.join(state, 'temporal-server.pid'), 'utf8')),
    postgres: Number(readFileSync(path.join(state, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]),
  };
  // If this run is killed, the next one stops the server and PostgreSQL too.
  ownProcess(pids.server);
  ownProcess(pids.postgres);
  return {
    address,
    pids,
    async stop() {
      if (server.exitCode === null && server.signalCode === null) server.kill('SIGTERM');
      await exited;
    },
  };
}
