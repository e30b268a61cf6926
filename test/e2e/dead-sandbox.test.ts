/**
 * Activities against a sandbox whose container is already dead: each fails
 * with SandboxNotFound (non-retryable, so the workflow replaces the sandbox),
 * and no promise is left rejected without a handler: that used to end the
 * whole worker process. Run in a child process (test/support/dead-sandbox-drill.ts),
 * where Node's own handling of unhandled rejections applies, not jest's.
 * And an exec that the runtime cannot start because the container is going
 * away, held in that moment on purpose: SandboxNotFound too (issue 45).
 */
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { DockerProvider } from '../../sandbox/docker/provider';
import { LABELS } from '../../sandbox/provider';
import { createSandbox } from '../support/docker';
import { containersOf, docker, makeFixtureRepo, newSessionId, projectRoot } from '../support/helpers';

function runDrill(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(
      path.join(projectRoot, 'node_modules', '.bin', 'tsx'),
      [path.join(__dirname, '..', 'support', 'dead-sandbox-drill.ts'), ...args],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

test('steps and verification on a killed sandbox fail with SandboxNotFound, and the process lives on', async () => {
  const repo = await makeFixtureRepo();
  const sessionId = newSessionId('dead-sandbox');
  const run = await runDrill([repo.url, sessionId]);
  // An unhandled rejection ends the drill before it prints (exit 1, the error on stderr).
  expect({ code: run.code, stderr: run.code === 0 ? '' : run.stderr }).toEqual({ code: 0, stderr: '' });
  expect(JSON.parse(run.stdout)).toEqual({
    command: 'SandboxNotFound (non-retryable)',
    write: 'SandboxNotFound (non-retryable)',
    verify: 'SandboxNotFound (non-retryable)',
    // Killed while being provisioned: removed, and provisioned again by the retry.
    provisioning: 'SandboxLostInProvisioning',
    leftAfterFailure: 0,
    retry: 'succeeded',
  });
  expect(await containersOf(sessionId)).toEqual([]);
  expect(await containersOf(`${sessionId}-p`)).toEqual([]);
});

/** A process's state letter in /proc (R, S, Z…), or undefined once it is gone. */
async function stateOf(pid: number): Promise<string | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  return stat?.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
}

async function until<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  for (let i = 0; i < 300; i++) {
    const value = await probe();
    if (value !== undefined) return value;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`waited 30 s for ${what}`);
}

/**
 * Holds a container in the moment between its init's death and the engine
 * seeing it: a process of the container's pid namespace whose parent (here,
 * outside it) is stopped is killed with init but never reaped, and init
 * cannot finish exiting while one remains. Its namespaces are gone already,
 * so an exec fails to join them (runc: "error executing setns process",
 * exit 126), while Docker still says the container runs. That moment is
 * milliseconds long when a sandbox is killed; here it lasts until release.
 */
async function holdDying(initPid: number): Promise<() => void> {
  const holder = spawn('nsenter', ['-t', String(initPid), '-p', '--', 'sleep', '600'], { stdio: 'ignore' });
  const release = () => void holder.kill('SIGKILL');
  try {
    const childrenFile = `/proc/${holder.pid}/task/${holder.pid}/children`;
    const child = await until('nsenter to start its child', async () => {
      const pid = Number((await readFile(childrenFile, 'utf8').catch(() => '')).trim().split(' ')[0]);
      return pid > 0 ? pid : undefined;
    });
    holder.kill('SIGSTOP');
    // Stopped for sure before init dies: a holder not yet scheduled since the
    // signal would still reap its dying child first (seen in CI under load).
    await until('nsenter to stop', async () => ((await stateOf(holder.pid!)) === 'T' ? true : undefined));
    process.kill(initPid, 'SIGKILL');
    await until('the held process to be killed with init', async () =>
      (await stateOf(child)) === 'Z' ? true : undefined,
    );
    return release;
  } catch (err) {
    release();
    throw err;
  }
}

test('an exec the runtime cannot start in a dying container is SandboxNotFound, though the engine still says it runs', async () => {
  const sessionId = newSessionId('dying');
  const name = `drydock-${sessionId}`;
  const sandboxes = new DockerProvider();
  await createSandbox(name, { labels: { [LABELS.session]: sessionId } });
  const release = await holdDying((await docker.getContainer(name).inspect()).State.Pid);
  try {
    // The moment itself: the engine says running (the old code asked it, and passed exit 126 on).
    expect((await docker.getContainer(name).inspect()).State.Running).toBe(true);
    const outcome = await sandboxes.exec(name, ['true']).then(
      (r) => `exit ${r.exitCode}: ${r.stdout.toString()}${r.stderr.toString()}`,
      (err: Error) => `${err.name}: ${err.message}`,
    );
    expect(outcome).toBe(`SandboxNotFound: sandbox ${name} stopped`);
  } finally {
    release();
    await sandboxes.destroy(name);
  }
  expect(await containersOf(sessionId)).toEqual([]);
});
