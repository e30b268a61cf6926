/**
 * The Temporal server as drydock uses it: its search attributes, a session's
 * page in the Web UI, and the CLI's dev server that `drydock up` and the
 * tests start.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync } from 'node:fs';
import { connect } from 'node:net';
import path from 'node:path';
import type { ConnectionLike } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { PHASE_ATTRIBUTE, REPO_ATTRIBUTE } from '../workflows/api';
import { projectRoot, type Config } from './config';

/**
 * Registers drydock's search attributes (DrydockPhase, DrydockRepo) on the
 * namespace, also on an existing database; already registered is fine.
 */
export async function ensureSearchAttributes(connection: ConnectionLike, namespace: string): Promise<void> {
  const keyword = temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD;
  const existing = await connection.operatorService.listSearchAttributes({ namespace });
  const missing = [PHASE_ATTRIBUTE.name, REPO_ATTRIBUTE.name].filter((name) => !existing.customAttributes?.[name]);
  if (missing.length === 0) return;
  await connection.operatorService.addSearchAttributes({
    namespace,
    searchAttributes: Object.fromEntries(missing.map((name) => [name, keyword])),
  });
}

/** A session's page in the Temporal Web UI. */
export function sessionLink(
  config: Pick<Config, 'DRYDOCK_TEMPORAL_UI' | 'TEMPORAL_NAMESPACE'>,
  sessionId: string,
): string {
  return `${config.DRYDOCK_TEMPORAL_UI}/namespaces/${config.TEMPORAL_NAMESPACE}/workflows/${encodeURIComponent(sessionId)}`;
}

/** The Temporal CLI: one on PATH first, else the project's build in .tools/bin (infra/temporal.sh). */
export function findTemporalCli(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (dir && existsSync(path.join(dir, 'temporal'))) return path.join(dir, 'temporal');
  }
  const local = path.join(projectRoot, '.tools', 'bin', 'temporal');
  return existsSync(local) ? local : undefined;
}

/** True when something accepts TCP connections at host:port. */
export function answers(address: string, timeoutMs = 1_000): Promise<boolean> {
  const [host, port] = splitAddress(address);
  return new Promise((resolve) => {
    const socket = connect({ host, port, timeout: timeoutMs });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
    socket.once('timeout', () => done(false));
  });
}

function splitAddress(address: string): [string, number] {
  const i = address.lastIndexOf(':');
  return [address.slice(0, i) || 'localhost', Number(address.slice(i + 1))];
}

export interface DevServerOptions {
  /** e.g. "127.0.0.1:7233". */
  address: string;
  /** Web UI port; omitted: headless. */
  uiPort?: number;
  /** SQLite file that keeps state across restarts; omitted: in memory. */
  dbFile?: string;
  /** Where the server's own log goes (default: discarded). */
  logFile?: string;
}

/**
 * Starts `temporal server start-dev` and waits until its frontend answers.
 * The caller stops it with `child.kill()`.
 */
export async function startDevServer(opts: DevServerOptions): Promise<ChildProcess> {
  const cli = findTemporalCli();
  if (!cli) throw new Error("no Temporal CLI found: run 'bash infra/temporal.sh' (or npm start) to build it");
  const [ip, port] = splitAddress(opts.address);
  const args = ['server', 'start-dev', '--ip', ip, '--port', String(port), '--log-level', 'warn'];
  args.push(...(opts.uiPort ? ['--ui-port', String(opts.uiPort)] : ['--headless']));
  if (opts.dbFile) args.push('--db-filename', opts.dbFile);
  const out = opts.logFile ? openSync(opts.logFile, 'a') : 'ignore';
  const child = spawn(cli, args, { stdio: ['ignore', out, out] });
  if (typeof out === 'number') closeSync(out); // the child has its own copy
  const exited = new Promise<never>((_, reject) =>
    child.once('exit', (code) => reject(new Error(`the Temporal dev server exited with ${code} at start`))),
  );
  const deadline = Date.now() + 60_000;
  while (!(await Promise.race([answers(opts.address, 500), exited]))) {
    if (Date.now() > deadline) {
      child.kill();
      throw new Error(`the Temporal dev server did not answer on ${opts.address} within 60 s`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  exited.catch(() => undefined);
  return child;
}
