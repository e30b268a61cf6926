/**
 * GitHub from the worker: the only place that holds GitHub credentials. A
 * token from the environment, or a GitHub App installation token minted for
 * the one repository being published. No retry plugin: Temporal retries.
 */
import { readFileSync } from 'node:fs';
import { createAppAuth } from '@octokit/auth-app';
import { Octokit } from '@octokit/rest';
import type { Config } from '../platform/config';

/**
 * git's environment configuration for `Authorization: Basic <user:token>` on
 * `origin` only: the credential is in no URL, config file, argument list or log.
 */
export function basicAuthEnv(origin: string, userAndToken: string): Record<string, string> {
  return {
    GIT_CONFIG_COUNT: '1',
    GIT_CONFIG_KEY_0: `http.${origin}/.extraHeader`,
    GIT_CONFIG_VALUE_0: `Authorization: Basic ${Buffer.from(userAndToken).toString('base64')}`,
  };
}

export interface GitHubSettings {
  apiUrl: string;
  token?: string;
  /** A file holding the token, read at each use (rotated by rewriting it). */
  tokenFile?: string;
  app?: { appId: string; privateKey: string };
}

export function githubSettings(config: Config): GitHubSettings {
  return {
    apiUrl: config.GITHUB_API_URL,
    token: config.GITHUB_TOKEN,
    tokenFile: config.GITHUB_TOKEN_FILE,
    app:
      config.GITHUB_APP_ID && config.GITHUB_APP_PRIVATE_KEY_FILE
        ? { appId: config.GITHUB_APP_ID, privateKey: readFileSync(config.GITHUB_APP_PRIVATE_KEY_FILE, 'utf8') }
        : undefined,
  };
}

/** No credentials configured, or GitHub refused them: retrying will not help. */
export class GitHubCredentialsError extends Error {
  name = 'GitHubCredentialsError';
}

/** What an installation token may do: publishing by default; each use asks for what it needs. */
export type TokenPermissions = Record<string, 'read' | 'write'>;
export const PUBLISHING: TokenPermissions = { contents: 'write', pull_requests: 'write' };

/** The worker's token for one repository: the configured one, or an App installation token minted for it. */
async function tokenFor(
  settings: GitHubSettings,
  owner: string,
  repo: string,
  permissions: TokenPermissions = PUBLISHING,
): Promise<string> {
  if (settings.tokenFile) return readFileSync(settings.tokenFile, 'utf8').trim();
  if (settings.token) return settings.token;
  if (!settings.app) {
    throw new GitHubCredentialsError(
      'no GitHub credentials on the worker: set GITHUB_TOKEN, or GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY_FILE',
    );
  }
  const app = new Octokit({
    baseUrl: settings.apiUrl,
    userAgent: 'drydock',
    authStrategy: createAppAuth,
    auth: settings.app,
  });
  const { data: installation } = await app.apps.getRepoInstallation({ owner, repo });
  const { token } = (await app.auth({
    type: 'installation',
    installationId: installation.id,
    repositoryNames: [repo],
    permissions,
  })) as { token: string };
  return token;
}

/** An Octokit authenticated for one repository (an App's token limited to `permissions`). */
export async function octokitFor(
  settings: GitHubSettings,
  owner: string,
  repo: string,
  permissions: TokenPermissions = PUBLISHING,
): Promise<Octokit> {
  const auth = await tokenFor(settings, owner, repo, permissions);
  return new Octokit({ baseUrl: settings.apiUrl, userAgent: 'drydock', auth });
}

/** Where git lives for the configured API: github.com for api.github.com, else the API's own host. */
function gitOrigin(apiUrl: string): string {
  const api = new URL(apiUrl);
  return api.host === 'api.github.com' ? 'https://github.com' : api.origin;
}

/**
 * Environment for a git command on `url`: when the URL is an HTTP(S) git URL
 * on the configured GitHub and credentials are set, an Authorization header
 * scoped to that host. Passed in git's environment only, so the token is in
 * no git config, URL, argument list or log.
 */
export async function gitCredentials(settings: GitHubSettings, url: string): Promise<Record<string, string>> {
  if (!settings.token && !settings.tokenFile && !settings.app) return {};
  const origin = gitOrigin(settings.apiUrl);
  if (!url.startsWith(`${origin}/`)) return {};
  const m = /^\/([A-Za-z0-9_.-]+)\/([A-Za-z0-9_.-]+?)(?:\.git)?\/?$/.exec(url.slice(origin.length));
  if (!m) return {};
  return basicAuthEnv(origin, `x-access-token:${await tokenFor(settings, m[1], m[2])}`);
}

export interface PullRequestSpec {
  owner: string;
  repo: string;
  head: string;
  base?: string;
  title: string;
  body: string;
  draft: boolean;
}

/**
 * Opens the pull request for `head`, or updates the open one: a retried
 * activity finds the PR its first attempt opened and never opens a second.
 */
export async function upsertPullRequest(
  octokit: Octokit,
  spec: PullRequestSpec,
): Promise<{ number: number; url: string; created: boolean }> {
  const { owner, repo } = spec;
  const open = await octokit.pulls.list({ owner, repo, head: `${owner}:${spec.head}`, state: 'open' });
  if (open.data.length > 0) {
    const pr = open.data[0];
    await octokit.pulls.update({ owner, repo, pull_number: pr.number, title: spec.title, body: spec.body });
    return { number: pr.number, url: pr.html_url, created: false };
  }
  const base = spec.base ?? (await octokit.repos.get({ owner, repo })).data.default_branch;
  const { data: pr } = await octokit.pulls.create({
    owner,
    repo,
    head: spec.head,
    base,
    title: spec.title,
    body: spec.body,
    draft: spec.draft,
  });
  return { number: pr.number, url: pr.html_url, created: true };
}
