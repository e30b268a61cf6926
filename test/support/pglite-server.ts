/**
 * Serves the embedded PGlite database of a data dir from a separate process
 * (`tsx test/support/pglite-server.ts <data dir>`), as a first drydock process would:
 * jest's VM cannot load PGlite's WebAssembly (dynamic import), so tests reach
 * the embedded path the way every later drydock process does, through the
 * port file and `pg`. Prints "ready"; stops when stdin closes.
 */
import { openDatabase } from '../../store/db';

void (async () => {
  const db = await openDatabase({ DRYDOCK_DATA_DIR: process.argv[2], DATABASE_URL: undefined });
  process.stdout.write(`ready ${db.description}\n`);
  process.stdin.resume();
  process.stdin.on('end', () => void db.close().then(() => process.exit(0)));
})();
