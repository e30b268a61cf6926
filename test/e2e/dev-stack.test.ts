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

test('up starts a dev server, a worker and the console, runs a session, and Ctrl-C stops all it started', async () => {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'drydock-up-'));
  const address = `127.0.0.1:${await freePort()}`;
  const env = {
    ...process.env,
    TEMPORAL_ADDRESS: address,
    DRYDOCK_TEMPORAL_UI: `http://localhost:${await freePort()}`,
    DRYDOCK_DATA_DIR: dataDir,
    DRYDOCK_TASK_QUEUE: 'up-test',
    DRYDOCK_APPROVAL_REQUIRED: 'none',
    DRYDOCK_HTTP_PORT: String(await freePort()),
    LOG_LEVEL: 'warn',
  };
  const up = spawn(path.join(projectRoot, 'bin', 'drydock'), ['up'], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  up.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((resolve) => up.once('exit', resolve));
  try {
    for (let i = 0; i < 240 && !stderr.includes('drydock is up.'); i++) await new Promise((r) => setTimeout(r, 250));
    expect(stderr).toContain('drydock is up.');
    expect(stderr).toContain(`Temporal Web UI  ${env.DRYDOCK_TEMPORAL_UI}`);
    expect(stderr).toMatch(/bin\/drydock run --repo/);
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
      ['run', '--repo', repo.url, '--task', 'hi', '--step', 'echo hello >> README.md'],
      env as Record<string, string>,
    );
    expect(run.stderr).toMatch(/: completed/);
    expect(run.code).toBe(0);
  } finally {
    up.kill('SIGINT');
  }
  expect(await exited).toBe(0);
  expect(await answers(address)).toBe(false); // the dev server it started is gone
});
