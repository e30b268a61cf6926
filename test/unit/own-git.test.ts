/**
 * drydock's own git in the sandbox (sandbox/handle.ts, OWN_GIT), against real
 * git in temp folders: the checkpoint and the change's snapshot take the
 * working tree as it is, and no filter driver the repository's .git/config,
 * the user's ~/.gitconfig or the system's config define (named by the repo's
 * .gitattributes) runs inside drydock's command (finding T4-L5).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { snapshotArgv } from '../../sandbox/activities/commit';
import { checkpointArgv } from '../../sandbox/handle';
import { ownGitDirs } from '../../sandbox/toolchains';
import { CHANGE_REF } from '../../repos/git';

const dir = mkdtempSync(path.join(tmpdir(), 'drydock-own-git-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A sandbox's files: its home (~/.gitconfig, the state folder) and a repo whose config defines filters. */
async function sandboxLike() {
  const root = mkdtempSync(path.join(dir, 'sandbox-'));
  const home = path.join(root, 'home');
  const state = path.join(home, '.drydock');
  const work = path.join(root, 'workspace');
  const gitDir = path.join(root, 'git-dir');
  mkdirSync(state, { recursive: true });
  await ownGitDirs(gitDir);
  const marker = path.join(root, 'filter-ran');
  const env = { ...process.env, HOME: home, GIT_CONFIG_NOSYSTEM: '1' };
  const git = (...args: string[]) => execFileSync('git', args, { cwd: work, env }).toString().trim();
  mkdirSync(work);
  git('init', '--quiet', '--initial-branch=main');
  git('config', 'user.name', 't');
  git('config', 'user.email', 't@t');
  writeFileSync(path.join(work, 'a.txt'), 'tested\n');
  writeFileSync(path.join(work, '.gitattributes'), 'a.txt filter=repo\nb.txt filter=user\n');
  git('add', '-A');
  git('commit', '--quiet', '-m', 'base');
  const base = git('rev-parse', 'HEAD');
  // The agent's config: a clean filter that records it ran and changes what is committed.
  const filter = `sh -c 'touch ${marker}; echo forged'`;
  git('config', 'filter.repo.clean', filter);
  git('config', 'filter.repo.required', 'true');
  writeFileSync(path.join(home, '.gitconfig'), `[filter "user"]\n\tclean = ${filter}\n\trequired = true\n`);
  writeFileSync(path.join(work, 'a.txt'), 'tested\nchanged\n');
  writeFileSync(path.join(work, 'b.txt'), 'new\n');
  writeFileSync(path.join(work, 'excluded.log'), 'x\n');
  writeFileSync(path.join(work, '.git', 'info', 'exclude'), '*.log\n');
  const run = (argv: string[]) => execFileSync(argv[0], argv.slice(1), { cwd: work, env });
  return { base, state, gitDir, marker, git, run };
}

test("the checkpoint diff is the working tree; the repo's and the user's clean filters never run", async () => {
  const s = await sandboxLike();
  const diff = s.run(checkpointArgv(s.base, s.state, s.gitDir)).toString();
  expect(diff).toContain('+changed');
  expect(diff).toContain('+++ b/b.txt');
  expect(diff).not.toContain('forged');
  expect(diff).not.toContain('excluded.log');
  expect(existsSync(s.marker)).toBe(false);
});

test("the change's snapshot commits the working tree's bytes; no filter runs", async () => {
  const s = await sandboxLike();
  s.run(snapshotArgv({ baseCommit: s.base, date: '2026-12-01T00:00:00Z' }, s.state, s.gitDir));
  expect(s.git('show', `${CHANGE_REF}:a.txt`)).toBe('tested\nchanged');
  expect(s.git('show', `${CHANGE_REF}:b.txt`)).toBe('new');
  expect(s.git('ls-tree', '--name-only', CHANGE_REF)).not.toContain('excluded.log');
  expect(existsSync(s.marker)).toBe(false);
  // What drydock's command left: the agent's own index as it was (nothing staged).
  expect(s.git('diff', '--cached', '--name-only')).toBe('');
});

test("an index git splits (its shared part beside the repo's own index) is dropped: the tree is still taken", async () => {
  const s = await sandboxLike();
  s.git('-c', 'core.splitIndex=true', 'update-index', '--split-index');
  const diff = s.run(checkpointArgv(s.base, s.state, s.gitDir)).toString();
  expect(diff).toContain('+changed');
  expect(existsSync(s.marker)).toBe(false);
});
