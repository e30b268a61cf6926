/**
 * The worker's mirror on a session's start path (repos/git.ts, issue 51 goal 1),
 * against real git in temp folders: the fetch a session's start waits for runs
 * no `git maintenance` after it (the other fetches still do), and a commit
 * resolved in a mirror moments before is known there without another git process.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { hasCommit, resolveCommit, updateMirror } from '../../repos/git';
import { processObservers } from '../../platform/processes';

const dir = mkdtempSync(path.join(tmpdir(), 'drydock-mirror-path-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A remote with one commit, and the worker's mirror of it (cloned). */
async function remoteAndMirror(name: string) {
  const work = path.join(dir, `${name}-work`);
  const git = (...args: string[]) => execFileSync('git', args, { cwd: work }).toString().trim();
  execFileSync('git', ['init', '--quiet', '--initial-branch=main', work]);
  git('config', 'user.name', 't');
  git('config', 'user.email', 't@t');
  writeFileSync(path.join(work, 'a.txt'), `${name}\n`); // each remote its own commit
  git('add', '-A');
  git('commit', '--quiet', '-m', 'first');
  const url = `file://${work}`;
  const mirrors = path.join(dir, `${name}-mirrors`);
  const mirror = await updateMirror(mirrors, url);
  return { work, git, url, mirrors, mirror, head: git('rev-parse', 'HEAD') };
}

/** The commands a git fetch started (its trace2 events), one line each. */
function childrenOf(trace: string): string[] {
  return readFileSync(trace, 'utf8')
    .split('\n')
    .filter((line) => line.includes('"event":"child_start"'))
    .map((line) => JSON.stringify((JSON.parse(line) as { argv: string[] }).argv));
}

test("the fetch a session's start waits for runs no maintenance itself: the upkeep runs beside it, seldom", async () => {
  const { url, mirrors } = await remoteAndMirror('upkeep');
  const onPath = path.join(dir, 'on-path.trace');
  const beside: string[][] = [];
  const observe = (file: string, args: string[]) =>
    void (file === 'git' && args[0] === 'maintenance' && beside.push(args));
  processObservers.push(observe);
  try {
    await updateMirror(mirrors, url, { GIT_TRACE2_EVENT: onPath }, { maintenance: false });
    for (let i = 0; i < 100 && !beside.length; i++) await new Promise((r) => setTimeout(r, 100));
    // The next start's fetch, moments later, leaves it out: at most one upkeep every ten minutes.
    await updateMirror(mirrors, url, {}, { maintenance: false });
    await new Promise((r) => setTimeout(r, 500));
  } finally {
    processObservers.splice(processObservers.indexOf(observe), 1);
  }
  // The mirror's upkeep still ran, once, as a process of its own after the fetch.
  expect(beside).toEqual([['maintenance', 'run', '--auto', '--quiet']]);
  const offPath = path.join(dir, 'off-path.trace');
  await updateMirror(mirrors, url, { GIT_TRACE2_EVENT: offPath });
  expect(childrenOf(offPath).some((c) => c.includes('"maintenance"'))).toBe(true);
  expect(childrenOf(onPath).some((c) => c.includes('"maintenance"'))).toBe(false);
  // The fetch itself still happened: the remote was asked.
  expect(childrenOf(onPath).some((c) => c.includes('upload-pack'))).toBe(true);
});

test('a commit resolved in a mirror is known there without another git process; an unknown one is asked', async () => {
  const { mirror, head } = await remoteAndMirror('known');
  const started: string[][] = [];
  const observe = (file: string, args: string[]) => void (file === 'git' && started.push(args));
  processObservers.push(observe);
  try {
    expect(await resolveCommit(mirror)).toBe(head);
    const resolving = started.length;
    expect(await hasCommit(mirror, head)).toBe(true);
    expect(started.length).toBe(resolving); // no `git cat-file -e` for it
    // Another mirror has not seen it: asked, and the answer is git's.
    const other = await remoteAndMirror('other');
    started.length = 0;
    expect(await hasCommit(other.mirror, head)).toBe(false);
    expect(started).toEqual([['cat-file', '-e', `${head}^{commit}`]]);
    // A commit git finds is remembered too: the second question starts no process.
    started.length = 0;
    expect(await hasCommit(other.mirror, other.head)).toBe(true);
    expect(await hasCommit(other.mirror, other.head)).toBe(true);
    expect(started).toHaveLength(1);
  } finally {
    processObservers.splice(processObservers.indexOf(observe), 1);
  }
});
