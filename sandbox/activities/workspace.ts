/**
 * A sandbox's /workspace: the snapshot it starts from, the repo put in (from
 * the snapshot caught up with a git bundle, or copied from the worker's
 * mirror), a replacement's checkpoint re-applied, and the "provisioned"
 * marker, written last, that a retried provisioning checks.
 */
import { CATCH_UP_REF, catchUpBundle, workingTreeTar } from '../../repos/git';
import type { SandboxDeps } from './deps';
import type { Checkpoint } from '../checkpoints';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { DRYDOCK_GIT, scriptArgv, type SandboxHandle, type ShellScript } from '../handle';
import type { SnapshotBuildRow } from '../snapshots';
import { STATE_DIR } from './container';
import { CommandExitError, imageStoreOf, type ExecResult } from '../provider';

/** The sandbox user's uid: the owner of what is put into /workspace. */
const SANDBOX_UID = 1000;

/** Written last by provisioning (and a snapshot build's fill): a retry that finds it has nothing left to do. */
const PROVISIONED = `${STATE_DIR}/provisioned`;

/** A snapshot a sandbox can start from: built, its image on this host, so its image, commit and end are known. */
export type ReadySnapshot = SnapshotBuildRow & { image: string; commit: string; finishedAt: string };

/** A sandbox starting from a snapshot: the snapshot, and the session's commits it lacks (undefined: unknown, history rewritten). */
export interface SnapshotStart {
  snapshot: ReadySnapshot;
  behind: number | undefined;
}

/** A ready row as a ReadySnapshot; a row ready without its commit or its end is a store fault, said so. */
function readySnapshot(row: SnapshotBuildRow & { image: string }): ReadySnapshot {
  const { commit, finishedAt } = row;
  if (commit === undefined || finishedAt === undefined) {
    throw new Error(`snapshot build ${row.id} of ${row.image} is ready without its commit or its end`);
  }
  return { ...row, commit, finishedAt };
}

/** The newest ready snapshot of a repo on this host whose image is still here (or the oldest: a drill). */
export async function newestSnapshot(
  deps: Pick<SandboxDeps, 'snapshots' | 'sandboxes' | 'hostId' | 'log'>,
  repo: string,
  which: 'newest' | 'oldest' = 'newest',
): Promise<ReadySnapshot | undefined> {
  const ready = await deps.snapshots.ready(repo, deps.hostId);
  for (const row of which === 'oldest' ? ready.reverse() : ready) {
    const { image } = row;
    if (image !== undefined && (await imageStoreOf(deps.sandboxes).image(image)))
      return readySnapshot({ ...row, image });
    deps.log.warn({ image: row.image, repo }, 'snapshot image missing from this host; marking it removed');
    await deps.snapshots.markRemoved(row.id);
  }
  return undefined;
}

/** The cold path: the repo at `commit`, with history, copied into /workspace. */
export async function copyWorkingTree(sandbox: SandboxHandle, mirror: string, commit: string): Promise<void> {
  const { tar, cleanup } = await workingTreeTar(mirror, commit, SANDBOX_UID);
  try {
    await sandbox.files.copyIn(tar, '/workspace');
  } finally {
    await cleanup();
  }
}

/**
 * Puts the repo at `baseCommit` into a new sandbox's /workspace (from the
 * snapshot, or copied from the mirror), re-applies the checkpoint of a
 * replacement, and marks the sandbox provisioned: one exec on a snapshot.
 */
export async function fillWorkspace(
  sandbox: SandboxHandle,
  at: { mirror: string; baseCommit: string; from: SnapshotStart | undefined; checkpoint: Checkpoint | undefined },
  /** Its first process prepared it already (prepareFirst): the checkpoint applied, marked. */
  prepared = false,
): Promise<void> {
  if (prepared) return;
  const { mirror, baseCommit, from, checkpoint } = at;
  const diff = checkpoint?.diff.length ? checkpoint.diff : undefined;
  if (from) {
    const { snapshot, behind } = from;
    await prepareWorkspace(sandbox, { mirror, from: snapshot.commit, to: baseCommit, behind, mark: true, diff });
  } else {
    await copyWorkingTree(sandbox, mirror, baseCommit);
    await prepareWorkspace(sandbox, { mark: true, diff });
  }
}

