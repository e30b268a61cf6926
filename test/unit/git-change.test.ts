/**
 * The worker's git for a change, against real git in temp folders: the
 * sealed commit and its description in one diff, the push that reports a
 * repeat, and the reads of a commit asked once.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describeChange, hasWholeCommit, pushCommit, readAtCommit, sealChange, type CommitSpec } from '../../repos/git';

const dir = mkdtempSync(path.join(tmpdir(), 'drydock-git-change-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const git = (args: string[], cwd = dir) =>
  execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd })
    .toString()
    .trim();

/** A remote with one commit, its mirror, and a sandbox-like clone whose change is under CHANGE_REF. */
function setUp() {
  const remote = path.join(dir, `remote-${Math.random().toString(16).slice(2)}.git`);
  git(['init', '--quiet', '--bare', '--initial-branch=main', remote]);
  const work = mkdtempSync(path.join(dir, 'work-'));
  git(['init', '--quiet', '--initial-branch=main'], work);
  writeFileSync(path.join(work, 'a.txt'), 'a\n');
  git(['add', '.'], work);
  git(['commit', '--quiet', '-m', 'base'], work);
  git(['push', '--quiet', remote, 'main'], work);
  const base = git(['rev-parse', 'HEAD'], work);
  const mirror = path.join(dir, `mirror-${path.basename(remote)}`);
  git(['clone', '--quiet', '--mirror', remote, mirror]);
  writeFileSync(path.join(work, 'a.txt'), 'a\nb\n');
  writeFileSync(path.join(work, 'bin'), Buffer.from([0, 1, 2]));
  git(['add', '-A'], work);
  git(['commit', '--quiet', '-m', 'sandbox'], work);
  git(['update-ref', 'refs/drydock/change', 'HEAD'], work);
  const bundle = path.join(work, 'change.bundle');
  git(['bundle', 'create', '--quiet', bundle, `${base}..refs/drydock/change`], work);
  return { remote, mirror, base, bundle };
}

const cap = { bytes: 1 << 20, what: 'the diff' };

const spec = (parent: string): CommitSpec => ({
  parent,
  author: { name: 'drydock', email: 'drydock@localhost' },
  date: '2026-12-01T00:00:00Z',
  message: 'drydock: test\n',
});

test('sealChange makes the same commit twice; describeChange gives the diffstat and the binary diff apart', async () => {
  const { mirror, base, bundle } = setUp();
  const first = await sealChange(mirror, bundle, spec(base), async (sealed) => sealed);
  const again = await sealChange(mirror, bundle, spec(base), async (sealed) => sealed.commit);
  expect(again).toBe(first.commit);
  expect(git(['rev-parse', `${first.commit}^{tree}`], mirror)).toBe(first.tree);
  // Nothing of the sandbox's under a ref of the mirror.
  expect(git(['for-each-ref', '--format=%(refname)'], mirror)).toBe('refs/heads/main');
  const change = await describeChange(mirror, base, first.commit, cap);
  // As `git diff --stat` alone prints it.
  expect(change.diffstat).toBe(
    execFileSync('git', ['diff', '--stat', base, first.commit], { cwd: mirror }).toString().trimEnd(),
  );
  expect(change.diffstat).toMatch(/bin +\| Bin 0 -> 3 bytes\n 2 files changed, 1 insertion\(\+\)$/);
  expect(change.diff.startsWith('diff --git a/a.txt b/a.txt\n')).toBe(true);
  expect(change.diff).toContain('GIT binary patch');
  expect(await describeChange(mirror, base, base, cap)).toEqual({ diffstat: '', diff: '' });
  await expect(describeChange(mirror, base, first.commit, { bytes: 10, what: 'the diff' })).rejects.toThrow(
    'the diff is over 10 bytes',
  );
});

test('pushCommit pushes once and says so the second time; a non-fast-forward names itself', async () => {
  const { remote, mirror, base, bundle } = setUp();
  const commit = await sealChange(mirror, bundle, spec(base), async ({ commit }) => commit);
  expect(await hasWholeCommit(mirror, commit)).toBe(true);
  expect(await hasWholeCommit(mirror, 'f'.repeat(40))).toBe(false);
  const push = (c: string) => pushCommit({ mirror, url: `file://${remote}`, branch: 'drydock/t', commit: c });
  expect(await push(commit)).toEqual({ alreadyPushed: false });
  expect(git(['rev-parse', 'refs/heads/drydock/t'], remote)).toBe(commit);
  expect(await push(commit)).toEqual({ alreadyPushed: true });
  await expect(push(base)).rejects.toThrow(/non-fast-forward/);
});

test('readAtCommit asks git once per commit and path, a missing path too', async () => {
  const { mirror, base } = setUp();
  const read = (file: string) => readAtCommit(mirror, base, ['cat-file', 'blob', `${base}:${file}`]);
  expect(await read('a.txt')).toBe('a\n');
  await expect(read('missing')).rejects.toThrow(/missing/);
  // Gone from disk, still answered: the content of a commit never changes.
  rmSync(mirror, { recursive: true, force: true });
  expect(await read('a.txt')).toBe('a\n');
  await expect(read('missing')).rejects.toThrow(/missing/);
  // A ref is asked every time.
  await expect(readAtCommit(mirror, 'main', ['cat-file', 'blob', 'main:a.txt'])).rejects.toThrow();
});
