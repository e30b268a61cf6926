/**
 * A repo's own drydock file, `.drydock/config.yaml`, read from the worker's
 * mirror at a commit (never from a sandbox) and validated against its schema
 * (workflows/repo-config.ts): the session's settings, the environment and the
 * snapshot's setup command come from it.
 */
import { ApplicationFailure } from '@temporalio/common';
import { parse as parseYaml } from 'yaml';
import { ErrorType } from '../workflows/api';
import { checkRepoConfig, REPO_CONFIG_FILE, setupCommandOf, type RepoConfig } from '../workflows/repo-config';
import { readAtCommit } from './git';

/** A repo file larger than this is refused rather than parsed. */
const MAX_REPO_FILE_BYTES = 64 * 1024;

/** The repo's `.drydock/config.yaml` at `commit`, validated; none is an empty configuration. */
export async function readRepoConfig(
  mirror: string,
  commit: string,
): Promise<{ ok: true; config?: RepoConfig } | { ok: false; problems: string[] }> {
  const entry = (await readAtCommit(mirror, commit, ['ls-tree', '-l', commit, '--', REPO_CONFIG_FILE])).trim();
  if (!entry) return { ok: true };
  const m = /^\d+ blob ([0-9a-f]+)\s+(\d+)\t/.exec(entry);
  if (!m) return { ok: false, problems: [`${REPO_CONFIG_FILE}: not a file`] };
  if (Number(m[2]) > MAX_REPO_FILE_BYTES) {
    return { ok: false, problems: [`${REPO_CONFIG_FILE}: larger than ${MAX_REPO_FILE_BYTES / 1024} KiB`] };
  }
  let data: unknown;
  try {
    data = parseYaml(await readAtCommit(mirror, m[1], ['cat-file', 'blob', m[1]]));
  } catch (err) {
    return { ok: false, problems: [`${REPO_CONFIG_FILE}: not valid YAML: ${(err as Error).message.split('\n')[0]}`] };
  }
  const checked = checkRepoConfig(data);
  return checked.ok ? { ok: true, config: checked.config } : checked;
}

/** The `setup` of the repo file at `commit`, if any; a bad file fails the caller, naming each problem. */
export async function repoFileSetup(mirror: string, commit: string): Promise<string | undefined> {
  const file = await readRepoConfig(mirror, commit);
  if (!file.ok) throw ApplicationFailure.nonRetryable(file.problems.join('; '), ErrorType.SnapshotSetupFailed);
  return setupCommandOf(file.config);
}
