/**
 * `drydock notes list|approve|edit|drop` (docs/agents.md, Repo memory):
 * a maintainer's decisions on the notes sessions proposed for their repo.
 * Logged in (`drydock login`), through the server, which checks the approver
 * role; otherwise straight in the database, as `--by` (an operator's
 * access, like `approve --by` on Temporal), audited the same way.
 */
import type { Command } from 'commander';
import { Option } from 'commander';
import { AuditTrail, loadAuditKey } from '../store/audit';
import type { Config } from '../platform/config';
import { Redactor } from '../platform/scrub';
import { auditDecision, NoteRefused, RepoNotes, type NoteDecision, type RepoNote } from '../repos/notes';
import { NOTE_LIMITS } from '../workflows/rules/repo-notes';
import { withDatabase } from './audit';
import { callServer, storedLogin } from './identity';

function describe(n: RepoNote): string {
  const decided = n.decidedBy ? `, ${n.status} by ${n.decidedBy}` : '';
  return `#${n.id} ${n.repo} [${n.status} v${n.version}${decided}] from ${n.sessionId}\n  ${n.text.split('\n').join('\n  ')}`;
}

export function addNotesCommands(
  program: Command,
  config: Config,
  who: () => string,
  usage: (message: string) => Error,
): void {
  const notes = program
    .command('notes')
    .description(
      "Repo memory: notes sessions proposed for their repo; approved ones are given to the repo's later sessions",
    );

  notes
    .command('list')
    .description('Notes, newest first (default: those waiting for a decision)')
    .option('--repo <owner/name>', "one repo's")
    .addOption(
      new Option('--status <status>', 'which').choices(['proposed', 'approved', 'dropped', 'all']).default('proposed'),
    )
    .option('--json', 'machine-readable output')
    .action(async (opts) => {
      const status = opts.status === 'all' ? undefined : opts.status;
      const login = await storedLogin();
      const query = new URLSearchParams({ ...(opts.repo ? { repo: opts.repo } : {}), ...(status ? { status } : {}) });
      const found: RepoNote[] = login
        ? await callServer(login, 'GET', `/api/notes?${query}`)
        : await withDatabase(config, (db) => new RepoNotes(db.pool).list({ repo: opts.repo, status }));
      if (opts.json) return console.log(JSON.stringify(found));
      console.log(found.length ? found.map(describe).join('\n') : 'no notes');
    });

  for (const action of ['approve', 'edit', 'drop'] as const) {
    const command = notes
      .command(`${action} <id>`)
      .description(
        action === 'approve'
          ? 'Approve a proposed note (with --text: as you rewrote it): later sessions of its repo are given it'
          : action === 'edit'
            ? 'Change an approved or proposed note (a new version; it is approved)'
            : 'Drop a note: no session is given it',
      )
      .option(
        '--by <name>',
        'who decides, in the database directly (default: your drydock login, else DRYDOCK_USER or the OS user)',
      )
      .option('--json', 'machine-readable output');
    if (action !== 'drop')
      command.option(`--text <text>`, `the note's text (at most ${NOTE_LIMITS.noteChars} characters)`);
    command.action(async (id: string, opts) => {
      if (!/^\d{1,15}$/.test(id)) throw usage(`not a note id: ${id}`);
      if (action === 'edit' && opts.text === undefined) throw usage('edit: give --text');
      if (opts.text !== undefined && opts.text.length > NOTE_LIMITS.noteChars) {
        throw usage(`--text: at most ${NOTE_LIMITS.noteChars} characters`);
      }
      const decision: NoteDecision =
        action === 'drop' ? { action } : { action, ...(opts.text !== undefined ? { text: opts.text } : {}) };
      const login = opts.by ? undefined : await storedLogin();
      const decided: RepoNote = login
        ? await callServer(login, 'POST', `/api/notes/${id}`, decision)
        : await withDatabase(config, async (db) => {
            const by = opts.by ?? who();
            const done = await new RepoNotes(db.pool).decide(Number(id), decision, by).catch((err: unknown) => {
              throw err instanceof NoteRefused ? usage(err.message) : err;
            });
            const trail = new AuditTrail(db.pool, config.DRYDOCK_HOST_ID, new Redactor(), loadAuditKey(config));
            await auditDecision(trail, done, action, by);
            return done;
          });
      console.log(
        opts.json
          ? JSON.stringify(decided)
          : `note #${decided.id} ${decided.status} (v${decided.version}) by ${decided.decidedBy}`,
      );
    });
  }
}
