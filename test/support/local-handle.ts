/**
 * A sandbox handle whose commands run in a folder on this machine, as they
 * would in /workspace: unit tests of drydock's shell scripts (commit,
 * checkpoint) run them for real without a container.
 */
import { execFile } from 'node:child_process';
import { sandboxOf } from '../../sandbox/handle';
import type { ExecResult, SandboxProvider } from '../../sandbox/provider';

export function localHandle(dir: string) {
  const exec = (argv: string[], opts?: { stdin?: Buffer | string }) =>
    new Promise<ExecResult>((resolve) => {
      const child = execFile(argv[0], argv.slice(1), { cwd: dir, encoding: 'buffer' }, (err, stdout, stderr) =>
        resolve({ exitCode: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
      );
      // A command that ends without reading its stdin closes the pipe first (EPIPE on a busy machine):
      // the command's own exit says what happened, as a sandbox's exec would.
      child.stdin!.on('error', () => undefined);
      child.stdin!.end(opts?.stdin ?? '');
    });
  return sandboxOf({} as SandboxProvider, 'local', exec);
}
