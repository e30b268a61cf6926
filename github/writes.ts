/**
 * Idempotent writes to GitHub for a session's trigger: a reaction, a comment
 * found again by a hidden marker, a commit status that is posted only when it
 * changes. A retried activity or a redelivered webhook looks before it
 * writes, so it adds nothing.
 */
import type { Octokit } from '@octokit/rest';

/** The status context drydock keeps on a session's commit. */
export const STATUS_CONTEXT = 'drydock';

export interface RepoRef {
  owner: string;
  repo: string;
}

export function repoRef(fullName: string): RepoRef {
  const [owner, repo] = fullName.split('/');
  return { owner, repo };
}

/** An HTML comment GitHub does not render: names what a comment reports. */
export function marker(key: string): string {
  return `<!-- drydock:${key} -->`;
}

/** Posts `body` on the issue unless a comment carrying `key`'s marker is there already. */
export async function commentOnce(
  octokit: Octokit,
  where: RepoRef & { issue: number },
  key: string,
  body: string,
): Promise<{ url: string; created: boolean }> {
  const tag = marker(key);
  const comments = await octokit.paginate(octokit.issues.listComments, {
    owner: where.owner,
    repo: where.repo,
    issue_number: where.issue,
    per_page: 100,
  });
  const found = comments.find((c) => c.body?.includes(tag));
  if (found) return { url: found.html_url, created: false };
  const { data } = await octokit.issues.createComment({
    owner: where.owner,
    repo: where.repo,
    issue_number: where.issue,
    body: `${body}\n\n${tag}`,
  });
  return { url: data.html_url, created: true };
}

/** Reacts to a comment; GitHub answers an existing reaction of the same user with 200 and adds none. */
export async function reactOnce(octokit: Octokit, where: RepoRef & { comment: number }, content: 'eyes' | 'rocket') {
  await octokit.reactions.createForIssueComment({
    owner: where.owner,
    repo: where.repo,
    comment_id: where.comment,
    content,
  });
}

export type StatusState = 'pending' | 'success' | 'failure' | 'error';

/** Sets the `drydock` status of a commit, unless its newest one already says exactly this. */
export async function setStatusOnce(
  octokit: Octokit,
  where: RepoRef & { sha: string },
  state: StatusState,
  description: string,
  targetUrl: string,
): Promise<boolean> {
  const { data: statuses } = await octokit.repos.listCommitStatusesForRef({
    owner: where.owner,
    repo: where.repo,
    ref: where.sha,
    per_page: 100,
  });
  // Newest first, as GitHub lists them.
  const newest = statuses.find((s) => s.context === STATUS_CONTEXT);
  const text = description.slice(0, 140);
  if (newest && newest.state === state && newest.description === text) return false;
  await octokit.repos.createCommitStatus({
    owner: where.owner,
    repo: where.repo,
    sha: where.sha,
    state,
    description: text,
    context: STATUS_CONTEXT,
    target_url: targetUrl,
  });
  return true;
}
