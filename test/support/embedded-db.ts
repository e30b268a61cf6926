/**
 * Run by test/e2e/audit.test.ts in its own process (`tsx test/support/embedded-db.ts
 * <data dir>`): PGlite loads its WebAssembly with dynamic imports, which
 * jest's module sandbox does not support. Exercises the embedded path as
 * drydock processes use it and prints what it observed as JSON.
 */
import { randomBytes } from 'node:crypto';
import { AuditTrail } from '../../store/audit';
import { openDatabase } from '../../store/db';
import { Redactor } from '../../platform/scrub';
import { buildReport } from '../../store/pilot-report';

const errorOf = (p: Promise<unknown>) =>
  p.then(
    () => 'no error',
    (e: Error) => e.message,
  );

async function main(dataDir: string): Promise<void> {
  const first = await openDatabase({ DRYDOCK_DATA_DIR: dataDir, DATABASE_URL: undefined });
  const second = await openDatabase({ DRYDOCK_DATA_DIR: dataDir, DATABASE_URL: undefined });
  const key = randomBytes(32);
  try {
    const trail = new AuditTrail(first.pool, 'h', new Redactor(['s3cret-value-123']), key);
    await trail.append({
      sessionId: 's',
      key: 'a',
      kind: 'command',
      actor: 'agent',
      data: { command: 'echo s3cret-value-123' },
    });
    await trail.append({ sessionId: 's', key: 'a', kind: 'command', actor: 'agent', data: { command: 'again' } });
    await new AuditTrail(second.pool, 'h', new Redactor(), key).append({
      sessionId: 's',
      key: 'b',
      kind: 'teardown',
      actor: 'drydock',
      data: {},
    });
    const events = (await trail.events('s')).map((e) => [e.seq, e.kind, e.data.command ?? null]);
    const verifiedBefore = await trail.verify('s');
    const deleteError = await errorOf(first.pool.query("delete from audit_events where session_id = 's'"));
    const client = await first.pool.connect();
    await client.query('set session_replication_role = replica');
    await client.query("update audit_events set actor = 'x' where session_id = 's' and seq = 1");
    await client.query('set session_replication_role = origin');
    client.release();
    const verifiedAfter = await trail.verify('s');
    const report = await buildReport(second.pool, { since: new Date(0) });
    console.log(
      JSON.stringify({
        descriptions: [first.description, second.description],
        events,
        verifiedBefore,
        deleteError,
        verifiedAfter,
        sessions: report.sessions,
      }),
    );
  } finally {
    await second.close();
    await first.close();
  }
}

main(process.argv[2]).catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
