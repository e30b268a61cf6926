/** The worker's bare mirror of each repo: sandboxes have no network, so the repo reaches them from here. */
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/api';
import { hasUrlCredentials, redactUrl, URL_CREDENTIALS_REFUSED } from '../workflows/rules/repo-url';
import { GitError, hasCommit, mirrorOf, OBJECT_ID, resolveCommit, updateMirror } from './git';
import { gitCredentials, type GitCredentialDeps } from './credentials';
import type { RepoLookupService } from './registry';

/** What the mirrors need from the worker. */
export interface MirrorDeps extends GitCredentialDeps {
  /** Host-side bare mirrors of repos (sandboxes have no network). */
  mirrorsDir: string;
  /** The repo registry: only its repos are cloned, under their operator's limits. */
  repos: RepoLookupService;
  /** Development mode (DRYDOCK_DEV_MODE, on in `drydock up`): unregistered repos may be cloned too. */
  devMode: boolean;
}

/**
 * Refuses a URL that is not in the registry, unless the worker runs in
 * development mode: a session started from the CLI or the Temporal UI must
 * not make the worker clone whatever it can reach (paths on its disk included).
 * A URL with credentials is refused in any mode (one registered before they were).
 */
export async function requireRegistered(deps: Pick<MirrorDeps, 'repos' | 'devMode'>, url: string): Promise<void> {
  if (hasUrlCredentials(url)) {
    throw ApplicationFailure.nonRetryable(`repo.url ${URL_CREDENTIALS_REFUSED}`, ErrorType.RepoNotRegistered);
  }
  if (deps.devMode || (await deps.repos.byUrl(url)).ok) return;
  throw ApplicationFailure.nonRetryable(notRegistered(url), ErrorType.RepoNotRegistered);
}

export function notRegistered(url: string): string {
  const shown = redactUrl(url);
  return (
    `repo.url ${shown} is not a registered repository: register it with 'drydock repo add ${shown}' ` +
    '(or run the worker in development mode, DRYDOCK_DEV_MODE=1, as drydock up does)'
  );
}

/**
 * Fetches a registered repo into the worker's mirror; a refused credential is permanent, the rest retry.
 * `onStartPath`: a session's start waits for this fetch (repoPolicy, which has checked the registry
 * itself): the registry is not asked again, and the mirror's upkeep runs beside the caller, not before.
 */
export async function syncMirror(deps: MirrorDeps, url: string, { onStartPath = false } = {}): Promise<string> {
  if (!onStartPath) await requireRegistered(deps, url);
  try {
    return await updateMirror(deps.mirrorsDir, url, await gitCredentials(deps, url), { maintenance: !onStartPath });
  } catch (err) {
    if (err instanceof GitError && err.isAuthFailure) {
      throw ApplicationFailure.nonRetryable(
        `the remote refused the worker's credentials: ${err.message}`,
        ErrorType.RepoUnavailable,
      );
    }
    if (err instanceof GitError) throw ApplicationFailure.retryable(err.message, ErrorType.RepoUnavailable);
    throw err;
  }
}

/** The commit `ref` names in the mirror; a ref the repo lacks is permanent. */
export async function resolveRef(mirror: string, ref: string | undefined): Promise<string> {
  try {
    return await resolveCommit(mirror, ref);
  } catch (err) {
    throw ApplicationFailure.nonRetryable((err as Error).message, ErrorType.RepoUnavailable);
  }
}

/**
 * The mirror holding the commit `ref` names, and that commit: fetched first,
 * unless `ref` is a full commit id the mirror has already (a commit never
 * changes): the session's start resolved its ref to one (repoPolicy) moments
 * before, and a replacement sandbox names its session's base commit.
 */
export async function mirrorAt(
  deps: MirrorDeps,
  url: string,
  ref: string | undefined,
): Promise<{ mirror: string; commit: string }> {
  if (ref && OBJECT_ID.test(ref)) {
    await requireRegistered(deps, url);
    const mirror = mirrorOf(deps.mirrorsDir, url);
    if (await hasCommit(mirror, ref)) return { mirror, commit: ref };
  }
  const mirror = await syncMirror(deps, url);
  return { mirror, commit: await resolveRef(mirror, ref) };
}
