/**
 * The shell a person gets in a sandbox (drydock attach) reads none of the
 * startup files the agent could have written: the Kubernetes provider's
 * command, run here on a real TTY (util-linux `script`) with a home whose
 * ~/.bashrc, ~/.bash_profile and ~/.profile and an ENV file each leave a mark.
 * The Docker provider runs the same ATTACH_SHELL (sandbox/provider.ts).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { HOME } from '../../sandbox/provider';
import { attachShellArgv } from '../../sandbox/kubernetes/provider';

let home: string;
beforeEach(() => {
  home = mkdtempSync(path.join(tmpdir(), 'drydock-attach-home-'));
  for (const file of ['.bashrc', '.bash_profile', '.profile', 'env.sh']) {
    writeFileSync(path.join(home, file), `touch "${home}/ran${file}"\n`);
  }
});
afterEach(() => rmSync(home, { recursive: true, force: true }));

/** Where a tool is on this machine's PATH. */
const which = (tool: string) => spawnSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).stdout.trim();
const quoted = (arg: string) => `'${arg.replace(/'/g, `'\\''`)}'`;

/** The provider's command, its HOME pointed at the planted one, on a TTY; what it printed. */
function runOnTty(pathDirs: string): string {
  const argv = attachShellArgv('xterm').map((a) => (a === `HOME=${HOME}` ? `HOME=${home}` : a));
  const result = spawnSync(which('script'), ['-q', '-e', '-c', argv.map(quoted).join(' '), '/dev/null'], {
    input: 'echo "done-$((40+2))"; exit\n',
    env: { PATH: pathDirs, SHELL: '/bin/sh', ENV: path.join(home, 'env.sh'), BASH_ENV: path.join(home, 'env.sh') },
    encoding: 'utf8',
    timeout: 20_000,
  });
  expect(result.error).toBeUndefined();
  return result.stdout;
}

const marks = () => readdirSync(home).filter((f) => f.startsWith('ran'));

test('with bash: bash --norc --noprofile, no startup file read', () => {
  expect(runOnTty('/usr/local/bin:/usr/bin:/bin')).toContain('done-42');
  expect(marks()).toEqual([]);
});

test('without bash: sh with ENV unset, no startup file read', () => {
  const bin = path.join(home, 'bin');
  mkdirSync(bin);
  // Only what the command needs: sh, env, and touch for the planted files' marks.
  for (const tool of ['sh', 'env', 'touch']) {
    symlinkSync(
      spawnSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).stdout.trim(),
      path.join(bin, tool),
    );
  }
  expect(existsSync(path.join(bin, 'bash'))).toBe(false);
  expect(runOnTty(bin)).toContain('done-42');
  expect(marks()).toEqual([]);
});
