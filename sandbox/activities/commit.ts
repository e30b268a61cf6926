/**
 * The agent's change as drydock's own commit: the sandbox snapshots its
 * working tree, the worker commits that tree on the parent with its own
 * identity, and describes it with its own git.
 */
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, open, rm } from 'node:fs/promises';
import path from 'node:path';
import { changedFiles, checkChangeSize, secretsInChange } from '../../repos/change-check';
import type { SecretFound } from '../../workflows/rules/change-secrets';
import type { Redactor } from '../../platform/scrub';
import {
  CHANGE_REF,
  describeChange,
  hasCommit,
  mirrorOf,
  sealChange,
  type CommitSpec,
  type GitIdentity,
} from '../../repos/git';
import { roundDiffName } from '../../review/rounds';
import { NOTE_LIMITS, NOTES_FILE, splitProposedNotes } from '../../workflows/rules/repo-notes';
import { CommandExitError } from '../provider';
import { permanent, STATE_DIR } from './container';
import { DRYDOCK_GIT, OWN_GIT, sandboxOf, scriptArgv, SETUP_REF, type ShellScript } from '../handle';
import { OWN_GIT_DIR } from '../toolchains';
import type { SandboxDeps } from './deps';
import { OUTPUT_CAPS } from './output';
import type { ChangeSpec, CommitInput, CommitResult } from '../contract';

/** Author and committer of drydock's commits unless the worker names its own (DRYDOCK_COMMIT_NAME/EMAIL). */
export const DEFAULT_COMMIT_IDENTITY: GitIdentity = { name: 'drydock', email: 'drydock@localhost' };
/** How many of a change's paths its result carries (into the workflow's history): enough to place annotations. */
export const CHANGED_FILES_KEPT = 300;

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

/** The end of the snapshot's output: the mark, then the lengths of the leftovers' and the notes' parts before it. */
const TRAILER_MARK = 'DRYDOCK-SNAPSHOT';
const TRAILER_BYTES = TRAILER_MARK.length + 23;

/**
 * Snapshots the sandbox's working tree (untracked files too, through a
 * scratch index so the agent's own staging stays untouched) as one commit on
 * the base under CHANGE_REF, and writes it out as a git bundle (see
 * exportArgv), in the same exec. Prints "unchanged" when its tree is the base's.
 * The tree is taken by drydock's own git (sandbox/handle.ts, OWN_GIT): no filter
 * the repository's config defines runs. What setup wrote (SETUP_REF, $7) and
 * nobody changed since is left out: those paths are the base's in the commit,
 * and are listed in $3/setup-leftovers.
 *
 * The same exec reads what the worker would otherwise need more execs for,
 * after the bundle (see takeTrailer): how many files setup left out and the
 * first ${10} of them, and, when $8 names the notes file, the notes the agent
 * proposed (at most $9 bytes; the file is emptied, and what it held is kept
 * in the state folder under the commit's date, so a retry of this commit
 * reads the same notes), then the two lengths.
 */
export const SNAPSHOT: ShellScript = {
  name: 'snapshot',
  text: [
    'set -e',
    DRYDOCK_GIT,
    'base=$1 i="$3/change.index" g=$6',
    OWN_GIT,
    'l="$3/setup-leftovers"; rm -f "$l"',
    'm="$3/snapshot.meta"; : >"$m"; k=/dev/null',
    'if [ -n "$8" ]; then',
    '  k="$3/notes-$(printf %s "$2" | tr -c "A-Za-z0-9" _)"',
    '  if [ ! -f "$k" ]; then',
    '    rm -f "$3"/notes-*',
    '    if [ -f "$8" ]; then head -c "$9" "$8" >"$k.new"; : >"$8"; else : >"$k.new"; fi',
    '    mv "$k.new" "$k"',
    '  fi',
    'fi',
    `trailer() { cat "$m" "$k"; printf '${TRAILER_MARK} %010d %010d\\n' $(($(wc -c <"$m"))) $(($(wc -c <"$k"))); }`,
    'if s=$(git rev-parse -q --verify "$7^{commit}"); then',
    '  w=$(own_git write-tree)',
    '  own_git diff-tree -r --no-renames --name-only "$s^" "$s" >"$3/setup.paths"',
    '  own_git diff-tree -r --no-renames --name-only "$s" "$w" >"$3/since-setup.paths"',
    '  grep -Fxv -f "$3/since-setup.paths" "$3/setup.paths" >"$3/untouched.paths" || true',
    // Each untouched path as the base has it (mode 0: not in the base, so out of the index).
    '  own_git diff-tree -r --no-renames "$1" "$w" | awk -F "\t" -v l="$l" \'NR == FNR { k[$0] = 1; next }',
    '    $2 in k { split($1, m, " "); print substr(m[1], 2) " " m[3] "\t" $2; print $2 > l }\' "$3/untouched.paths" - |',
    '    own_git update-index --index-info',
    '  rm -f "$3/setup.paths" "$3/since-setup.paths" "$3/untouched.paths"',
    'fi',
    't=$(own_git write-tree); rm -f "$i"',
    'if [ "$t" = "$(git rev-parse "$1^{tree}")" ]; then git update-ref -d "$4" 2>/dev/null || true; echo unchanged; trailer; exit 0; fi',
    'export GIT_AUTHOR_NAME=sandbox GIT_AUTHOR_EMAIL=sandbox@drydock GIT_AUTHOR_DATE="$2"',
    'export GIT_COMMITTER_NAME=sandbox GIT_COMMITTER_EMAIL=sandbox@drydock GIT_COMMITTER_DATE="$2"',
    'git update-ref "$4" "$(git commit-tree --no-gpg-sign "$t" -p "$1" -m snapshot)"',
    'git bundle create - "$5..$4"',
    'if [ -f "$l" ]; then { wc -l <"$l"; head -n "${10}" "$l"; } >"$m"; fi',
    'trailer',
  ].join('\n'),
};

