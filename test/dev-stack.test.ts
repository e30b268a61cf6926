/**
 * `drydock up` as `npm start` runs it: its own Temporal dev server (state in a
 * file), the worker, a session through it, and Ctrl-C stops everything.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { answers } from '../lib/temporal';
import { freePort, makeFixtureRepo, projectRoot, runCli } from './helpers';

test('up starts a dev server and a worker, runs a session, and Ctrl-C stops all it started', async () => {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'drydock-up-'));
  const address = `127.0.0.1:${await freePort()}`;
  const env = {
    ...process.env,
    TEMPORAL_ADDRESS: address,
    DRYDOCK_TEMPORAL_UI: `http://localhost:${await freePort()}`,
    DRYDOCK_DATA_DIR: dataDir,
    DRYDOCK_TASK_QUEUE: 'up-test',
    DRYDOCK_APPROVAL_REQUIRED: 'none',
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
