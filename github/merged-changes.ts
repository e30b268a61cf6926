/**
 * What happened on GitHub after a drydock pull request was merged: the pull
 * request (its merge commit and the lines it added), and the commits on its
 * base branch within a window after the merge, each with its patch. Read with
 * the REST API only (GET), for the escaped-defect search (figures/defects.ts).
 */
import type { Octokit } from '@octokit/rest';

export interface MergedChange {
  number: number;
  title: string;
  mergedAt: string;
  mergeCommit: string;
  /** The pull request's own commits (a revert may name any of them). */
  commits: string[];
  base: string;
  /** File → its patch in the pull request. */
  patches: Record<string, string>;
}

export interface LaterCommit {
  sha: string;
  message: string;
  committedAt: string;
  /** File → patch; read only for the commits `needPatch` asks about. */
  patches?: Record<string, string>;
}

/** Commits read after a merge, at most: a window's worth on a busy branch. */
const MAX_COMMITS = 500;

/** The merged pull request, or undefined when it was not merged. */
export async function mergedChange(
  octokit: Octokit,
  repo: { owner: string; repo: string },
  number: number,
): Promise<MergedChange | undefined> {
  const { data: pr } = await octokit.pulls.get({ ...repo, pull_number: number });
  if (!pr.merged_at || !pr.merge_commit_sha) return undefined;
  const files = await octokit.paginate(octokit.pulls.listFiles, { ...repo, pull_number: number, per_page: 100 });
  const commits = await octokit.paginate(octokit.pulls.listCommits, { ...repo, pull_number: number, per_page: 100 });
  return {
    number,
    title: pr.title,
    mergedAt: pr.merged_at,
    mergeCommit: pr.merge_commit_sha,
    commits: commits.map((c) => c.sha),
    base: pr.base.ref,
    patches: Object.fromEntries(files.filter((f) => f.patch).map((f) => [f.filename, f.patch!])),
  };
}

/**
 * The base branch's commits from the merge to `until`, oldest first, the
 * merge commit itself left out; the patch of each one `needPatch` names.
 */
export async function commitsAfter(
  octokit: Octokit,
  repo: { owner: string; repo: string },
  change: MergedChange,
  until: Date,
  needPatch: (message: string) => boolean,
): Promise<LaterCommit[]> {
  const listed = await octokit.paginate(
    octokit.repos.listCommits,
    { ...repo, sha: change.base, since: change.mergedAt, until: until.toISOString(), per_page: 100 },
    (response, done) => {
      if (response.data.length < 100) done();
      return response.data;
    },
  );
  const later = listed
    .filter((c) => c.sha !== change.mergeCommit && !change.commits.includes(c.sha))
    .slice(0, MAX_COMMITS)
    .map((c) => ({
      sha: c.sha,
      message: c.commit.message,
      committedAt: c.commit.committer?.date ?? c.commit.author?.date ?? change.mergedAt,
    }))
    .reverse();
  for (const commit of later as LaterCommit[]) {
    if (!needPatch(commit.message)) continue;
    const { data } = await octokit.repos.getCommit({ ...repo, ref: commit.sha });
    commit.patches = Object.fromEntries((data.files ?? []).filter((f) => f.patch).map((f) => [f.filename, f.patch!]));
  }
  return later;
}
