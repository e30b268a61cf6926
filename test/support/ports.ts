/** Ports for the servers a test starts: on loopback, nothing listening there right now. */
import { createServer } from 'node:net';

/** A TCP port nothing listens on right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

/**
 * The first of COUNT consecutive free ports, all in 20000-32767: below the kernel's
 * ephemeral range (so no client socket takes one meanwhile) and within a PostgreSQL
 * smallint, where Temporal keeps each service's membership port (cluster_membership.rpc_port).
 */
export async function freePortRange(count: number): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * (32_768 - 20_000 - count));
    let ok = true;
    for (let port = base; port < base + count && ok; port++) ok = await isFree(port);
    if (ok) return base;
  }
  throw new Error(`no ${count} consecutive free ports found`);
}

/** A base port for a Temporal server with its 14 ports free (freePortRange says why the range). */
export const temporalPorts = (): Promise<number> => freePortRange(14);

function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer()
      .once('error', () => resolve(false))
      .listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}
