import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/api';
import type { ActivityDeps } from './deps';
import { GitError, pushBundle, updateMirror } from '../lib/git';
import { SandboxNotFound } from '../lib/sandbox';

export interface PushInput {
  sandbox: string;
  sessionId: string;
  repoUrl: string;
  branch: string;
  baseCommit: string;
  commit: string;
}

export function createPublishActivities({ sandboxes, mirrorsDir, log }: ActivityDeps) {
  return {
    /**
     * Exports the branch from the sandbox as a git bundle and pushes it from
     * the worker, which holds any credentials. Pushing a commit the remote
     * already has is a no-op, so a retry never pushes twice.
     */
    async pushBranch(input: PushInput): Promise<{ commit: string; alreadyPushed: boolean }> {
      let bundle: Buffer;
      try {
        const result = await sandboxes.exec(input.sandbox, [
          'git',
          'bundle',
          'create',
          '-',
          `${input.baseCommit}..refs/heads/${input.branch}`,
        ]);
        if (result.exitCode !== 0) throw new Error(`git bundle failed: ${result.stderr.toString().trim()}`);
        bundle = result.stdout;
      } catch (err) {
        if (err instanceof SandboxNotFound) {
          throw ApplicationFailure.nonRetryable(err.message, ErrorType.SandboxNotFound);
        }
        throw err;
      }
      const mirror = await updateMirror(mirrorsDir, input.repoUrl);
      try {
        const { alreadyPushed } = await pushBundle({
          mirror,
          url: input.repoUrl,
          bundle,
          branch: input.branch,
          commit: input.commit,
        });
        log.info({ sessionId: input.sessionId, branch: input.branch, commit: input.commit, alreadyPushed }, 'pushed');
        return { commit: input.commit, alreadyPushed };
      } catch (err) {
        if (err instanceof GitError && /rejected|non-fast-forward|fetch first/.test(err.stderr)) {
          throw ApplicationFailure.nonRetryable(
            `push of ${input.branch} was rejected: the remote branch has other commits (${err.message})`,
            ErrorType.PushRejected,
          );
        }
        throw err;
      }
    },
  };
}
