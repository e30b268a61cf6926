/**
 * What setup wrote is never part of the agent's change: the setup baseline
 * (SETUP_REF) records the workspace as setup left it, and the change's
 * snapshot leaves out every path setup wrote that nobody changed since (those
 * are the base's in the commit), listing them. Both take the working tree with
 * drydock's own git (OWN_GIT): no filter the repo's config defines runs in
 * either. Real git and sh, in a folder.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { SETUP_REF } from '../../sandbox/handle';
import { snapshotArgv, takeTrailer } from '../../sandbox/activities/commit';
import { ownGitDirs } from '../../sandbox/toolchains';
import { CHANGE_REF } from '../../repos/git';
import { localHandle } from '../support/local-handle';

const made: string[] = [];
afterAll(() => made.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

/** drydock's own git dirs (the helpers' OWN_GIT_DIR in a sandbox). */
const ownGitDir = mkdtempSync(path.join(tmpdir(), 'drydock-leftovers-git-dir-'));
made.push(ownGitDir);
beforeAll(() => ownGitDirs(ownGitDir));

/** A repo at its base commit, and a state folder outside it (the sandbox's STATE_DIR). */
function repo() {
  const dir = mkdtempSync(path.join(tmpdir(), 'drydock-leftovers-'));
  const state = mkdtempSync(path.join(tmpdir(), 'drydock-leftovers-state-'));
  made.push(dir, state);
  const git = (...args: string[]) => execFileSync('git', args, { cwd: dir, encoding: 'utf8' });
  git('init', '-q');
  git('config', 'user.email', 't@example.com');
  git('config', 'user.name', 't');
  writeFileSync(path.join(dir, 'README.md'), 'base\n');
  writeFileSync(path.join(dir, 'package.json'), '{"name":"x"}\n');
  writeFileSync(path.join(dir, '.gitignore'), 'node_modules/\n');
  git('add', '-A');
  git('commit', '-qm', 'base');
  const base = git('rev-parse', 'HEAD').trim();
  const write = (file: string, text: string) => writeFileSync(path.join(dir, file), text);
  return { dir, state, git, base, write };
}

/**
 * Runs the change's snapshot; returns the files of its commit, what it left out (as its
 * trailer lists them) and the notes it took (with `notes`, the notes file's path).
 */
async function snapshot(r: ReturnType<typeof repo>, notes?: { file: string; date?: string }) {
  const date = notes?.date ?? '2026-01-01T00:00:00Z';
  const argv = snapshotArgv({ baseCommit: r.base, date, takeNotes: !!notes }, r.state, ownGitDir, notes?.file);
  const out = await localHandle(r.dir).commands.exec(argv);
  expect(out.stderr.toString()).toBe('');
  expect(out.exitCode).toBe(0);
  const file = path.join(r.state, 'output');
  writeFileSync(file, out.stdout);
  const trailer = await takeTrailer(file);
  const taken = trailer.notes;
  if (readFileSync(file, 'utf8') === 'unchanged\n') return { unchanged: true, files: {}, leftOut: [], taken };
  expect(readFileSync(file, 'latin1').startsWith('# v')).toBe(true); // the bundle alone, the trailer cut off
  const changed = r.git('diff', '--name-only', r.base, CHANGE_REF).split('\n').filter(Boolean);
  const files = Object.fromEntries(changed.map((f) => [f, r.git('show', `${CHANGE_REF}:${f}`)]));
  const leftOut = [...(trailer.setupFiles?.paths ?? [])].sort();
  expect(trailer.setupFiles?.count ?? 0).toBe(leftOut.length);
  return { unchanged: false, files, leftOut, taken };
}

/** Setup as `npm install` does it: a new lockfile, a tracked file rewritten, ignored node_modules. */
function runSetup(r: ReturnType<typeof repo>) {
  r.write('package-lock.json', '{"lockfileVersion":3}\n');
  r.write('package.json', '{\n  "name": "x"\n}\n');
  mkdirSync(path.join(r.dir, 'node_modules'));
  r.write('node_modules/dep.js', '1\n');
}

test("the change holds only the agent's edit, not the files setup wrote", async () => {
  const r = repo();
  runSetup(r);
  const baseline = await localHandle(r.dir).git.keepSetupBaseline(r.state, 50, ownGitDir);
  expect(baseline).toEqual({ count: 2, paths: ['package-lock.json', 'package.json'] });
  r.write('README.md', 'base\nthe agent was here\n');

  const { files, leftOut } = await snapshot(r);
  expect(files).toEqual({ 'README.md': 'base\nthe agent was here\n' });
  expect(leftOut).toEqual(['package-lock.json', 'package.json']);
  // The workspace keeps setup's files: only the change leaves them out.
  expect(readFileSync(path.join(r.dir, 'package-lock.json'), 'utf8')).toBe('{"lockfileVersion":3}\n');
});

