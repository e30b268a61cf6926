/**
 * Postgres for the audit trail, the snapshot registry and the metrics, always
 * spoken through `pg`. DATABASE_URL names a real server; without it the
 * embedded default is PGlite (persisted in <data dir>/pglite) served on a
 * loopback port by @electric-sql/pglite-socket. PGlite is single-process, so
 * the first drydock process to open it serves it and writes the port to
 * <data dir>/pglite.port; the others connect there.
 */
import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import path from 'node:path';
import pg, { Pool, type PoolClient } from 'pg';
import type { Config } from '../platform/config';
import type { Logger } from '../platform/log';

export interface Database {
  pool: Pool;
  /** Where the data lives, for messages ("postgres://…" without the password, or the PGlite folder). */
  description: string;
  close(): Promise<void>;
}

const MIGRATIONS_DIR = path.join(__dirname, 'migrations');

/** Opens the configured database and applies pending migrations. */
export async function openDatabase(
  config: Pick<Config, 'DATABASE_URL' | 'DRYDOCK_DATA_DIR'>,
  log?: Logger,
): Promise<Database> {
  const db = config.DATABASE_URL
    ? serverDatabase(config.DATABASE_URL)
    : await embeddedDatabase(config.DRYDOCK_DATA_DIR, log);
  try {
    await migrate(db.pool, log);
  } catch (err) {
    await db.close();
    throw err;
  }
  return db;
}

/** How long connecting to the server may take: one that does not answer within it is down. */
const CONNECT_TIMEOUT_MS = 5_000;
/**
 * How long a query may wait for one of the pool's connections while all are in use. A
 * busy store is not a dead one: under load (20 sessions at once, load average 40–56) the
 * embedded PGlite's one connection was busy for more than 5 s and provisioning failed on
 * "timeout exceeded when trying to connect" (bench/RESULTS.md, park). The wait is bounded
 * all the same, so a store that never answers still fails the activity.
 */
export const POOL_WAIT_MS = 120_000;

/** pg's Client with the connect timeout of its own: the pool's (its queue wait) is POOL_WAIT_MS. */
class BoundedClient extends pg.Client {
  constructor(config?: pg.ClientConfig) {
    super({ ...config, connectionTimeoutMillis: CONNECT_TIMEOUT_MS });
  }
}

/** A pool of `connections` to `url` (exported for its test: the queue wait against the connect timeout). */
export function serverDatabase(url: string, connections = 8): Database {
  const pool = new Pool({
    connectionString: url,
    max: connections,
    connectionTimeoutMillis: POOL_WAIT_MS,
    Client: BoundedClient,
  });
  // An idle client losing its server (a Postgres restart) must not crash the process.
  pool.on('error', () => {});
  const safe = new URL(url);
  safe.password = '';
  return { pool, description: safe.toString(), close: () => pool.end() };
}

/**
 * One connection per process to the embedded PGlite. Its socket server queues
 * each protocol message on its own, so two connections' Parse/Bind/Sync can
 * interleave outside a transaction; under concurrent sessions that showed as
 * activities hanging until their timeout (bench/RESULTS.md, concurrency).
 */
const PGLITE_CONNECTIONS = 1;

async function embeddedDatabase(dataDir: string, log?: Logger): Promise<Database> {
  const dir = path.join(dataDir, 'pglite');
  const portFile = path.join(dataDir, 'pglite.port');
  const served = await readFile(portFile, 'utf8').catch(() => undefined);
  if (served) {
    const db = serverDatabase(`postgres://postgres@127.0.0.1:${served.trim()}/postgres`, PGLITE_CONNECTIONS);
    const ok = await db.pool.query('select 1').then(
      () => true,
      () => false,
    );
    if (ok) return { ...db, description: `PGlite in ${dir} (served by another drydock process)` };
    await db.close();
  }
  // Loaded on demand: a process that uses a real server never loads PGlite's WebAssembly.
  const { PGlite } = await import('@electric-sql/pglite');
  const { PGLiteSocketServer } = await import('@electric-sql/pglite-socket');
  const pglite = await PGlite.create(dir);
  const port = await freeLoopbackPort();
  const server = new PGLiteSocketServer({ db: pglite, host: '127.0.0.1', port, maxConnections: 16 });
  await server.start();
  await writeFile(portFile, `${port}\n`);
  log?.info({ dir, port }, 'serving the embedded PGlite database');
  const db = serverDatabase(`postgres://postgres@127.0.0.1:${port}/postgres`, PGLITE_CONNECTIONS);
  return {
    pool: db.pool,
    description: `PGlite in ${dir}`,
    async close() {
      await db.close();
      await server.stop();
      await pglite.close();
      await rm(portFile, { force: true });
    },
  };
}

function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

/**
 * Applies store/migrations/*.sql in name order, each once, each in its own
 * transaction, recorded in schema_migrations. An advisory lock keeps two
 * processes starting at once from applying the same file twice.
 */
export async function migrate(pool: Pool, log?: Logger): Promise<string[]> {
  const files = (await readdir(MIGRATIONS_DIR)).filter((f) => f.endsWith('.sql')).sort();
  const applied: string[] = [];
  await withTransaction(pool, async (client) => {
    await client.query('select pg_advisory_xact_lock(7411)');
    await client.query(
      'create table if not exists schema_migrations (name text primary key, applied_at timestamptz not null default now())',
    );
    const done = new Set(
      (await client.query<{ name: string }>('select name from schema_migrations')).rows.map((r) => r.name),
    );
    for (const file of files) {
      if (done.has(file)) continue;
      await client.query(await readFile(path.join(MIGRATIONS_DIR, file), 'utf8'));
      await client.query('insert into schema_migrations (name) values ($1)', [file]);
      applied.push(file);
    }
  });
  if (applied.length) log?.info({ applied }, 'database migrations applied');
  return applied;
}

/** Runs fn in a transaction on one client; never wait on another connection inside it (PGlite). */
export async function withTransaction<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  // The pool listens for a client's 'error' only while it is idle: a server that goes away
  // (a PostgreSQL restart) while this one is checked out would otherwise end the process.
  // The transaction fails with that error (what callers look at to wait for the server, rather
  // than the next query's "not queryable"), and the client is discarded.
  let lost: Error | undefined;
  const onError = (err: Error) => void (lost = err);
  client.on('error', onError);
  try {
    await client.query('begin');
    const result = await fn(client);
    await client.query('commit');
    return result;
  } catch (err) {
    if (lost) throw lost;
    await client.query('rollback').catch(() => {});
    throw err;
  } finally {
    client.removeListener('error', onError);
    client.release(lost);
  }
}
