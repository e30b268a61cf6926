/**
 * platform/processes.ts: commands run by the helper process, with their
 * output, their failures as the worker's code reads them, and a helper that
 * dies replaced by the next call.
 */
import { ProcessFailed, runProcess } from '../../platform/processes';

describe('runProcess', () => {
  it('answers stdout and stderr of a command that succeeds', async () => {
    const out = await runProcess('sh', ['-c', 'echo "$1"; echo to-stderr >&2', 'sh', 'héllo']);
    expect(out).toEqual({ stdout: 'héllo\n', stderr: 'to-stderr\n' });
  });

  it('feeds `input` to stdin, and runs in `cwd` with `env`', async () => {
    const out = await runProcess('sh', ['-c', 'cat; pwd; echo "$X"'], { input: 'in\n', cwd: '/tmp', env: { X: 'y' } });
    expect(out.stdout).toBe('in\n/tmp\ny\n');
  });

  it('fails with the exit code and both streams', async () => {
    const err = await runProcess('sh', ['-c', 'echo out; echo why >&2; exit 3']).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProcessFailed);
    expect(err).toMatchObject({ code: 3, signal: null, stdout: 'out\n', stderr: 'why\n' });
    expect((err as Error).message).toContain('exited with 3: why');
  });

  it('fails with the code of a command that cannot start', async () => {
    await expect(runProcess('/nonexistent/command', [])).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('kills a command that prints more than maxBuffer', async () => {
    const err = await runProcess('sh', ['-c', 'yes | head -c 100000'], { maxBuffer: 1000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProcessFailed);
    expect((err as Error).message).toContain('more output than allowed');
  });

  it('runs commands side by side', async () => {
    const outs = await Promise.all([1, 2, 3, 4].map((i) => runProcess('sh', ['-c', `sleep 0.2; echo ${i}`])));
    expect(outs.map((o) => o.stdout)).toEqual(['1\n', '2\n', '3\n', '4\n']);
  });

  it('starts a new helper after the last one died, failing only what it was running', async () => {
    const running = runProcess('sh', ['-c', 'kill -9 $PPID; sleep 5']);
    await expect(running).rejects.toThrow(/process helper ended/);
    await expect(runProcess('echo', ['again'])).resolves.toEqual({ stdout: 'again\n', stderr: '' });
  });
});