/** Whether a sandbox was marked provisioned (prepareWorkspace's last write). */
export async function isProvisioned(sandbox: SandboxHandle): Promise<boolean> {
  return sandbox.files.exists(PROVISIONED);
}

/** Marks a sandbox provisioned without preparing it (a snapshot build's, whose setup follows). */
export async function markProvisioned(sandbox: SandboxHandle): Promise<void> {
  await sandbox.commands.runScript(MARK);
}

const MARK: ShellScript = { name: 'sh', text: `mkdir -p ${STATE_DIR} && touch ${PROVISIONED}` };

/**
 * The workspace's preparation in one exec: the commits from the snapshot's
 * `from` to `to` arrive as a git bundle on stdin (the sandbox has no
 * network) when the snapshot lacks them; a checkout that keeps what setup
 * left in ignored files (node_modules, builds); drydock's git identity; a
 * replacement's checkpoint applied when its file is given ($6, `-`:
 * stdin; as Git.apply does it); and, with `mark`, the marker a retried provisioning checks. Few processes: a
 * first preparation writes the git configuration file as the three `git
 * config --global` would (byte for byte), and the marker with the shell.
 */
const PREPARE_WORKSPACE: ShellScript = {
  name: 'prepare',
  text: `set -e
${DRYDOCK_GIT}
to=$1 bundle=$2 mark=$3
if [ "$bundle" = 1 ]; then
  f=.git/drydock-catch-up.bundle
  cat > "$f"; git fetch --quiet "$f" "$4:$4"; rm -f "$f"; git update-ref -d "$4"
elif [ "$bundle" != 0 ]; then
  git fetch --quiet "$bundle" "$4:$4"; git update-ref -d "$4"
fi
[ -z "$to" ] || git checkout --quiet --force --detach "$to"
g=$HOME/.gitconfig
if [ -z "$GIT_CONFIG_GLOBAL" ] && [ ! -e "$g" ] && [ ! -e "\${XDG_CONFIG_HOME:-$HOME/.config}/git/config" ]; then
  printf '[user]\\n\\tname = drydock\\n\\temail = drydock@localhost\\n[safe]\\n\\tdirectory = /workspace\\n' > "$g"
else
  git config --global user.name drydock
  git config --global user.email drydock@localhost
  git config --global --add safe.directory /workspace
fi
if [ -n "$6" ]; then git reset -q --hard; git clean -fdq; git apply --binary --whitespace=nowarn "$6"; fi
[ "$mark" = 0 ] || { [ -d "$5" ] || mkdir -p "$5"; : > "$5/provisioned"; }`,
};

/** The commits a snapshot lacks up to `to`, as a git bundle; none when `to` is at or behind its commit. */
async function bundleFor(opts: { mirror?: string; from?: string; to?: string; behind?: number }) {
  const { mirror, from, to } = opts;
  return mirror && from && to && opts.behind !== 0 ? await catchUpBundle(mirror, from, to) : undefined;
}

/**
 * PREPARE_WORKSPACE's arguments; `bundle`: none ('0'), on stdin ('1'), or the path of its file;
 * `checkpoint`: the path of a checkpoint's diff to apply.
 */
const prepareArgs = (to: string | undefined, bundle: string, mark: boolean, checkpoint?: string) => [
  to ?? '',
  bundle,
  mark ? '1' : '0',
  CATCH_UP_REF,
  STATE_DIR,
  ...(checkpoint ? [checkpoint] : []),
];

