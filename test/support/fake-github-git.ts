/**
 * The local GitHub's answers that come from the repository itself (served
 * from the bare repo under `gitRoot`, as GitHub answers from its own): a
 * branch's commits (GET /commits with sha, since, until, per_page, page), one
 * commit with its files and patches, a pull request's commits and files, and
 * merging a pull request (PUT /pulls/{n}/merge: a real merge commit on the
 * base, GitHub's response shape). Used by test/support/fake-github.ts.
 */
import { execFileSync } from 'node:child_process';

export interface GitPullRequest {
  number: number;
  head: string;
  base: string;
  title: string;
  state?: string;
  merged?: boolean;
  merged_at?: string | null;
  merge_commit_sha?: string | null;
  /** The pull request's commits, kept at its merge (the base has them all afterwards). */
  mergedCommits?: string[];
  /** Seeded files: answered as seeded, not from git. */
  files?: unknown[];
}

const git = (bare: string, args: string[], env: Record<string, string> = {}) =>
  execFileSync('git', args, { cwd: bare, encoding: 'utf8', env: { ...process.env, ...env }, maxBuffer: 64 << 20 });

/** A commit as GET /repos/{o}/{r}/commits lists it. */
function listed(bare: string, sha: string) {
  const [author, authorDate, committer, committerDate, parents, ...message] = git(bare, [
    'show',
    '-s',
    '--format=%an%x00%aI%x00%cn%x00%cI%x00%P%x00%B',
    sha,
  ]).split('\0');
  return {
    sha,
    commit: {
      message: message.join('\0').trimEnd(),
      author: { name: author, date: authorDate },
      committer: { name: committer, date: committerDate },
    },
    parents: parents
      .split(' ')
      .filter(Boolean)
      .map((p) => ({ sha: p })),
  };
}

/** Files and patches between two commits, as GitHub shows them. */
function files(bare: string, from: string, to: string) {
  const stat = git(bare, ['diff', '--numstat', '--no-renames', from, to]).trim();
  if (!stat) return [];
  return stat.split('\n').map((line) => {
    const [additions, deletions, filename] = line.split('\t');
    const patch = git(bare, ['diff', '--no-renames', '--no-color', '-U3', from, to, '--', filename]);
    const hunks = patch.slice(patch.indexOf('\n@@') + 1);
    const status = Number(deletions) === 0 && /^new file/m.test(patch) ? 'added' : 'modified';
    return { filename, status, additions: Number(additions), deletions: Number(deletions), patch: hunks.trimEnd() };
  });
}

/** The routes; false when `sub` (the path under /repos/{o}/{r}) is not one of them. */
export function gitRoutes(
  bare: string,
  method: string,
  sub: string,
  query: URLSearchParams,
  body: any,
  pulls: GitPullRequest[],
  send: (status: number, data: unknown) => void,
): boolean {
  const at = (pattern: string, verb = 'GET') => (method === verb ? new RegExp(`^${pattern}$`).exec(sub) : null);
  let m: RegExpExecArray | null;
  if (at('/commits')) {
    const args = ['rev-list', query.get('sha') ?? 'HEAD'];
    if (query.get('since')) args.push(`--since=${query.get('since')}`);
    if (query.get('until')) args.push(`--until=${query.get('until')}`);
    const shas = git(bare, args).trim().split('\n').filter(Boolean);
    const perPage = Number(query.get('per_page') ?? 30);
    const page = Number(query.get('page') ?? 1);
    send(
      200,
      shas.slice((page - 1) * perPage, page * perPage).map((sha) => listed(bare, sha)),
    );
  } else if ((m = at('/commits/([^/]+)'))) {
    const sha = git(bare, ['rev-parse', '--verify', '--quiet', `${m[1]}^{commit}`]).trim();
    const first = git(bare, ['rev-list', '--parents', '-n', '1', sha]).trim().split(' ')[1];
    send(200, { ...listed(bare, sha), files: first ? files(bare, first, sha) : [] });
  } else if ((m = at('/pulls/(\\d+)/commits'))) {
    const pr = pulls.find((p) => p.number === Number(m![1]));
    const shas =
      pr?.mergedCommits ??
      git(bare, ['rev-list', '--reverse', `${pr?.base}..${pr?.head}`])
        .trim()
        .split('\n');
    send(
      200,
      shas.filter(Boolean).map((sha) => listed(bare, sha)),
    );
  } else if ((m = at('/pulls/(\\d+)/files'))) {
    const pr = pulls.find((p) => p.number === Number(m![1]));
    if (!pr || pr.files) return false;
    const [from, to] = pr.merge_commit_sha ? [`${pr.merge_commit_sha}^1`, pr.merge_commit_sha] : [pr.base, pr.head];
    send(200, files(bare, git(bare, ['merge-base', from, to]).trim(), to));
  } else if ((m = at('/pulls/(\\d+)/merge', 'PUT'))) {
    const pr = pulls.find((p) => p.number === Number(m![1]));
    if (!pr) return false;
    if (pr.merged) return (send(405, { message: 'Pull Request is not mergeable' }), true);
    const commits = git(bare, ['rev-list', '--reverse', `${pr.base}..${pr.head}`])
      .trim()
      .split('\n');
    const tree = git(bare, ['merge-tree', '--write-tree', pr.base, pr.head]).trim().split('\n')[0];
    const message = `${body?.commit_title ?? `Merge pull request #${pr.number} from ${pr.head}`}\n\n${pr.title}`;
    const identity = { GIT_AUTHOR_NAME: 'GitHub', GIT_AUTHOR_EMAIL: 'noreply@github.com' };
    const env = { ...identity, GIT_COMMITTER_NAME: 'GitHub', GIT_COMMITTER_EMAIL: 'noreply@github.com' };
    const sha = git(bare, ['commit-tree', tree, '-p', pr.base, '-p', pr.head, '-m', message], env).trim();
    git(bare, ['update-ref', `refs/heads/${pr.base}`, sha]);
    Object.assign(pr, {
      state: 'closed',
      merged: true,
      merged_at: new Date().toISOString(),
      merge_commit_sha: sha,
      mergedCommits: commits,
    });
    send(200, { sha, merged: true, message: 'Pull Request successfully merged' });
  } else {
    return false;
  }
  return true;
}
