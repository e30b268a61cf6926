/**
 * A pilot's acceptance command as the sandbox runs it (docs/pilot.md): the
 * command in a subshell, then the workspace put back to the change as
 * committed (refs/drydock/change, untracked files included), so nothing the
 * command wrote ends up in a later round's change. Its exit code is the
 * command's. drydock's git runs without the repo's hooks or fsmonitor.
 */

/** The sandbox ref of the change's snapshot (repos/git.ts CHANGE_REF). */
const CHANGE_REF = 'refs/drydock/change';

const GIT = 'git -c core.fsmonitor=false -c core.hooksPath=/dev/null';

export function acceptanceScript(command: string): string {
  const restore = [
    'i=$(mktemp)',
    `GIT_INDEX_FILE="$i" ${GIT} read-tree ${CHANGE_REF}`,
    `GIT_INDEX_FILE="$i" ${GIT} checkout-index -a -f -q`,
    `GIT_INDEX_FILE="$i" ${GIT} ls-files -z --others --exclude-standard | xargs -0 -r rm -f --`,
  ].join(' && ');
  return `(\n${command}\n)\ns=$?\n{ ${restore}; } >/dev/null 2>&1\nrm -f "$i"\nexit $s\n`;
}
