/**
 * The agent's change as drydock's own commit: the sandbox snapshots its
 * working tree, the worker commits that tree on the parent with its own
 * identity, and describes it with its own git.
 */
import { createHash } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/api';
import { CHANGE_REF, describeChange, mirrorOf, sealChange, type CommitSpec, type GitIdentity } from '../lib/git';
import { CommandExitError } from '../lib/sandbox';
import { permanent, STATE_DIR } from './container';
import type { ActivityDeps } from './deps';
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
 * the base under CHANGE_REF, and writes it out as a git bundle (see
 * exportSnapshot), in the same exec. Prints "unchanged" when its tree is the base's.
 */
const SNAPSHOT = [
  'set -e',
  'i="$3/change.index"; cp .git/index "$i" 2>/dev/null || rm -f "$i"; export GIT_INDEX_FILE="$i"',
  'git add -A; t=$(git write-tree); rm -f "$i"',
  'if [ "$t" = "$(git rev-parse "$1^{tree}")" ]; then git update-ref -d "$4" 2>/dev/null || true; echo unchanged; exit 0; fi',
  'export GIT_AUTHOR_NAME=sandbox GIT_AUTHOR_EMAIL=sandbox@drydock GIT_AUTHOR_DATE="$2"',
  'export GIT_COMMITTER_NAME=sandbox GIT_COMMITTER_EMAIL=sandbox@drydock GIT_COMMITTER_DATE="$2"',
  'git update-ref "$4" "$(git commit-tree --no-gpg-sign "$t" -p "$1" -m snapshot)"',
  'git bundle create - "$5..$4"',
].join('\n');

/** Takes the snapshot and returns its bundle; undefined when the working tree is the base's. */
async function snapshot(sandboxes: ActivityDeps['sandboxes'], input: CommitInput): Promise<Buffer | undefined> {
  const taken = await sandboxes.exec(input.sandbox, [
    'sh',
    '-c',
    SNAPSHOT,
    'snapshot',
    input.baseCommit,
    input.date,
    STATE_DIR,
    CHANGE_REF,
    input.baseCommit,
  ]);
  if (taken.exitCode !== 0) {
    throw new CommandExitError('snapshot of the change', taken.exitCode, '', taken.stderr.toString());
  }
  // A bundle starts "# v2 git bundle" (or v3); anything else is the "unchanged" answer.
  return taken.stdout.subarray(0, 3).toString() === '# v' ? taken.stdout : undefined;
}

/**
 * The sandbox's snapshot (CHANGE_REF) as a git bundle written to stdout (the
 * sandbox has no network): the snapshot commit and the objects it adds to the base.
 */
export async function exportSnapshot(
  sandboxes: ActivityDeps['sandboxes'],
  sandbox: string,
  base: string,
): Promise<Buffer> {
  const result = await sandboxes.exec(sandbox, ['git', 'bundle', 'create', '-', `${base}..${CHANGE_REF}`]);
  if (result.exitCode === 0) return result.stdout;
  throw ApplicationFailure.nonRetryable(
    `the sandbox has no snapshot of the change to export: ${result.stderr.toString().trim()}`,
    ErrorType.PushRejected,
  );
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
        const bundle = await snapshot(sandboxes, input);
        if (!bundle) return unchanged(input);
        const mirror = mirrorOf(mirrorsDir, input.repoUrl);
        return await sealChange(mirror, bundle, commitSpec(input, author), async ({ commit, tree }) => {
          const change = await describeChange(mirror, input.parent, commit);
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
        });
      } catch (err) {
        permanent(err);
      }
    },
  };
}
