/**
 * Escaped defects against the local GitHub (test/support/fake-github.ts, its
 * commits, pull requests and merges answered from a real bare repo) and the
 * embedded PostgreSQL: merged drydock changes, then a revert of one, a fix
 * of another's lines, an unrelated fix, and a revert after the window.
 */
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Octokit } from '@octokit/rest';
import { escapedDefects, linesTouched, revertsChange, sweepEscapedDefects } from '../../figures/defects';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github';
import { git, openEmbeddedDatabase } from '../support/helpers';
import type { Database } from '../../store/db';

const TOKEN = 'ghp_defects0000000000000000000000000000';
const HOUR = 3_600_000;
let fake: FakeGitHub;
let db: Database;
let work: string;
let octokit: Octokit;

/** Commits the work tree as a developer would, at `date` when given. */
const commitAll = (message: string, date?: string) => {
  git(['add', '-A'], work);
  const dates = date ? { GIT_COMMITTER_DATE: date, GIT_AUTHOR_DATE: date } : {};
  execFileSync('git', ['-c', 'user.name=dev', '-c', 'user.email=dev@x', 'commit', '--quiet', '-m', message], {
    cwd: work,
    env: { ...process.env, ...dates },
  });
};
const write = (file: string, content: string) => writeFile(path.join(work, file), content);

/** A drydock branch with `content` in `file`, its pull request merged through the API; its metrics row, merged. */
async function mergedSession(id: string, file: string, content: string): Promise<{ url: string; merge: string }> {
  git(['checkout', '--quiet', '-b', `drydock/${id}`, 'origin/main'], work);
  await write(file, content);
  commitAll(`drydock: ${id}`);
  git(['push', '--quiet', 'origin', `drydock/${id}`], work);
  const repo = { owner: 'acme', repo: 'app' };
  const { data: pr } = await octokit.pulls.create({
    ...repo,
    head: `drydock/${id}`,
    base: 'main',
    title: `drydock: ${id}`,
  });
  const { data: merged } = await octokit.pulls.merge({ ...repo, pull_number: pr.number });
  const { data: after } = await octokit.pulls.get({ ...repo, pull_number: pr.number });
  await db.pool.query(
    `insert into session_metrics (session_id, repo, started_at, ended_at, outcome, pr_url, merged, merged_at)
     values ($1, 'acme/app', $2, $2, 'completed', $3, true, $4)`,
    [id, new Date(Date.now() - HOUR).toISOString(), pr.html_url, after.merged_at],
  );
  git(['fetch', '--quiet', 'origin'], work);
  git(['checkout', '--quiet', '-B', 'main', 'origin/main'], work);
  return { url: pr.html_url, merge: merged.sha };
}

beforeAll(async () => {
  const root = await mkdtemp(path.join(tmpdir(), 'drydock-defects-'));
  const bare = path.join(root, 'acme', 'app.git');
  await mkdir(path.dirname(bare), { recursive: true });
  git(['init', '--quiet', '--bare', '--initial-branch=main', bare]);
  work = path.join(root, 'work');
  git(['clone', '--quiet', bare, work]);
  await write('price.js', 'export const price = (p) => p;\n');
  await write('cart.js', 'export const total = (items) => items.length;\n');
  commitAll('initial');
  git(['push', '--quiet', 'origin', 'HEAD:main'], work);
  fake = await startFakeGitHub({ owner: 'acme', repo: 'app', token: TOKEN, gitRoot: root });
  octokit = new Octokit({ baseUrl: fake.url, auth: TOKEN });
  db = await openEmbeddedDatabase();
});

afterAll(async () => {
  await fake?.close();
  await db?.close();
});

test('a revert and a fix of its lines are escaped defects; an unrelated fix and a revert after the window are not', async () => {
  const reverted = await mergedSession('s-revert', 'discount.js', 'export const discount = (p) => p * 0.9;\n');
  await mergedSession('s-fixed', 'tax.js', 'export const tax = (p) => p * 0.2;\nexport const rate = 20;\n');
  const late = await mergedSession('s-late', 'shipping.js', 'export const shipping = () => 5;\n');

  git(['-c', 'user.name=dev', '-c', 'user.email=dev@x', 'revert', '--no-edit', '-m', '1', reverted.merge], work);
  await write('tax.js', 'export const tax = (p) => Math.round(p * 0.2);\nexport const rate = 20;\n');
  commitAll('fix: tax is rounded to the cent');
  await write('cart.js', 'export const total = (items) => items.reduce((a, i) => a + i.price, 0);\n');
  commitAll('fix: the total adds prices');
  git(['revert', '--no-commit', '-m', '1', late.merge], work);
  commitAll(`Revert "drydock: s-late"`, new Date(Date.now() + 2 * HOUR).toISOString());
  git(['push', '--quiet', 'origin', 'main'], work);

  const sweep = () =>
    sweepEscapedDefects({
      pool: db.pool,
      octokitFor: async () => octokit,
      windowMs: HOUR,
      now: () => new Date(Date.now() + 3 * HOUR),
    });
  const first = await sweep();
  expect(first.searched).toBe(3);
  const { rows } = await db.pool.query('select session_id, kind, summary from escaped_defects order by session_id');
  expect(rows).toEqual([
    {
      session_id: 's-fixed',
      kind: 'fix',
      summary: expect.stringMatching(/^fix: tax is rounded.*tax\.js: export const tax/),
    },
    { session_id: 's-revert', kind: 'revert', summary: 'Revert "Merge pull request #1 from drydock/s-revert"' },
  ]);
  // Every window has passed and was searched to its end: nothing is searched again, nothing added.
  expect(await sweep()).toEqual({ searched: 0, found: [] });
  const checks = await db.pool.query('select session_id from defect_checks where checked_until = window_ends');
  expect(checks.rows).toHaveLength(3);
});

test('the rules: which commits revert a change, which lines a fix touched', () => {
  const change = { mergeCommit: 'a'.repeat(40), commits: ['b'.repeat(40)], title: 'drydock: x' };
  expect(revertsChange(`Revert "drydock: x"\n\nThis reverts commit ${'a'.repeat(40)}.`, change)).toBe(true);
  expect(revertsChange(`Revert something\n\nThis reverts commit ${'b'.repeat(12)}.`, change)).toBe(true);
  expect(revertsChange(`Revert "drydock: y"\n\nThis reverts commit ${'c'.repeat(40)}.`, change)).toBe(false);
  const added = { 'a.js': '@@ -0,0 +1,3 @@\n+const x = 1;\n+}\n+const y = 2;' };
  expect(linesTouched(added, { 'a.js': '@@ -1,1 +1,1 @@\n-const x = 1;\n+const x = 3;\n-}' })).toEqual([
    'a.js: const x = 1;',
  ]);
  expect(linesTouched(added, { 'b.js': '@@ -1 +1 @@\n-const x = 1;\n+const x = 3;' })).toEqual([]);
  const later = [
    { sha: '1', message: 'fix: y', committedAt: 't', patches: { 'a.js': '-const y = 2;\n+const y = 3;' } },
    { sha: '2', message: 'tidy: x', committedAt: 't', patches: { 'a.js': '-const x = 1;' } },
  ];
  expect(
    escapedDefects({ ...change, number: 1, mergedAt: 't', base: 'main', patches: added }, later).map((d) => d.commit),
  ).toEqual(['1']);
});
