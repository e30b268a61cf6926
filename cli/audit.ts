/** `drydock audit verify|show` and `drydock report`: read the audit trail and the metrics in Postgres. */
import type { Command } from 'commander';
import { Option } from 'commander';
import type { Client } from '@temporalio/client';
import { WorkflowNotFoundError } from '@temporalio/client';
import { AuditTrail, loadAuditKey, type SealLookup } from '../store/audit';
import type { Config } from '../platform/config';
import { openDatabase, type Database } from '../store/db';
import { Redactor } from '../platform/scrub';
import { buildReport, formatReport, windowStart } from '../store/pilot-report';
import { finalStatus } from '../platform/sessions';
import { connectClient } from '../platform/temporal-connection';

/** Opens the database for `fn`, and closes it after. */
export async function withDatabase<T>(config: Config, fn: (db: Database) => Promise<T>): Promise<T> {
  const db = await openDatabase(config);
  try {
    return await fn(db);
  } finally {
    await db.close();
  }
}

/**
 * The seal a closed session's result holds (workflows/api.ts AuditSeal).
 * Sessions still running, snapshot builds and workflows Temporal no longer
 * keeps have none: their chains are checked by their hashes alone.
 */
function sealsIn(client: Client): SealLookup {
  return async (sessionId) => {
    if (sessionId.startsWith('snapshot:')) return undefined;
    try {
      const { status } = await client.workflow.getHandle(sessionId).describe();
      if (status.name === 'RUNNING') return undefined;
      return (await finalStatus(client, sessionId))?.audit;
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return undefined;
      throw err;
    }
  };
}

export function addAuditCommands(program: Command, config: Config, usage: (message: string) => Error): void {
  const audit = program.command('audit').description('The audit trail: every command, decision and side effect');
  const trail = (db: Database) => new AuditTrail(db.pool, config.DRYDOCK_HOST_ID, new Redactor(), loadAuditKey(config));

  audit
    .command('verify [session]')
    .description(
      "Recompute the keyed hash chains (all, or one session's), check each closed session's end against " +
        'its Temporal result, and name the first bad row',
    )
    .option('--json', 'machine-readable output')
    .action(async (session: string | undefined, opts) => {
      const client = await connectClient(config);
      const result = await withDatabase(config, (db) => trail(db).verify(session, sealsIn(client))).finally(() =>
        client.connection.close(),
      );
      if (session && result.rows === 0 && !result.broken.length) throw usage(`no audit events for session ${session}`);
      if (opts.json) console.log(JSON.stringify(result));
      else if (!result.broken.length) {
        console.log(
          `ok: ${result.rows} events in ${result.sessions} session chain(s); ` +
            `${result.sealed} closed session(s) end where their Temporal result says`,
        );
      }
      for (const b of opts.json ? [] : result.broken) {
        console.log(`BROKEN: session ${b.sessionId}, row ${b.seq}${b.id === null ? '' : ` (id ${b.id})`}: ${b.reason}`);
      }
      if (result.broken.length) process.exitCode = 1;
    });

  audit
    .command('show <session>')
    .description("A session's audit events, in order")
    .option('--json', 'machine-readable output')
    .action(async (session: string, opts) => {
      const events = await withDatabase(config, (db) => trail(db).events(session));
      if (!events.length) throw usage(`no audit events for session ${session}`);
      if (opts.json) return console.log(JSON.stringify(events, null, 2));
      for (const e of events) {
        console.log(
          `${String(e.seq).padStart(3)}  ${e.at}  ${e.kind.padEnd(19)} ${e.actor.padEnd(12)} ${JSON.stringify(e.data)}`,
        );
      }
    });

  program
    .command('report')
    .description('Pilot metrics: sessions, acceptance, review minutes, cost per merged PR, failures by cause')
    .option('--since <duration>', 'window, e.g. 7d, 24h', '7d')
    .option('--repo <url>', 'only sessions on this repository')
    .addOption(new Option('--format <format>', 'output format').choices(['table', 'csv', 'json']).default('table'))
    .action(async (opts) => {
      const since = windowStart(opts.since);
      if (!since) throw usage(`--since: expected a duration like 7d or 24h, got "${opts.since}"`);
      const report = await withDatabase(config, (db) => buildReport(db.pool, { since, repo: opts.repo }));
      console.log(formatReport(report, opts.format));
    });
}
