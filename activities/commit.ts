/** Committing the agent's change in the sandbox and describing it from a git bundle, with the worker's git. */
import { createHash } from 'node:crypto';
import { inspectBundle, mirrorOf } from '../lib/git';
import { permanent } from './container';
import type { ActivityDeps } from './deps';
import type { CommitInput, CommitResult } from './types';

/** What an approval binds to: the target branch and the whole diff. */
function changeHash(branch: string, diff: string): string {
  return createHash('sha256').update(`${branch}\0`).update(diff).digest('hex');
}

/**
 * The sandbox's commits on `branch` since `base`, as a git bundle written to
 * stdout (the sandbox has no network); undefined when there are none.
 */
export async function exportBundle(
  sandboxes: ActivityDeps['sandboxes'],
  sandbox: string,
  base: string,
  branch: string,
): Promise<Buffer | undefined> {
  const result = await sandboxes.exec(sandbox, ['git', 'bundle', 'create', '-', `${base}..refs/heads/${branch}`]);
  if (result.exitCode === 0) return result.stdout;
  if (/empty bundle/i.test(result.stderr.toString())) return undefined;
  throw new Error(`git bundle failed: ${result.stderr.toString().trim()}`);
}

export function createCommitActivities({ sandboxes, artifacts, mirrorsDir }: ActivityDeps) {
  return {
    /**
     * Commits whatever the agent changed on the session branch (idempotent),
     * then describes the change from a bundle, with the worker's git.
     */
    async commitChanges(input: CommitInput): Promise<CommitResult> {
      try {
        await sandboxes.run(
          input.sandbox,
          [
            'sh',
            '-c',
            'set -e; git checkout -q -B "$1"; git add -A; git diff --cached --quiet || git commit -q -m "$2"',
            'commit',
            input.branch,
            input.message,
          ],
          { env: [`GIT_AUTHOR_DATE=${input.date}`, `GIT_COMMITTER_DATE=${input.date}`] },
        );
        const bundle = await exportBundle(sandboxes, input.sandbox, input.baseCommit, input.branch);
        if (!bundle) {
          return { commit: input.baseCommit, changed: false, diffstat: '', changeHash: changeHash(input.branch, '') };
        }
        const change = await inspectBundle({
          mirror: mirrorOf(mirrorsDir, input.repoUrl),
          bundle,
          branch: input.branch,
          base: input.baseCommit,
        });
        return {
          commit: change.commit,
          changed: true,
          diffstat: change.diffstat,
          changeHash: changeHash(input.branch, change.diff),
          diff: await artifacts.put(input.sessionId, 'change.diff', change.diff),
        };
      } catch (err) {
        permanent(err);
      }
    },
  };
}
