/**
 * The repositories drydock serves. Today an allowlist from the environment
 * (DRYDOCK_REPOS); later the Postgres repo registry answers the same question
 * behind the same function.
 */
import type { Config } from './config';
import { redactUrl } from '../workflows/rules/repo-url';

export interface KnownRepo {
  /** "owner/name", as GitHub names it. */
  name: string;
  /** What the worker clones. */
  url: string;
}

export type RepoLookup = { ok: true; repo: KnownRepo } | { ok: false; reason: string };

const NAME = /^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/;

/** Parses `owner/name=<url>` entries; a malformed one names itself. */
export function parseRepoList(entries: string[]): KnownRepo[] {
  return entries.map((entry) => {
    const at = entry.indexOf('=');
    const name = entry.slice(0, at).trim();
    const url = entry.slice(at + 1).trim();
    if (at < 0 || !NAME.test(name) || !url) {
      throw new Error(`DRYDOCK_REPOS: '${entry}' is not owner/name=<clone URL>`);
    }
    return { name, url };
  });
}

export function createRepoLookup(config: Pick<Config, 'DRYDOCK_REPOS'>) {
  const repos = parseRepoList(config.DRYDOCK_REPOS ?? []);
  return {
    /** The repo called `name` ("owner/name", case-insensitive like GitHub), or why not. */
    byName(name: unknown): RepoLookup {
      if (typeof name !== 'string' || !NAME.test(name)) return { ok: false, reason: 'repo: expected "owner/name"' };
      const repo = repos.find((r) => r.name.toLowerCase() === name.toLowerCase());
      return repo
        ? { ok: true, repo }
        : { ok: false, reason: `repo ${name} is not served by this drydock (add it to DRYDOCK_REPOS)` };
    },
    /** The repo cloned from `url`, or why not. */
    byUrl(url: unknown): RepoLookup {
      const repo = repos.find((r) => r.url === url);
      return repo
        ? { ok: true, repo }
        : {
            ok: false,
            reason: `repo.url ${redactUrl(String(url))} is not served by this drydock (add it to DRYDOCK_REPOS)`,
          };
    },
  };
}

export type RepoLookupService = ReturnType<typeof createRepoLookup>;
