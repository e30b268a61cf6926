/**
 * A throwaway PostgreSQL cluster from Debian's `postgresql` package, on a
 * loopback port, trusting local connections. As root it runs as the
 * `postgres` user (initdb refuses root). Stoppable and restartable, so a test
 * can take the audit database away in the middle of a session.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { Client } from 'pg';
import { own, ownProcess } from './leftovers';

function binDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  if (!versions.length) throw new Error('PostgreSQL is not installed (infra/test-services.sh installs it)');
  return path.join(root, versions[0], 'bin');
}

/** As root, run as the `postgres` user (initdb and postgres refuse root); directly, so signals reach it. */
const asPostgresUser = () =>
  process.getuid?.() === 0 ? { uid: idOf('-u'), gid: idOf('-g'), env: { ...process.env, HOME: '/tmp' } } : {};

export class PostgresServer {
  private process?: ChildProcess;
  readonly url: string;

  constructor(
    readonly dir: string,
    readonly port: number,
  ) {
    this.url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  }

  /** initdb on the first start; then the server, once it accepts connections. */
  async start(): Promise<void> {
    const bin = binDir();
    if (!existsSync(path.join(this.dir, 'PG_VERSION'))) {
      mkdirSync(this.dir, { recursive: true });
      if (process.getuid?.() === 0) chownSync(this.dir, idOf('-u'), idOf('-g'));
      execFileSync(path.join(bin, 'initdb'), ['-D', this.dir, '-U', 'postgres', '-A', 'trust', '--no-sync'], {
        stdio: 'pipe',
        ...asPostgresUser(),
      });
    }
    const args = ['-D', this.dir, '-p', String(this.port), '-h', '127.0.0.1', '-k', this.dir, '-c', 'fsync=off'];
    this.process = spawn(path.join(bin, 'postgres'), args, { stdio: 'ignore', ...asPostgresUser() });
    // A killed test run leaves the cluster running: the next run stops and removes it.
    own(this.dir);
    ownProcess(this.process.pid);
    const deadline = Date.now() + 30_000;
    for (;;) {
      const client = new Client({ connectionString: this.url });
      try {
        await client.connect();
        await client.end();
        return;
      } catch (err) {
        await client.end().catch(() => {});
        if (this.process.exitCode !== null) throw new Error(`postgres exited with ${this.process.exitCode}`);
        if (Date.now() > deadline) throw err;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  }

  /** Fast shutdown (SIGINT): open connections are dropped, as when a server goes away. */
  async stop(): Promise<void> {
    const child = this.process;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGINT');
    await exited;
  }
}

function idOf(flag: '-u' | '-g'): number {
  return Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
}
