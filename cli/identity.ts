/**
 * Who the CLI acts as. `drydock login --server <url>` keeps a person's token
 * (issued by the console after sign-in, or by `drydock token issue`) in
 * `~/.config/drydock/credentials.json` (mode 0600); while it is there,
 * `approve`, `reject` and `followup` go through that server's API, as that
 * person. `drydock token issue|list|revoke` are the operator's: they use the
 * database directly.
 */
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import path from 'node:path';
import type { Command } from 'commander';
import { loadDirectory } from '../identity/directory';
import { isPersonName } from '../identity/names';
import { PersonalTokens } from '../identity/personal-tokens';
import type { Config } from '../platform/config';
import { openDatabase } from '../store/db';
import { durationMs } from '../workflows/input';

export interface Login {
  server: string;
  token: string;
}

function credentialsFile(): string {
  const base = process.env.XDG_CONFIG_HOME || path.join(homedir(), '.config');
  return path.join(base, 'drydock', 'credentials.json');
}

/** The stored login, if `drydock login` made one. */
export async function storedLogin(): Promise<Login | undefined> {
  const text = await readFile(credentialsFile(), 'utf8').catch(() => undefined);
  if (!text) return undefined;
  const parsed = JSON.parse(text) as Partial<Login>;
  return parsed.server && parsed.token ? { server: parsed.server, token: parsed.token } : undefined;
}

/** A call to the server's API as the logged-in person; a refusal is an Error with the server's reason. */
export async function callServer(login: Login, method: 'GET' | 'POST', route: string, body?: unknown): Promise<any> {
  const res = await fetch(`${login.server.replace(/\/$/, '')}${route}`, {
    method,
    headers: { authorization: `Bearer ${login.token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
    signal: AbortSignal.timeout(30_000),
  });
  const answer = (await res.json().catch(() => ({}))) as { error?: string };
  if (!res.ok) throw new Error(`${login.server} answered ${res.status}: ${answer.error ?? res.statusText}`);
  return answer;
}

async function readLine(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8').trim().split('\n')[0]?.trim() ?? '';
}

export function addIdentityCommands(program: Command, config: Config, usage: (message: string) => Error): void {
  program
    .command('login')
    .description("Keep your personal token for a drydock server (paste it on stdin: the console's 'CLI token' page)")
    .requiredOption('--server <url>', 'the drydock serve URL, e.g. https://drydock.example.com')
    .action(async (opts: { server: string }) => {
      if (process.stdin.isTTY) process.stderr.write('paste your token and press Enter, then Ctrl-D: ');
      const token = await readLine();
      if (!token) throw usage('no token on stdin');
      const who = await callServer({ server: opts.server, token }, 'GET', '/api/whoami');
      if (who?.kind !== 'person') throw usage('that token is not a person’s (machines use DRYDOCK_API_TOKENS)');
      const file = credentialsFile();
      await mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
      await writeFile(file, `${JSON.stringify({ server: opts.server, token })}\n`, { mode: 0o600 });
      console.log(`logged in to ${opts.server} as ${who.name}; approve, reject and followup act as ${who.name} there`);
    });

  program
    .command('logout')
    .description('Forget the stored login')
    .action(async () => {
      await rm(credentialsFile(), { force: true });
      console.log('logged out');
    });

  program
    .command('whoami')
    .description('Whom the stored login names on its server')
    .action(async () => {
      const login = await storedLogin();
      if (!login) throw usage('not logged in (drydock login --server <url>)');
      const who = await callServer(login, 'GET', '/api/whoami');
      console.log(`${who.name} (${who.kind}) on ${login.server}`);
    });

  const token = program.command('token').description("People's personal tokens (the operator's: uses the database)");
  token
    .command('issue <person>')
    .description('Issue a personal token for a person of the identities file (shown once)')
    .option('--ttl <duration>', 'how long it lasts, e.g. 30d', '30d')
    .option('--json', 'machine-readable output')
    .action(async (person: string, opts: { ttl: string; json?: boolean }) => {
      const directory = loadDirectory(config.DRYDOCK_IDENTITIES_FILE);
      if (!isPersonName(person)) throw usage(`${person} is not a person's name (no ':')`);
      if (directory.configured && !directory.people.has(person)) {
        throw usage(`${person} is not in the identities file (${config.DRYDOCK_IDENTITIES_FILE})`);
      }
      if (!/^\d+(s|m|h|d)$/.test(opts.ttl)) throw usage('--ttl: a duration like 12h or 30d');
      const db = await openDatabase(config);
      try {
        const issued = await new PersonalTokens(db.pool).issue(person, 'cli', durationMs(opts.ttl));
        console.log(opts.json ? JSON.stringify(issued) : issued.token);
      } finally {
        await db.close();
      }
    });
  token
    .command('list [person]')
    .description('Live personal tokens (their ids, never the tokens)')
    .option('--json', 'machine-readable output')
    .action(async (person: string | undefined, opts: { json?: boolean }) => {
      const db = await openDatabase(config);
      try {
        const rows = await new PersonalTokens(db.pool).list(person);
        if (opts.json) console.log(JSON.stringify(rows));
        else for (const r of rows) console.log(`${r.id}  ${r.person}  ${r.purpose}  until ${r.expiresAt}`);
      } finally {
        await db.close();
      }
    });
  token
    .command('revoke <id>')
    .description('End a personal token now (by the id that list shows)')
    .action(async (id: string) => {
      const db = await openDatabase(config);
      try {
        if (!(await new PersonalTokens(db.pool).revokeById(id))) throw usage(`no live token ${id}`);
        console.log(`revoked ${id}`);
      } finally {
        await db.close();
      }
    });
}