test('a file setup wrote that the agent then changed is part of the change, with the agent’s content', async () => {
  const r = repo();
  runSetup(r);
  await localHandle(r.dir).git.keepSetupBaseline(r.state, 50, ownGitDir);
  r.write('package-lock.json', '{"lockfileVersion":3,"agent":true}\n');
  r.git('rm', '-q', '--cached', 'README.md'); // the agent's own staging changes nothing of it

  const { files, leftOut } = await snapshot(r);
  expect(files).toEqual({ 'package-lock.json': '{"lockfileVersion":3,"agent":true}\n' });
  expect(leftOut).toEqual(['package.json']);
});

test('only setup wrote anything: the change is unchanged; setup that wrote nothing records no baseline', async () => {
  const r = repo();
  runSetup(r);
  await localHandle(r.dir).git.keepSetupBaseline(r.state, 50, ownGitDir);
  expect((await snapshot(r)).unchanged).toBe(true);

  const clean = repo();
  expect(await localHandle(clean.dir).git.keepSetupBaseline(clean.state, 50, ownGitDir)).toEqual({
    count: 0,
    paths: [],
  });
  expect(() => clean.git('rev-parse', '-q', '--verify', SETUP_REF)).toThrow();
  clean.write('README.md', 'edited\n');
  expect((await snapshot(clean)).files).toEqual({ 'README.md': 'edited\n' });
});

test("a clean filter the repo's config names runs neither when setup's files are recorded nor in the change", async () => {
  const r = repo();
  const marker = path.join(r.state, 'filter-ran');
  r.write('.gitattributes', '*.json filter=repo\n');
  r.git('add', '.gitattributes');
  r.git('commit', '-qm', 'attributes');
  const base = r.git('rev-parse', 'HEAD').trim();
  r.git('config', 'filter.repo.clean', `sh -c 'touch ${marker}; echo forged'`);
  r.git('config', 'filter.repo.required', 'true');
  runSetup(r);
  expect(await localHandle(r.dir).git.keepSetupBaseline(r.state, 50, ownGitDir)).toEqual({
    count: 2,
    paths: ['package-lock.json', 'package.json'],
  });
  r.write('README.md', 'base\nthe agent was here\n');

  const { files, leftOut } = await snapshot({ ...r, base });
  expect(files).toEqual({ 'README.md': 'base\nthe agent was here\n' });
  expect(leftOut).toEqual(['package-lock.json', 'package.json']);
  expect(r.git('show', `${SETUP_REF}:package-lock.json`)).toBe('{"lockfileVersion":3}\n');
  expect(existsSync(marker)).toBe(false);
});

test("the snapshot takes the agent's notes in the same exec: the file emptied, the same notes again for a retry of that commit", async () => {
  const r = repo();
  const notesFile = path.join(r.state, 'notes.md');
  writeFileSync(notesFile, 'Run sh check.sh to test.\n---\nThe fixtures are generated.\n');
  r.write('README.md', 'edited\n');
  const first = await snapshot(r, { file: notesFile });
  expect(first.taken).toBe('Run sh check.sh to test.\n---\nThe fixtures are generated.\n');
  expect(first.files).toEqual({ 'README.md': 'edited\n' });
  expect(readFileSync(notesFile, 'utf8')).toBe('');
  // A retry of the same commit (its date) reads what the first took; the next commit takes anew.
  expect((await snapshot(r, { file: notesFile })).taken).toBe(first.taken);
  writeFileSync(notesFile, 'later\n');
  expect((await snapshot(r, { file: notesFile, date: '2026-01-02T00:00:00Z' })).taken).toBe('later\n');
  // Unchanged, the notes still come out; without takeNotes, none are read and the file stays.
  const clean = repo();
  writeFileSync(notesFile, 'from a round that changed nothing\n');
  expect(await snapshot(clean, { file: notesFile })).toMatchObject({
    unchanged: true,
    taken: 'from a round that changed nothing\n',
  });
  writeFileSync(notesFile, 'kept for later\n');
  expect((await snapshot(clean)).taken).toBe('');
  expect(readFileSync(notesFile, 'utf8')).toBe('kept for later\n');
});
