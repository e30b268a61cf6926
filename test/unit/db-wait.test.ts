/**
 * A busy database is not a dead one: a query waits for the pool's connection
 * while another holds it longer than the 5-second connect timeout (what failed
 * 17 of the park bench's 20 sessions under load, bench/RESULTS.md), and a server
 * that does not answer still fails within that connect timeout. The embedded
 * PGlite, one connection per process, served by a child process as drydock's
 * later processes reach it.
 */
import { createServer, type Server } from 'node:net';
import { serverDatabase, type Database } from '../../store/db';
import { openEmbeddedDatabase } from '../support/helpers';

let db: Database & { dataDir: string };
beforeAll(async () => {
  db = await openEmbeddedDatabase();
});
afterAll(() => db?.close());

test('a query waits for the one connection held longer than the connect timeout, then runs', async () => {
  const held = await db.pool.connect();
  const waiting = db.pool.query<{ n: number }>('select 1 as n');
  const outcome = waiting.then(
    (r) => r.rows[0].n,
    (err: Error) => err.message,
  );
  await new Promise((resolve) => setTimeout(resolve, 6_000));
  held.release();
  expect(await outcome).toBe(1);
}, 30_000);

test('a server that accepts but never answers fails the connect within the connect timeout', async () => {
  const silent: Server = createServer(() => undefined);
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const { port } = silent.address() as { port: number };
  const dead = serverDatabase(`postgres://postgres@127.0.0.1:${port}/postgres`, 1);
  try {
    // Within the test's 30 s: the pool's own wait (POOL_WAIT_MS, 2 minutes) is not what ends it.
    await expect(dead.pool.query('select 1')).rejects.toThrow(/timeout/i);
  } finally {
    await dead.close();
    silent.close();
  }
}, 30_000);
