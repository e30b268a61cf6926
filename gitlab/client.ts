/**
 * GitLab from the worker or the server (gitlab.com or self-managed), through
 * @gitbeaker/rest: the only place that holds GitLab's token (a project or
 * group access token, GITLAB_TOKEN or GITLAB_TOKEN_FILE), read at each use so
 * a rotated file takes effect without a restart.
 */
import { readFileSync } from 'node:fs';
import { Gitlab } from '@gitbeaker/rest';
import type { GitEnv } from '../forge/forge';

export interface GitLabSettings {
  /** The instance: https://gitlab.com, or a self-managed one. */
  url: string;
  token?: string;
  /** A file holding the token, read at each use. */
  tokenFile?: string;
}

/** No token configured: retrying will not help. */
export class GitLabCredentialsError extends Error {
  name = 'GitLabCredentialsError';
}

export function tokenOf(settings: GitLabSettings): string {
  if (settings.tokenFile) return readFileSync(settings.tokenFile, 'utf8').trim();
  if (settings.token) return settings.token;
  throw new GitLabCredentialsError('no GitLab token on this process: set GITLAB_TOKEN or GITLAB_TOKEN_FILE');
}

export type GitLabApi = InstanceType<typeof Gitlab>;

/** A client with the configured token (PRIVATE-TOKEN header; no token in a URL). */
export function gitlabClient(settings: GitLabSettings): GitLabApi {
  return new Gitlab({ host: settings.url.replace(/\/+$/, ''), token: tokenOf(settings) });
}

/** The instance's origin: clone URLs on it are GitLab's. */
export function originOf(settings: GitLabSettings): string {
  return new URL(settings.url).origin;
}

/**
 * git's environment for `url` on this GitLab: Basic `oauth2:<token>` (GitLab
 * takes any user name with an access token) for its origin only, in git's
 * environment (no URL, config file or argument list).
 */
export function gitlabGitCredentials(settings: GitLabSettings, url: string): GitEnv {
  const origin = originOf(settings);
  if (!url.startsWith(`${origin}/`) || (!settings.token && !settings.tokenFile)) return {};
  const basic = Buffer.from(`oauth2:${tokenOf(settings)}`).toString('base64');
  return {
    GIT_CONFIG_COUNT: '1',
    GIT_CONFIG_KEY_0: `http.${origin}/.extraHeader`,
    GIT_CONFIG_VALUE_0: `Authorization: Basic ${basic}`,
  };
}
