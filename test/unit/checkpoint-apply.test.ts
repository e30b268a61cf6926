/**
 * Re-applying a checkpoint is idempotent: a provisioning retried after a crash finds the
 * first attempt's work in the workspace (the repo copied over again resets tracked files,
 * the files the diff added stay), and the apply must still succeed. Real git, in a folder.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, existsSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { localHandle } from '../support/local-handle';

function repo(): { dir: string; git: (...args: string[]) => string } {
  const dir = mkdtempSync(path.join(tmpdir(), 'drydock-apply-'));
  const git = (...args: string[]) => execFileSync('git', args, { cwd: dir, encoding: 'utf8' });
  git('init', '-q');
  git('config', 'user.email', 't@example.com');
  git('config', 'user.name', 't');
  writeFileSync(path.join(dir, 'README.md'), 'base\n');
  writeFileSync(path.join(dir, '.gitignore'), 'node_modules/\n');
  git('add', '-A');
  git('commit', '-qm', 'base');
  return { dir, git };
}

test('a checkpoint applies again onto a workspace that holds a first attempt, keeping ignored files', async () => {
  const { dir, git } = repo();
  // The checkpoint: README.md changed, STEPS.txt added.
  writeFileSync(path.join(dir, 'README.md'), 'base\nhello\n');
  writeFileSync(path.join(dir, 'STEPS.txt'), 'step-0\n');
  git('add', '-A');
  const diff = execFileSync('git', ['diff', '--cached', '--binary', 'HEAD'], { cwd: dir });
  git('reset', '-q', '--hard');
  git('clean', '-fdq');
  // Setup's output, ignored: it must survive.
  mkdirSync(path.join(dir, 'node_modules'));
  writeFileSync(path.join(dir, 'node_modules', 'dep.js'), '1\n');
  const sandbox = localHandle(dir);

  await sandbox.git.apply(diff); // the first attempt, then the crash
  git('checkout', '--', '.'); // the retry copies the repo in again: tracked files back, STEPS.txt stays
  expect(existsSync(path.join(dir, 'STEPS.txt'))).toBe(true);
  await sandbox.git.apply(diff);
  await sandbox.git.apply(diff); // and once more, onto a tree that has it all

  expect(readFileSync(path.join(dir, 'README.md'), 'utf8')).toBe('base\nhello\n');
  expect(readFileSync(path.join(dir, 'STEPS.txt'), 'utf8')).toBe('step-0\n');
  expect(readFileSync(path.join(dir, 'node_modules', 'dep.js'), 'utf8')).toBe('1\n');
});
