/**
 * The forges this process is configured for (forge/registry.ts): GitHub
 * always (drydock's first forge, and the default), GitLab when GITLAB_URL is
 * set, Gitea when DRYDOCK_GITEA_URL and DRYDOCK_GITEA_TOKEN are. The worker
 * publishes through them, `drydock serve` checks with them.
 */
import { ForgeSet } from '../forge/registry';
import { githubForge } from '../github/provider';
import { githubSettings, type GitHubSettings } from '../github/client';
import { gitlabForge } from '../gitlab/provider';
import type { GitLabSettings } from '../gitlab/client';
import { giteaForge, type GiteaSettings } from '../gitea/provider';
import type { Config } from '../platform/config';

export function forgesFrom(settings: {
  github: GitHubSettings;
  gitlab?: GitLabSettings;
  gitea?: GiteaSettings;
}): ForgeSet {
  return new ForgeSet([
    githubForge(settings.github),
    ...(settings.gitlab ? [gitlabForge(settings.gitlab)] : []),
    ...(settings.gitea ? [giteaForge(settings.gitea)] : []),
  ]);
}

/** GitLab's settings, when GITLAB_URL is set. */
export function gitlabSettings(config: Config): GitLabSettings | undefined {
  if (!config.GITLAB_URL) return undefined;
  return { url: config.GITLAB_URL, token: config.GITLAB_TOKEN, tokenFile: config.GITLAB_TOKEN_FILE };
}

/** Gitea's settings, when both its URL and token are set. */
export function giteaSettings(config: Config): GiteaSettings | undefined {
  const { DRYDOCK_GITEA_URL: url, DRYDOCK_GITEA_TOKEN: token } = config;
  return url && token ? { url, token } : undefined;
}

/** GitHub's settings (its pilots read pull requests with them) and every configured forge, from the environment. */
export function forgeSettings(config: Config): { github: GitHubSettings; forges: ForgeSet } {
  const github = githubSettings(config);
  return { github, forges: forgesFrom({ github, gitlab: gitlabSettings(config), gitea: giteaSettings(config) }) };
}
