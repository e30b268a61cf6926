/**
 * Repository URLs as drydock shows them. A URL may carry credentials
 * (`https://oauth2:<token>@host/owner/repo`); everything that displays or
 * records a URL (error messages, the status, the `DrydockRepo` search
 * attribute, container labels, audit data) uses `redactUrl`. Pure, so
 * workflows use it too.
 */

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
