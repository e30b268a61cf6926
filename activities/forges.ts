/**
 * The forges this process is configured for (forge/registry.ts): GitHub
 * always (drydock's first forge, and the default). The worker publishes
 * through them, `drydock serve` checks with them.
 */
import { ForgeSet } from '../forge/registry';
import { githubForge } from '../github/provider';
import { githubSettings, type GitHubSettings } from '../github/client';
import type { Config } from '../platform/config';

export function forgesFrom(settings: { github: GitHubSettings }): ForgeSet {
  return new ForgeSet([githubForge(settings.github)]);
}

/** GitHub's settings (its pilots read pull requests with them) and every configured forge, from the environment. */
export function forgeSettings(config: Config): { github: GitHubSettings; forges: ForgeSet } {
  const github = githubSettings(config);
  return { github, forges: forgesFrom({ github }) };
}
