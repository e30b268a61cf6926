/**
 * A session's settings under its repo's configuration: the operator's limits
 * from the registry and the repo's own `.drydock/config.yaml`, applied to the
 * session input by the pure rules of workflows/rules/repo-rules.ts.
 *
 * Read once at session start, from the worker's mirror at the session's ref,
 * not later from the sandbox: the limits decide how the container is made
 * (CPUs, memory, pids) and what the egress proxy allows, and a refused
 * configuration must fail the session before any sandbox exists. The result
 * is in the workflow history, so a retry or replay sees the same settings.
 * The server's approval policy comes with it, fixed in the history the same way.
 */
import { isIP } from 'node:net';
import { ApplicationFailure } from '@temporalio/common';
import { parse as parseYaml } from 'yaml';
import { restrictedAddress } from '../sandbox/egress';
import { readAtCommit } from '../repos/git';
import { ErrorType, type ApprovalPolicy } from '../workflows/api';
import { parseSessionInput, type SessionInput } from '../workflows/input';
import {
  checkRepoConfig,
  DEV_MODE_LIMITS,
  REPO_CONFIG_FILE,
  type RepoConfig,
  type RepoGrant,
} from '../workflows/repo-config';
import { settleSessionInput } from '../workflows/rules/repo-rules';
import { redactUrl } from '../workflows/rules/repo-url';
import type { ActivityDeps } from './deps';
import { notRegistered, resolveRef, syncMirror } from '../repos/mirror';

export type RepoPolicy =
  | {
      ok: true;
      /** The session input with the repo file's defaults, within the operator's limits. */
      input: SessionInput;
      /** The registered name ("owner/name"), or the URL of an unregistered repo in development mode. */
      repo: string;
      /** The operator's approvers of the repo (empty: the server's). */
      approvers: string[];
      /** The server's approval policy (the worker's configuration), which the session can only tighten. */
      serverPolicy: ApprovalPolicy;
      /** The repo file's environment, recorded (images are not built from it yet). */
      environment?: RepoConfig['environment'];
      /** The commit the session's ref names now (the repo file was read there): the session starts from it. */
      commit?: string;
    }
  | { ok: false; problems: string[] };

/** A repo file larger than this is refused rather than parsed. */
const MAX_REPO_FILE_BYTES = 64 * 1024;

export function createRepoPolicyActivities(deps: ActivityDeps) {
  return {
    /** The session input settled against its repo's configuration, or the problems that refuse it. */
    async repoPolicy(raw: unknown): Promise<RepoPolicy> {
      const parsed = parseSessionInput(raw);
      if (!parsed.ok) return parsed;
      const { url, ref } = parsed.input.repo;
      const found = await deps.repos.byUrl(url);
      if (!found.ok && !deps.devMode) return { ok: false, problems: [notRegistered(url)] };
      const grant: RepoGrant = found.ok
        ? { name: found.repo.name, limits: found.repo.limits }
        : { name: redactUrl(url), limits: DEV_MODE_LIMITS };
      const mirror = await syncMirror(deps, url);
      const commit = await resolveRef(mirror, ref);
      const file = await readRepoConfig(mirror, commit);
      if (!file.ok) return file;
      const settled = settleSessionInput({ grant, file: file.config, raw, restricted: restrictedHost });
      if (!settled.ok) return settled;
      return {
        ...settled,
        repo: grant.name,
        approvers: grant.limits.approvers,
        serverPolicy: deps.policy,
        commit,
        ...(file.config?.environment ? { environment: file.config.environment } : {}),
      };
    },
  };
}

/** A literal address only an operator's rule may name; host names are judged by the proxy when resolved. */
export function restrictedHost(host: string): string | undefined {
  return isIP(host) ? restrictedAddress(host) : undefined;
}

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
  return file.config?.setup;
}
