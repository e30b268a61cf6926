/**
 * Activities against a sandbox whose container is already dead: each fails
 * with SandboxNotFound (non-retryable, so the workflow replaces the sandbox),
 * and no promise is left rejected without a handler: that used to end the
 * whole worker process. Run in a child process (test/support/dead-sandbox-drill.ts),
 * where Node's own handling of unhandled rejections applies, not jest's.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { containersOf, makeFixtureRepo, newSessionId, projectRoot } from '../support/helpers';

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
