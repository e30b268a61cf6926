/**
 * The agent's change as drydock's own commit: the sandbox snapshots its
 * working tree, the worker commits that tree on the parent with its own
 * identity, and describes it with its own git.
 */
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/api';
import { CHANGE_REF, describeChange, mirrorOf, sealChange, type CommitSpec, type GitIdentity } from '../lib/git';
import { permanent, STATE_DIR } from './container';
import type { ActivityDeps } from './deps';
import { OUTPUT_CAPS } from './output';
import type { ChangeSpec, CommitInput, CommitResult } from './types';

/** Author and committer of drydock's commits unless the worker names its own (DRYDOCK_COMMIT_NAME/EMAIL). */
export const DEFAULT_COMMIT_IDENTITY: GitIdentity = { name: 'drydock', email: 'drydock@localhost' };

/** What an approval binds to: the target branch, the parent and the tree (so the exact commit pushed). */
function changeHash(branch: string, parent: string, tree: string): string {
  return createHash('sha256').update(`${branch}\0${parent}\0${tree}`).digest('hex');
}

/** The commit message: the subject, then trailers naming the session and the agent. */
export function commitMessage(spec: ChangeSpec): string {
  // A NUL cannot be passed to git; the trailers are the last paragraph, so the subject cannot forge them.
  const subject = spec.message.replace(/\0/g, '').trim() || 'drydock change';
  return `${subject}\n\nDrydock-Session: ${spec.sessionId}\nDrydock-Agent: ${spec.agent}\n`;
}

/** The fields of drydock's commit of this change. */
export function commitSpec(spec: ChangeSpec, author: GitIdentity): CommitSpec {
  return { parent: spec.parent, author, date: spec.date, message: commitMessage(spec) };
}

/**
 * Snapshots the sandbox's working tree (untracked files too, through a
 * scratch index so the agent's own staging stays untouched) as one commit on
 * the base under CHANGE_REF. Prints "unchanged" when its tree is the base's.
 */
const SNAPSHOT = [
  'set -e',
  'i="$3/change.index"; cp .git/index "$i" 2>/dev/null || rm -f "$i"; export GIT_INDEX_FILE="$i"',
  'git add -A; t=$(git write-tree); rm -f "$i"',
  'if [ "$t" = "$(git rev-parse "$1^{tree}")" ]; then git update-ref -d "$4" 2>/dev/null || true; echo unchanged; exit 0; fi',
  'export GIT_AUTHOR_NAME=sandbox GIT_AUTHOR_EMAIL=sandbox@drydock GIT_AUTHOR_DATE="$2"',
  'export GIT_COMMITTER_NAME=sandbox GIT_COMMITTER_EMAIL=sandbox@drydock GIT_COMMITTER_DATE="$2"',
  'git update-ref "$4" "$(git commit-tree --no-gpg-sign "$t" -p "$1" -m snapshot)"; echo changed',
].join('\n');

/** Takes the snapshot; false when the working tree is the base's. */
async function snapshot(sandboxes: ActivityDeps['sandboxes'], input: CommitInput): Promise<boolean> {
  const out = await sandboxes.run(input.sandbox, [
    'sh',
    '-c',
    SNAPSHOT,
    'snapshot',
    input.baseCommit,
    input.date,
    STATE_DIR,
    CHANGE_REF,
  ]);
  return out.trim().split('\n').pop() === 'changed';
}

/**
 * Runs `fn` with the sandbox's snapshot (CHANGE_REF) as a git bundle file on
 * the worker's disk (`<data dir>/spool`, beside the mirrors; removed afterwards): the snapshot
 * commit and the objects it adds to the base. The sandbox (no network) writes
 * it to stdout; it streams to the file, at most OUTPUT_CAPS.bundle of it.
 */
export async function withSnapshotBundle<T>(
  { sandboxes, mirrorsDir }: Pick<ActivityDeps, 'sandboxes' | 'mirrorsDir'>,
  at: { sandbox: string; base: string },
  fn: (bundle: string) => Promise<T>,
): Promise<T> {
  // Not in the mirrors folder itself: every entry there is a mirror.
  const spool = path.join(path.dirname(mirrorsDir), 'spool');
  await mkdir(spool, { recursive: true });
  const dir = await mkdtemp(path.join(spool, 'change-'));
  try {
    const file = path.join(dir, 'change.bundle');
    const argv = ['git', 'bundle', 'create', '-', `${at.base}..${CHANGE_REF}`];
    const result = await sandboxes.execToFile(at.sandbox, argv, file, OUTPUT_CAPS.bundle).catch(permanent);
    if (result.exitCode !== 0) {
      throw ApplicationFailure.nonRetryable(
        `the sandbox has no snapshot of the change to export: ${result.stderr.toString().trim()}`,
        ErrorType.PushRejected,
      );
    }
    return await fn(file);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export function createCommitActivities({ sandboxes, artifacts, mirrorsDir, commitIdentity, redactor }: ActivityDeps) {
  const author = commitIdentity ?? DEFAULT_COMMIT_IDENTITY;
  const unchanged = (input: CommitInput): CommitResult => ({
    commit: input.parent,
    changed: false,
    diffstat: '',
    changeHash: changeHash(input.branch, input.parent, ''),
    author,
  });
  return {
    /**
     * Makes drydock's commit of the sandbox's working tree (idempotent: the
     * same tree, parent and date give the same commit) and describes it.
     */
    async commitChanges(input: CommitInput): Promise<CommitResult> {
      try {
        if (!(await snapshot(sandboxes, input))) return unchanged(input);
        const mirror = mirrorOf(mirrorsDir, input.repoUrl);
        const at = { sandbox: input.sandbox, base: input.baseCommit };
        return await withSnapshotBundle({ sandboxes, mirrorsDir }, at, (bundle) =>
          sealChange(mirror, bundle, commitSpec(input, author), async ({ commit, tree }) => {
            const change = await describeChange(mirror, input.parent, commit, OUTPUT_CAPS.changeDiff);
            // A follow-up round that changed nothing since the pushed commit makes no commit.
            if (!change.diff) return unchanged(input);
            return {
              commit,
              changed: true,
              diffstat: redactor.text(change.diffstat),
              changeHash: changeHash(input.branch, input.parent, tree),
              author,
              diff: await artifacts.put(input.sessionId, 'change.diff', await redactor.large(change.diff)),
            };
          }),
        );
      } catch (err) {
        permanent(err);
      }
    },
  };
}
