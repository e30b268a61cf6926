/**
 * `drydock up` as `npm start` runs it: its own Temporal dev server (state in a
 * file), the worker, a session through it, and Ctrl-C stops everything.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import { answers } from '../../platform/temporal';
import { freePort, makeFixtureRepo, projectRoot, runCli } from '../support/helpers';

const SYSTEM_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';

test("up starts a dev server, a worker (its sandboxes trusting the machine's extra CAs) and the console, runs a session, and Ctrl-C stops all it started", async () => {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'drydock-up-'));
  const address = `127.0.0.1:${await freePort()}`;
  // Not the operator's DRYDOCK_EXTRA_CA_CERTS: up finds the machine's own.
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'DRYDOCK_EXTRA_CA_CERTS'));
  const env = {
    ...inherited,
    TEMPORAL_ADDRESS: address,
    DRYDOCK_TEMPORAL_UI: `http://localhost:${await freePort()}`,
    DRYDOCK_DATA_DIR: dataDir,
    DRYDOCK_TASK_QUEUE: 'up-test',
    DRYDOCK_APPROVAL_REQUIRED: 'none',
    DRYDOCK_HTTP_PORT: String(await freePort()),
    LOG_LEVEL: 'warn',
    // The machine's extra CAs as Node.js is told them: up passes them on to sandboxes.
    NODE_EXTRA_CA_CERTS: SYSTEM_BUNDLE,
  };
  const up = spawn(path.join(projectRoot, 'bin', 'drydock'), ['up'], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  up.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  let gone = false;
  const exited = new Promise<number | null>((resolve) => up.once('exit', resolve)).finally(() => (gone = true));
  try {
    // Up to 150 s: up starts a dev server and bundles the workflows (10-20 s on two idle cores, a minute and more on busy ones).
    for (let i = 0; i < 600 && !gone && !stderr.includes('drydock is up.'); i++) {
      await new Promise((r) => setTimeout(r, 250));
    }
    expect(stderr).toContain('drydock is up.');
    expect(stderr).toContain(`Temporal Web UI  ${env.DRYDOCK_TEMPORAL_UI}`);
    expect(stderr).toMatch(/bin\/drydock run --repo/);
    expect(stderr).toContain(
      `sandboxes trust the extra CAs this machine's Node.js does: ${SYSTEM_BUNDLE} (NODE_EXTRA_CA_CERTS)`,
    );
    expect(existsSync(path.join(dataDir, 'temporal.db'))).toBe(true);
    expect(await answers(new URL(env.DRYDOCK_TEMPORAL_UI).host)).toBe(true);
    // The review console is up too, with a personal token for the local user in a file only they can read.
    const consoleUrl = `http://127.0.0.1:${env.DRYDOCK_HTTP_PORT}`;
    const tokenFile = path.join(dataDir, 'dev-token');
    expect(stderr).toContain(`review console   ${consoleUrl}  (your token is in ${tokenFile})`);
    expect(statSync(tokenFile).mode & 0o777).toBe(0o600);
    const token = readFileSync(tokenFile, 'utf8').trim();
    const whoami = await fetch(`${consoleUrl}/api/whoami`, { headers: { authorization: `Bearer ${token}` } });
    expect(await whoami.json()).toEqual({ name: process.env.DRYDOCK_USER ?? userInfo().username, kind: 'person' });
    const sessions = await fetch(`${consoleUrl}/api/sessions`, { headers: { authorization: `Bearer ${token}` } });
    expect(sessions.status).toBe(200);

    const repo = await makeFixtureRepo();
    const run = await runCli(
      // The sandbox's bundle holds them (sandbox/ca.ts), and its clients are told where it is.
      [
        'run',
        '--repo',
        repo.url,
        '--task',
        'hi',
        '--step',
        'grep -q "BEGIN CERTIFICATE" "$SSL_CERT_FILE" && echo hello >> README.md',
      ],
      env as Record<string, string>,
    );
    expect(run.stderr).toMatch(/: completed/);
    expect(run.code).toBe(0);
  } finally {
    up.kill('SIGINT');
  }
  expect(await exited).toBe(0);
  expect(await answers(address)).toBe(false); // the dev server it started is gone
}, 360_000);
