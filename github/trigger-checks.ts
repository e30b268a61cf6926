/**
 * What `drydock serve` asks GitHub before a trigger may start a session: the
 * payload cannot prove these. Read-only calls with the server's credentials.
 */
import type { Octokit } from '@octokit/rest';
import { BRANCH_PREFIX, type StartTrigger } from './webhooks';
import { repoRef } from './writes';

/** The API's `permission` (maintain counts as write, triage as read): who may push. */
const WRITERS = ['admin', 'write'];

/** Why the trigger must not start a session, or undefined when it may. */
export async function refusalFromGitHub(
  octokit: Octokit,
  trigger: StartTrigger,
): Promise<{ reason: string; status: 202 | 403 | 422; answer: boolean } | undefined> {
  const where = repoRef(trigger.repo);
  const { writer, pullRequest, branchHead } = trigger.check ?? {};
  if (writer) {
    const refused = await writerRefusal(octokit, trigger.repo, writer);
    if (refused) return { reason: refused, status: 403, answer: true };
  }
  if (pullRequest) {
    const { data: pr } = await octokit.pulls.get({ ...where, pull_number: pullRequest });
    if (pr.head.repo?.full_name !== trigger.repo) {
      return {
        reason: `pull request #${pullRequest} comes from a fork (${pr.head.repo?.full_name})`,
        status: 422,
        answer: true,
      };
    }
  }
  if (branchHead) {
    const head = await branchHeadOf(octokit, trigger.repo, branchHead.branch);
    if (head !== branchHead.sha) {
      // A fork's branch, or a branch that moved on (its newer commit has its own runs).
      return {
        reason: `${branchHead.sha.slice(0, 12)} is not the head of ${trigger.repo}'s branch ${branchHead.branch} (a fork's run, or the branch moved on)`,
        status: 202,
        answer: false,
      };
    }
  }
  return undefined;
}

/** Why `user` may not act on `repo` through a comment (no write permission), or undefined when they may. */
export async function writerRefusal(octokit: Octokit, repo: string, user: string): Promise<string | undefined> {
  const { data } = await octokit.repos.getCollaboratorPermissionLevel({ ...repoRef(repo), username: user });
  return WRITERS.includes(data.permission)
    ? undefined
    : `${user} has ${data.permission} permission on ${repo}, not write`;
}

/** The session whose pull request this is (its branch is drydock/<session> in the repo itself), if any. */
export async function sessionOfPullRequest(
  octokit: Octokit,
  repo: string,
  number: number,
): Promise<string | undefined> {
  const { data: pr } = await octokit.pulls.get({ ...repoRef(repo), pull_number: number });
  if (pr.head.repo?.full_name !== repo || !pr.head.ref.startsWith(BRANCH_PREFIX)) return undefined;
  return pr.head.ref.slice(BRANCH_PREFIX.length);
}

async function branchHeadOf(octokit: Octokit, repo: string, branch: string): Promise<string | undefined> {
  try {
    const { data } = await octokit.repos.getBranch({ ...repoRef(repo), branch });
    return data.commit.sha;
  } catch (err) {
    if ((err as { status?: number }).status === 404) return undefined;
    throw err;
  }
}

/**
 * Why pull request `number` of `repo` is not the one the session published
 * (`published`: its URL, as the session's status or memo has it), if it is
 * not. Its branch name proves nothing: a writer of any repository drydock
 * serves can open a pull request from a branch named drydock/<this session>,
 * and must not end this session's follow-ups, mark it merged or steer it.
 */
export function notSessionsPullRequest(
  sessionId: string,
  published: string | undefined,
  at: { repo: string; number: number },
): string | undefined {
  if (!published) return `session ${sessionId} has published no pull request`;
  let path = '';
  try {
    path = new URL(published).pathname.replace(/\/+$/, '').toLowerCase();
  } catch {
    // Not a URL: matches nothing.
  }
  if (path.endsWith(`/${at.repo.toLowerCase()}/pull/${at.number}`)) return undefined;
  return `pull request #${at.number} of ${at.repo} is not the one session ${sessionId} published (${published})`;
}

/**
 * Why a follow-up from pull request `at` (in the repository drydock serves as
 * `at.repoUrl`) is not for the session, if it is not: once the session
 * published a pull request, only that one steers it; before (its branch
 * pushed, a pull request opened by hand), one in the session's own repository.
 */
export function notSessionsFollowup(
  sessionId: string,
  session: { repo: string; pullRequest?: string },
  at: { repo: string; repoUrl: string; number: number },
): string | undefined {
  if (session.pullRequest) return notSessionsPullRequest(sessionId, session.pullRequest, at);
  if (session.repo === at.repoUrl) return undefined;
  return `pull request #${at.number} of ${at.repo} is not in session ${sessionId}'s repository`;
}
