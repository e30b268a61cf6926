/**
 * The worker's credentials for git over HTTP(S), by host: GitHub's
 * (GITHUB_TOKEN or the App, github/client.ts), another forge's (GitLab's
 * token, forge/forge.ts) and the operator's
 * DRYDOCK_GIT_CREDENTIALS for other hosts. Repo URLs carry none (refused
 * where they enter, workflows/rules/repo-url.ts), so they stay out of
 * Temporal's history, the registry and the mirrors' git config: git gets an
 * Authorization header scoped to the URL's origin, in its environment only
 * (no URL, config file, argument list or log).
 */
import type { ForgeSet } from '../forge/registry';
import { basicAuthEnv, gitCredentials as githubGitCredentials, type GitHubSettings } from '../github/client';
import type { GitEnv } from './git';

/** DRYDOCK_GIT_CREDENTIALS: "user:token" by host ("git.example.com", "git.example.com:8443"). */
export type GitHostCredentials = Record<string, string>;

export interface GitCredentialDeps {
  github: GitHubSettings;
  /** Per-host credentials (DRYDOCK_GIT_CREDENTIALS). @default none */
  gitHosts?: GitHostCredentials;
  /** The configured forges: a URL on one of them (GitLab's) gets its token. @default GitHub only */
  forges?: ForgeSet;
}

/** Hosts plain HTTP may carry credentials to: this machine only (a local server), never the network. */
const LOOPBACK = /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])$/;

/**
 * Environment for a git command on `url`: the operator's credentials for its
 * host when DRYDOCK_GIT_CREDENTIALS names it (over HTTPS, or HTTP to
 * loopback), else the forge's whose URL it is on (GitLab's token), else
 * GitHub's for the configured GitHub, else none.
 */
export async function gitCredentials(deps: GitCredentialDeps, url: string): Promise<GitEnv> {
  const parsed = URL.canParse(url) ? new URL(url) : undefined;
  const host = parsed?.host;
  const given = Object.entries(deps.gitHosts ?? {}).find(([h]) => h.toLowerCase() === host)?.[1];
  const forge = deps.forges?.all.find((f) => f.kind !== 'github' && f.owns(url));
  if (!given && forge) return forge.gitCredentials(url);
  if (!parsed || !given) return githubGitCredentials(deps.github, url);
  const secure = parsed.protocol === 'https:' || (parsed.protocol === 'http:' && LOOPBACK.test(parsed.hostname));
  return secure ? basicAuthEnv(parsed.origin, given) : {};
}