/** What the snapshot's exec read beside its bundle (see SNAPSHOT). */
export interface SnapshotTrailer {
  setupFiles?: { count: number; paths: string[] };
  /** The notes file's text (at most NOTE_LIMITS.fileBytes), unscrubbed. */
  notes: string;
}

/**
 * Reads the trailer off the end of the snapshot's output in `file` and cuts it
 * off, so the file is the bundle (or "unchanged") alone.
 */
export async function takeTrailer(file: string): Promise<SnapshotTrailer> {
  const handle = await open(file, 'r+');
  try {
    const { size } = await handle.stat();
    const end = Buffer.alloc(TRAILER_BYTES);
    await handle.read(end, 0, TRAILER_BYTES, Math.max(0, size - TRAILER_BYTES));
    const mark = new RegExp(`^${TRAILER_MARK} (\\d{10}) (\\d{10})\n$`).exec(end.toString('latin1'));
    const [listed, notes] = mark ? [Number(mark[1]), Number(mark[2])] : [-1, -1];
    const start = size - TRAILER_BYTES - listed - notes;
    if (!mark || start < 0) throw new Error('the snapshot of the change ended without its trailer');
    const meta = Buffer.alloc(listed + notes);
    await handle.read(meta, 0, meta.length, start);
    await handle.truncate(start);
    const lines = meta.subarray(0, listed).toString().split('\n');
    const count = Number(lines[0]) || 0;
    return {
      ...(count ? { setupFiles: { count, paths: lines.slice(1).filter(Boolean) } } : {}),
      notes: meta.subarray(listed).toString(),
    };
  } finally {
    await handle.close();
  }
}

/** How many of the files setup wrote the status names (the count is whole). */
const SETUP_FILES_LISTED = 20;

/**
 * The exec that takes the snapshot and writes its bundle (or "unchanged") to stdout, then its
 * trailer (takeTrailer); with `takeNotes` it takes the agent's notes too. `gitDir`: OWN_GIT's.
 */
export function snapshotArgv(
  input: Pick<CommitInput, 'baseCommit' | 'date' | 'takeNotes'>,
  stateDir = STATE_DIR,
  gitDir = OWN_GIT_DIR,
  notesFile = NOTES_FILE,
): string[] {
  const base = input.baseCommit;
  const notes = input.takeNotes ? [notesFile, String(NOTE_LIMITS.fileBytes)] : ['', '0'];
  const args = [base, input.date, stateDir, CHANGE_REF, base, gitDir, SETUP_REF, ...notes, String(SETUP_FILES_LISTED)];
  return scriptArgv(SNAPSHOT, args);
}

/** The exec that writes the snapshot (CHANGE_REF) already taken as a bundle: the objects it adds to `base`. */
export const exportArgv = (base: string): string[] => [
  'sh',
  '-c',
  `${DRYDOCK_GIT}; exec git bundle create - "$1..$2"`,
  'export',
  base,
  CHANGE_REF,
];

/**
 * Runs `fn` with the git bundle that `argv` writes to stdout in the sandbox
 * (which has no network), as a file on the worker's disk (`<data dir>/spool`,
 * beside the mirrors; removed afterwards); it streams there, at most
 * OUTPUT_CAPS.bundle of it. `fn` gets undefined when the output is not a bundle
 * (the snapshot's "unchanged"); `failed` makes the error of an exec that failed.
 */
