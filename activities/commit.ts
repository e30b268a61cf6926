/** Committing the agent's change in the sandbox and describing it from a git bundle, with the worker's git. */
import { createHash } from 'node:crypto';
import { inspectBundle, mirrorOf } from '../lib/git';
import { permanent } from './container';
import { bringCommit } from './provision';
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
     * Commits whatever the agent changed on the session branch, on top of
     * `parent` (idempotent: the same tree, parent, message and date are the
     * same commit; a tree equal to the parent's makes none), then describes
     * the change since the base from a bundle, with the worker's git.
     */
    async commitChanges(input: CommitInput): Promise<CommitResult> {
      try {
        if (input.parent !== input.baseCommit) {
          // A follow-up round in a new sandbox: the pushed commit is in the mirror (fetched with the branch).
          const mirror = mirrorOf(mirrorsDir, input.repoUrl);
          await bringCommit({ sandboxes }, input.sandbox, mirror, input.baseCommit, input.parent);
        }
        await sandboxes.run(
          input.sandbox,
          [
            'sh',
            '-c',
            'set -e; git add -A; t=$(git write-tree); c="$3"; ' +
              '[ "$(git rev-parse "$3^{tree}")" = "$t" ] || c=$(git commit-tree "$t" -p "$3" -m "$2"); ' +
              'git update-ref "refs/heads/$1" "$c"; git symbolic-ref HEAD "refs/heads/$1"',
            'commit',
            input.branch,
            input.message,
            input.parent,
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