/**
 * The workspace prepared in one exec (PREPARE_WORKSPACE); `diff`: a checkpoint
 * applied in it too, on stdin, unless a catch-up bundle needs stdin (then after it, as Git.apply does).
 */
export async function prepareWorkspace(
  sandbox: SandboxHandle,
  opts: { mirror?: string; from?: string; to?: string; behind?: number; mark: boolean; diff?: Buffer },
): Promise<void> {
  const bundle = await bundleFor(opts);
  const { diff, mark } = opts;
  if (bundle && diff) {
    await sandbox.commands.runScript(PREPARE_WORKSPACE, prepareArgs(opts.to, '1', false), { stdin: bundle });
    await sandbox.git.apply(diff);
    return void (mark && (await sandbox.commands.runScript(PREPARE_WORKSPACE, prepareArgs(undefined, '0', true))));
  }
  const stdin = bundle ?? diff;
  const args = prepareArgs(opts.to, bundle ? '1' : '0', mark, diff && '-');
  await sandbox.commands.runScript(PREPARE_WORKSPACE, args, stdin ? { stdin } : {});
}

/** What prepareFirst writes into the folder the sandbox reads: the catch-up bundle, a replacement's checkpoint. */
export const FIRST_FILES = ['catch-up.bundle', 'checkpoint.diff'] as const;

/**
 * The workspace's preparation as the sandbox's first process (SandboxSpec.first),
 * a replacement's checkpoint applied in it too, then marked: its argv, with the
 * catch-up bundle and the checkpoint's diff (each if any) written as FIRST_FILES
 * into `files.host` on the worker, seen in `files.sandbox` in the sandbox (its
 * read-only egress folder). From a snapshot it checks out the session's commit;
 * on the cold path (no `from`) the working tree is put in before it runs
 * (coldTree). checkPrepared reads its result as runScript would.
 */
export async function prepareFirst(
  at: { mirror: string; from?: SnapshotStart; baseCommit: string; checkpoint?: Checkpoint },
  files: { host: string; sandbox: string },
): Promise<{ argv: string[] }> {
  const { mirror, from, baseCommit, checkpoint } = at;
  const bundle = from && (await bundleFor({ mirror, from: from.snapshot.commit, to: baseCommit, behind: from.behind }));
  const [bundleFile, diffFile] = FIRST_FILES;
  if (bundle) await writeFile(path.join(files.host, bundleFile), bundle, { mode: 0o644 });
  const diff = checkpoint?.diff.length ? checkpoint.diff : undefined;
  if (diff) await writeFile(path.join(files.host, diffFile), diff, { mode: 0o644 });
  const inSandbox = (file: string) => path.posix.join(files.sandbox, file);
  const to = from ? baseCommit : undefined; // the cold path's tree is at the commit already
  const args = prepareArgs(to, bundle ? inSandbox(bundleFile) : '0', true, diff && inSandbox(diffFile));
  return { argv: scriptArgv(PREPARE_WORKSPACE, args) };
}

/**
 * The cold path's working tree for a first process (FirstCommand.files): made
 * on the worker while the sandbox is made, put into /workspace before the
 * first process prepares it. `cleanup` removes it (after the sandbox is made).
 */
export function coldTree(mirror: string, commit: string) {
  const made = workingTreeTar(mirror, commit, SANDBOX_UID);
  made.catch(() => undefined); // the provider awaits it; one that never does must not leave it unhandled
  return {
    files: { tar: made.then((t) => t.tar), dest: '/workspace' },
    cleanup: () => made.then((t) => t.cleanup()).catch(() => undefined),
  };
}

/** The first process's preparation as runScript answers: a non-zero exit throws CommandExitError. */
export function checkPrepared(first: ExecResult): void {
  if (first.exitCode === 0) return;
  const { stdout, stderr } = first;
  throw new CommandExitError(PREPARE_WORKSPACE.name, first.exitCode, stdout.toString(), stderr.toString());
}
