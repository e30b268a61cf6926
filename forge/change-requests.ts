/**
 * What `drydock serve` asks a forge before a trigger may start or steer a
 * session (the payload cannot prove these), and which change request is a
 * session's. The same on every forge, through a ForgeRepo with the server's
 * credentials.
 */
import type { ForgeRepo } from './forge';
import { BRANCH_PREFIX, type StartTrigger } from './triggers';

/** Why the trigger must not start a session, or undefined when it may. */
export async function refusalFromForge(
  repo: ForgeRepo,
  trigger: StartTrigger,
): Promise<{ reason: string; status: 202 | 403 | 422; answer: boolean } | undefined> {
  const { writer, pullRequest, branchHead } = trigger.check ?? {};
  if (writer) {
    const refused = await repo.writerRefusal(writer);
    if (refused) return { reason: refused, status: 403, answer: true };
  }
  if (pullRequest) {
    const cr = await repo.changeRequest(pullRequest);
    if (!cr.fromThisRepo) {
      return {
        reason: `pull request #${pullRequest} comes from a fork${cr.headRepo ? ` (${cr.headRepo})` : ''}`,
        status: 422,
        answer: true,
      };
    }
  }
  if (branchHead) {
    const head = await repo.branchHead(branchHead.branch);
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

/** The session whose change request this is (its branch is drydock/<session> in the repo itself), if any. */
export async function sessionOfChangeRequest(repo: ForgeRepo, number: number): Promise<string | undefined> {
  const cr = await repo.changeRequest(number);
  if (!cr.fromThisRepo || !cr.headBranch.startsWith(BRANCH_PREFIX)) return undefined;
  return cr.headBranch.slice(BRANCH_PREFIX.length);
}

/** The path of change request `number` on each forge: GitHub's pull/N, GitLab's -/merge_requests/N, Gitea's pulls/N. */
const CHANGE_REQUEST_PATHS = ['pull', '-/merge_requests', 'pulls'];

/**
 * Why change request `number` of `repo` is not the one the session published
 * (`published`: its URL, as the session's status or memo has it), if it is
 * not. Its branch name proves nothing: a writer of any repository drydock
 * serves can open a change request from a branch named drydock/<this
 * session>, and must not end this session's follow-ups, mark it merged or
 * steer it.
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
  const repo = at.repo.toLowerCase();
  if (CHANGE_REQUEST_PATHS.some((kind) => path.endsWith(`/${repo}/${kind}/${at.number}`))) return undefined;
  return `pull request #${at.number} of ${at.repo} is not the one session ${sessionId} published (${published})`;
}

/**
 * Why a follow-up from change request `at` (in the repository drydock serves
 * as `at.repoUrl`) is not for the session, if it is not: once the session
 * published a change request, only that one steers it; before (its branch
 * pushed, one opened by hand), one in the session's own repository.
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
