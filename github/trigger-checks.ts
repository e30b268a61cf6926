/**
 * Who may trigger on GitHub: a collaborator with write permission. The checks
 * every forge shares (forks, branch heads, which change request is a
 * session's) are forge/change-requests.ts.
 */
import type { Octokit } from '@octokit/rest';
import { repoRef } from './writes';

export { notSessionsFollowup, notSessionsPullRequest } from '../forge/change-requests';

/** The API's `permission` (maintain counts as write, triage as read): who may push. */
const WRITERS = ['admin', 'write'];

/** Why `user` may not act on `repo` through a comment (no write permission), or undefined when they may. */
export async function writerRefusal(octokit: Octokit, repo: string, user: string): Promise<string | undefined> {
  const { data } = await octokit.repos.getCollaboratorPermissionLevel({ ...repoRef(repo), username: user });
  return WRITERS.includes(data.permission)
    ? undefined
    : `${user} has ${data.permission} permission on ${repo}, not write`;
}
