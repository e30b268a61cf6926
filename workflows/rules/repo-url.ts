/**
 * Repository URLs: which ones drydock takes, and as it shows them. A URL
 * with credentials (`https://oauth2:<token>@host/owner/repo`) is refused
 * wherever one enters (the session input, the registry, the API): it would
 * be kept in Temporal's history, the registry and the mirror's git config.
 * The worker authenticates git itself, by host (repos/credentials.ts).
 * Everything that displays or records a URL still uses `redactUrl`, for a
 * URL that reached the history anyway (a session started from the Temporal
 * UI). Pure, so workflows use it too.
 */

/**
 * A repository's name on its forge: GitHub's and Gitea's "owner/name", or a
 * GitLab project's full path with its nested subgroups ("group/sub/project";
 * GitLab allows 20 levels of groups).
 */
export const REPO_PATH = /^[A-Za-z0-9_.-]+(?:\/[A-Za-z0-9_.-]+){1,20}$/;

/** Why a URL with credentials is refused, and where they go instead. */
export const URL_CREDENTIALS_REFUSED =
  "must not carry credentials (user:password@ or token@): they would be kept in Temporal's history. " +
  'Give the URL without them; the worker authenticates git itself (GITHUB_TOKEN or a GitHub App for GitHub, ' +
  'DRYDOCK_GIT_CREDENTIALS for other hosts)';

/**
 * Whether `url` carries credentials: any userinfo in a URL with a scheme
 * (`https://token@`, `https://user:password@`), except a bare user name for
 * ssh (`ssh://git@host/...`), which is a login, not a secret. scp-like
 * `git@host:path` names a user only.
 */
export function hasUrlCredentials(url: string): boolean {
  const m = /^([A-Za-z][A-Za-z0-9+.-]{0,30}):\/\/([^/?#]*)@/.exec(url);
  if (!m) return false;
  return !(/ssh/i.test(m[1]) && !m[2].includes(':'));
}

/**
 * `scheme://user:password@` and `scheme://token@` lose their userinfo, in one
 * URL or anywhere in a text (a git error quoting the URL). scp-like
 * `git@host:path` has no password and is left as it is. Bounded repetitions
 * keep it linear on any input.
 */
export function redactUrl(text: string): string {
  return text.replace(/\b([A-Za-z][A-Za-z0-9+.-]{0,30}:\/\/)[^\s/?#@]{1,2000}@/g, '$1');
}

/** "owner/name" of a GitHub URL (https or ssh), if it is one. */
export function githubRepoOf(url: string): string | undefined {
  const m = /github\.com[/:]([A-Za-z0-9_.-]+)\/([A-Za-z0-9_.-]+?)(?:\.git)?\/?$/.exec(url);
  return m ? `${m[1]}/${m[2]}` : undefined;
}
