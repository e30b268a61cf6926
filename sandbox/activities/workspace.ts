/**
 * A sandbox's /workspace: the snapshot it starts from, the repo put in (from
 * the snapshot caught up with a git bundle, or copied from the worker's
 * mirror), a replacement's checkpoint re-applied, and the "provisioned"
 * marker, written last, that a retried provisioning checks.
 */
import { CATCH_UP_REF, catchUpBundle, workingTreeTar } from '../../repos/git';
import type { SandboxDeps } from './deps';
import type { Checkpoint } from '../checkpoints';
import { DRYDOCK_GIT, type SandboxHandle, type ShellScript } from '../handle';
import type { SnapshotBuildRow } from '../snapshots';
import { STATE_DIR } from './container';
import { imageStoreOf } from '../provider';

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
  const { tar, cleanup } = await workingTreeTar(mirror, commit, 1000);
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
): Promise<void> {
  const { mirror, baseCommit, from, checkpoint } = at;
  const mark = !checkpoint?.diff.length;
  if (from) {
    const { snapshot, behind } = from;
    await prepareWorkspace(sandbox, { mirror, from: snapshot.commit, to: baseCommit, behind, mark });
  } else {
    await copyWorkingTree(sandbox, mirror, baseCommit);
    await prepareWorkspace(sandbox, { mark });
  }
  if (mark) return;
  await sandbox.git.apply(checkpoint!.diff);
  await prepareWorkspace(sandbox, { mark: true });
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
 * left in ignored files (node_modules, builds); drydock's git identity; and,
 * with `mark`, the marker a retried provisioning checks. Few processes: a
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
[ "$mark" = 0 ] || { [ -d "$5" ] || mkdir -p "$5"; : > "$5/provisioned"; }`,
};

export async function prepareWorkspace(
  sandbox: SandboxHandle,
  opts: { mirror?: string; from?: string; to?: string; behind?: number; mark: boolean },
): Promise<void> {
  const { mirror, from, to } = opts;
  // Commits the snapshot lacks come in a bundle; `to` at or behind the snapshot's commit is in it already.
  const bundle = mirror && from && to && opts.behind !== 0 ? await catchUpBundle(mirror, from, to) : undefined;
  await sandbox.commands.runScript(
    PREPARE_WORKSPACE,
    [to ?? '', bundle ? '1' : '0', opts.mark ? '1' : '0', CATCH_UP_REF, STATE_DIR],
    bundle ? { stdin: bundle } : {},
  );
}
