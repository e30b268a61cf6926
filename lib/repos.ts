/**
 * The repositories drydock serves. Today an allowlist from the environment
 * (DRYDOCK_REPOS); later the Postgres repo registry answers the same question
 * behind the same function.
 */
import type { TriggerSession } from '../workflows/input';
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

export function createRepoLookup(
  config: Pick<Config, 'DRYDOCK_REPOS'> & Partial<Pick<Config, 'DRYDOCK_TRIGGER_SESSION'>>,
) {
  const repos = parseRepoList(config.DRYDOCK_REPOS ?? []);
  return {
    /**
     * What a webhook-started session on `repo` runs (its agent, checks,
     * approvals), or why nothing may start. Today the server's default
     * (DRYDOCK_TRIGGER_SESSION); the repo registry answers here later.
     */
    triggerSession(repo: KnownRepo): { ok: true; session: TriggerSession } | { ok: false; reason: string } {
      const session = config.DRYDOCK_TRIGGER_SESSION;
      return session
        ? { ok: true, session }
        : { ok: false, reason: `no agent is configured for ${repo.name} (set DRYDOCK_TRIGGER_SESSION)` };
    },
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