export async function withSandboxBundle<T>(
  { sandboxes, mirrorsDir }: Pick<SandboxDeps, 'sandboxes' | 'mirrorsDir'>,
  at: {
    sandbox: string;
    argv: string[];
    failed: (stderr: string, exitCode: number) => Error;
    /** Reads (and cuts off) what the exec wrote after the bundle, before the file is looked at. */
    before?: (file: string) => Promise<void>;
  },
  fn: (bundle: string | undefined) => Promise<T>,
): Promise<T> {
  // Not in the mirrors folder itself: every entry there is a mirror.
  const spool = path.join(path.dirname(mirrorsDir), 'spool');
  await mkdir(spool, { recursive: true });
  const dir = await mkdtemp(path.join(spool, 'change-'));
  try {
    const file = path.join(dir, 'change.bundle');
    const result = await sandboxOf(sandboxes, at.sandbox)
      .commands.toFile(at.argv, file, OUTPUT_CAPS.bundle)
      .catch(permanent);
    if (result.exitCode !== 0) throw at.failed(result.stderr.toString().trim(), result.exitCode);
    await at.before?.(file);
    return await fn((await isBundle(file)) ? file : undefined);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** A bundle starts "# v2 git bundle" (or v3). */
async function isBundle(file: string): Promise<boolean> {
  const handle = await open(file, 'r');
  try {
    const { buffer, bytesRead } = await handle.read(Buffer.alloc(3), 0, 3, 0);
    return bytesRead === 3 && buffer.toString() === '# v';
  } finally {
    await handle.close();
  }
}

/**
 * The secrets drydock's commit `commit` holds against `parent` (its files
 * within the size cap, their paths, its message): checked again right before
 * a push, with the worker's secrets of that moment.
 */
export async function secretsInCommit(
  mirror: string,
  parent: string,
  commit: string,
  message: string,
  redactor: Redactor,
): Promise<SecretFound[]> {
  const files = await changedFiles(mirror, parent, commit);
  checkChangeSize(files, OUTPUT_CAPS.changeFiles);
  return secretsInChange(mirror, files, message, (c) => redactor.holds(c));
}

/**
 * A later round's change since each earlier round's commit, as the worker's
 * git shows it (within the diff's cap, unscrubbed like change.diff: the
 * change was checked for secrets first), kept for the reviewer who saw that
 * round (review/rounds.ts names them). A commit the mirror no longer has
 * (another host made it) has no interdiff; the console says so.
 */
async function keepInterdiffs(
  artifacts: SandboxDeps['artifacts'],
  mirror: string,
  input: CommitInput,
  commit: string,
): Promise<void> {
  const { round, since } = input.interdiffs ?? { round: 1, since: [] };
  for (const earlier of since) {
    if (!(await hasCommit(mirror, earlier.commit))) continue;
    const { diff } = await describeChange(mirror, earlier.commit, commit, OUTPUT_CAPS.changeDiff);
    await artifacts.put(input.sessionId, roundDiffName(round, earlier.round), diff);
  }
}

export function createCommitActivities({
  sandboxes,
  artifacts,
  mirrorsDir,
  commitIdentity,
  redactor,
}: Pick<SandboxDeps, 'sandboxes' | 'artifacts' | 'mirrorsDir' | 'commitIdentity' | 'redactor'>) {
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
        const mirror = mirrorOf(mirrorsDir, input.repoUrl);
        const failed = (stderr: string, code: number) =>
          new CommandExitError('snapshot of the change', code, '', stderr);
        let trailer: SnapshotTrailer = { notes: '' };
        const before = async (file: string) => void (trailer = await takeTrailer(file));
        const at = { sandbox: input.sandbox, argv: snapshotArgv(input), failed, before };
        const result = await withSandboxBundle({ sandboxes, mirrorsDir }, at, async (bundle) => {
          if (!bundle) return unchanged(input);
          const spec = commitSpec(input, author);
          return sealChange(mirror, bundle, spec, async ({ commit, tree }) => {
            // Sizes from the objects' headers first: only a change within its cap is ever inflated.
            const files = await changedFiles(mirror, input.parent, commit);
            checkChangeSize(files, OUTPUT_CAPS.changeFiles);
            const change = await describeChange(mirror, input.parent, commit, OUTPUT_CAPS.changeDiff);
            // A follow-up round that changed nothing since the pushed commit makes no commit.
            if (!change.diff) return unchanged(input);
            const { setupFiles } = trailer;
            const made = {
              commit,
              changed: true,
              changeHash: changeHash(input.branch, input.parent, tree),
              author,
              ...(setupFiles ? { setupFiles } : {}),
            };
            const secrets = await secretsInChange(mirror, files, spec.message, (c) => redactor.holds(c));
            // Never published, so never shown: the status says which secret, and where.
            if (secrets.length) return { ...made, diffstat: redactor.text(change.diffstat), blocked: secrets };
            await keepInterdiffs(artifacts, mirror, input, commit);
            // The reviewer's diff is the pushed tree, byte for byte: nothing in it is scrubbed.
            const diff = await artifacts.put(input.sessionId, 'change.diff', change.diff);
            const paths = files.slice(0, CHANGED_FILES_KEPT).map((f) => f.path);
            return { ...made, diffstat: change.diffstat, files: paths, diff };
          });
        });
        // The notes the agent proposed, scrubbed and bounded like every proposal (the workflow keeps them at the round's end).
        const notes = splitProposedNotes(redactor.text(trailer.notes));
        return notes.length ? { ...result, notes } : result;
      } catch (err) {
        permanent(err);
      }
    },
  };
}
