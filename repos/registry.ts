/**
 * The repo registry: the one list of repositories drydock works on, in
 * Postgres (a row of snapshot_repos per repo, keyed by URL). Each has a name
 * ("owner/name"), its URL, and the operator's limits: egress rules, grantable
 * secrets, resource maxima and approvers. `drydock repo add` writes it;
 * DRYDOCK_REPOS seeds it. Webhooks, the API, `run` and the worker look repos
 * up here (createRepoLookup).
 */
import type { Pool } from 'pg';
import type { McpServer } from '../workflows/mcp-servers';
import type { Config } from '../platform/config';
import type { TriggerSession } from '../workflows/input';
import {
  githubRepoOf,
  hasUrlCredentials,
  redactUrl,
  REPO_PATH,
  URL_CREDENTIALS_REFUSED,
} from '../workflows/rules/repo-url';
import type { RepoLimits, RepoMaxima } from '../workflows/repo-config';
import type { EgressRule } from '../workflows/rules/egress';
import type { EnvironmentSetting, OperatorEnvironment } from '../workflows/rules/environment-choice';

/**
 * Hosts (and ports) the setup step may reach through the egress proxy; the
 * same shape as the proxy's EgressRule (sandbox/egress.ts), without methods.
 */
export interface SetupEgressRule {
  host: string;
  /** Default: 80 and 443. */
  port?: number;
}

export interface RepoRegistration {
  /** The URL, as sessions name it (`repo.url`). */
  repo: string;
  /** Shell command run in /workspace; undefined: `sh .drydock/setup.sh` from the repo. */
  setup?: string;
  /** Branch the snapshot is built from; undefined: the remote's default branch. */
  ref?: string;
  /** Period of the refresh schedule, in ms. @default 30 minutes */
  everyMs: number;
  /** Ready snapshots kept per repo and host. @default 3 */
  keep: number;
  /** How long setup may run, in ms. @default 30 minutes */
  setupTimeoutMs: number;
  egress: SetupEgressRule[];
  /** Registries its images may be pulled from at a snapshot build (`--allow-registry`), beside the server's. @default none */
  registries?: string[];
  /**
   * The operator's choice of environment (`--environment`), before the repo
   * file's and the repo's own (workflows/rules/environment-choice.ts). @default the repo's
   */
  environment?: EnvironmentSetting;
  /** `--ignore-devcontainer`: the repo's dev container is never read. @default false */
  ignoreDevcontainer?: boolean;
}

export const REGISTRATION_DEFAULTS = {
  everyMs: 30 * 60_000,
  keep: 3,
  setupTimeoutMs: 30 * 60_000,
  egress: [{ host: 'registry.npmjs.org' }] as SetupEgressRule[],
  registries: [] as string[],
};

export interface KnownRepo {
  /** "owner/name", as GitHub names it. */
  name: string;
  /** What the worker clones. */
  url: string;
  limits: RepoLimits & { egress: EgressRule[]; secrets: string[] };
  /** The operator's choice of its environment (`repo add --environment`, `--ignore-devcontainer`). */
  environment?: OperatorEnvironment;
  /** The operator's MCP servers for its agents (`repo add --mcp`, docs/mcp.md). @default none */
  mcp?: McpServer[];
  /**
   * Names of its own webhook secrets (`repo add --webhook-secret`, serve's DRYDOCK_SECRET_<NAME>),
   * current first: its deliveries are checked against these only (forge/webhook-secrets.ts). @default the forge's
   */
  webhookSecrets?: string[];
}

export type RepoLookup = { ok: true; repo: KnownRepo } | { ok: false; reason: string };

/** "owner/name", or a GitLab project's path with its subgroups ("group/sub/project"). */
export const REPO_NAME = REPO_PATH;

/** Parses `owner/name=<url>` entries; a malformed one names itself. */
export function parseRepoList(entries: string[]): { name: string; url: string }[] {
  return entries.map((entry) => {
    const at = entry.indexOf('=');
    const name = entry.slice(0, at).trim();
    const url = entry.slice(at + 1).trim();
    if (at < 0 || !REPO_NAME.test(name) || !url) {
      throw new Error(`DRYDOCK_REPOS: '${redactUrl(entry)}' is not owner/name=<clone URL>`);
    }
    if (hasUrlCredentials(url)) throw new Error(`DRYDOCK_REPOS: ${name}'s URL ${URL_CREDENTIALS_REFUSED}`);
    return { name, url };
  });
}

/** The name of a repo registered without one: GitHub's "owner/name", else the URL's last two path segments. */
export function repoNameOf(url: string): string {
  const github = githubRepoOf(url);
  if (github) return github;
  const parts = url
    .replace(/[/]+$/, '')
    .replace(/\.git$/, '')
    .split(/[/:]/)
    .map((p) => p.replace(/[^A-Za-z0-9_.-]+/g, '-'))
    .filter((p) => p && p !== '.' && p !== '..');
  return parts.length >= 2 ? parts.slice(-2).join('/') : `local/${parts[0] ?? 'repo'}`;
}

/** The operator's side of the registry: names and limits (the snapshot side is SnapshotRegistry). */
export class RepoRegistry {
  constructor(private readonly pool: Pool) {}

  /** Every registered repo, by name. */
  async list(): Promise<KnownRepo[]> {
    const { rows } = await this.pool.query('select * from snapshot_repos order by coalesce(name, repo)');
    return rows.map((r) => ({
      name: r.name ?? repoNameOf(r.repo),
      url: r.repo,
      limits: { egress: r.egress, secrets: r.secrets, maxima: r.maxima as RepoMaxima, approvers: r.approvers },
      ...(Array.isArray(r.mcp) && r.mcp.length ? { mcp: r.mcp as McpServer[] } : {}),
      ...(Array.isArray(r.webhook_secrets) && r.webhook_secrets.length
        ? { webhookSecrets: r.webhook_secrets as string[] }
        : {}),
      ...(r.environment || r.ignore_devcontainer
        ? {
            environment: {
              ...(r.environment ? { environment: r.environment as EnvironmentSetting } : {}),
              ...(r.ignore_devcontainer ? { ignoreDevcontainer: true } : {}),
            },
          }
        : {}),
    }));
  }

  /** Sets a registered repo's name and limits (its row exists: SnapshotRegistry.upsertRepo wrote it). */
  async setLimits(url: string, name: string, limits: Omit<KnownRepo['limits'], 'egress'>): Promise<void> {
    try {
      await this.pool.query(
        `update snapshot_repos set name = $2, secrets = $3, maxima = $4, approvers = $5, updated_at = now()
         where repo = $1`,
        [url, name, JSON.stringify(limits.secrets), JSON.stringify(limits.maxima), JSON.stringify(limits.approvers)],
      );
    } catch (err) {
      if ((err as { code?: string }).code !== '23505') throw err;
      throw new Error(`the name ${name} belongs to another registered repo; choose another with --name`);
    }
  }

  /** Sets a registered repo's MCP servers (validated by mcp/declaration.ts); an empty list removes them. */
  async setMcp(url: string, servers: McpServer[]): Promise<void> {
    await this.pool.query('update snapshot_repos set mcp = $2, updated_at = now() where repo = $1', [
      url,
      JSON.stringify(servers),
    ]);
  }

  /** Sets the names of a registered repo's own webhook secrets (current first); an empty list: the forge's. */
  async setWebhookSecrets(url: string, names: string[]): Promise<void> {
    await this.pool.query('update snapshot_repos set webhook_secrets = $2, updated_at = now() where repo = $1', [
      url,
      JSON.stringify(names),
    ]);
  }

  /**
   * Registers DRYDOCK_REPOS entries with the defaults of `drydock repo add`
   * (no snapshot schedule: `drydock repo add` makes one). A registered repo
   * keeps its limits; the entry's name moves to its URL if another repo had it.
   */
  async seed(entries: string[] | undefined): Promise<void> {
    for (const { name, url } of parseRepoList(entries ?? [])) {
      const d = REGISTRATION_DEFAULTS;
      await this.pool.query('update snapshot_repos set name = null where lower(name) = lower($2) and repo <> $1', [
        url,
        name,
      ]);
      await this.pool.query(
        `insert into snapshot_repos (repo, name, every_ms, keep, setup_timeout_ms, egress) values ($1, $2, $3, $4, $5, $6)
         on conflict (repo) do update set name = excluded.name`,
        [url, name, d.everyMs, d.keep, d.setupTimeoutMs, JSON.stringify(d.egress)],
      );
    }
  }
}

/**
 * Repos by name or URL, from the registry (seeded from DRYDOCK_REPOS), and
 * what a webhook-started session on one runs.
 */
export function createRepoLookup(registry: RepoRegistry, triggerDefault?: TriggerSession) {
  const notServed = (what: string) =>
    `${what} is not served by this drydock (register it: drydock repo add <url> --name owner/name)`;
  return {
    /** What a webhook-started session on `repo` runs, or why nothing may start. */
    triggerSession: (repo: Pick<KnownRepo, 'name'>) => triggerSessionFor(repo, triggerDefault),
    /** Every registered repo. */
    list: () => registry.list(),
    /** The repo called `name` ("owner/name", case-insensitive like GitHub), or why not. */
    async byName(name: unknown): Promise<RepoLookup> {
      if (typeof name !== 'string' || !REPO_NAME.test(name))
        return { ok: false, reason: 'repo: expected "owner/name"' };
      const repo = (await registry.list()).find((r) => r.name.toLowerCase() === name.toLowerCase());
      return repo ? { ok: true, repo } : { ok: false, reason: notServed(`repo ${name}`) };
    },
    /** The repo cloned from `url`, or why not. */
    async byUrl(url: unknown): Promise<RepoLookup> {
      if (typeof url === 'string' && hasUrlCredentials(url)) {
        return { ok: false, reason: `repo.url: ${URL_CREDENTIALS_REFUSED}` };
      }
      const repo = (await registry.list()).find((r) => r.url === url);
      return repo ? { ok: true, repo } : { ok: false, reason: notServed(`repo.url ${redactUrl(String(url))}`) };
    },
  };
}

export type RepoLookupService = ReturnType<typeof createRepoLookup>;

/**
 * What a webhook-started session on `repo` runs (its agent, checks,
 * approvals), or why nothing may start. Today the server's default
 * (DRYDOCK_TRIGGER_SESSION), for every registered repo.
 */
export function triggerSessionFor(
  repo: Pick<KnownRepo, 'name'>,
  triggerDefault: TriggerSession | undefined,
): { ok: true; session: TriggerSession } | { ok: false; reason: string } {
  return triggerDefault
    ? { ok: true, session: triggerDefault }
    : { ok: false, reason: `no agent is configured for ${repo.name} (set DRYDOCK_TRIGGER_SESSION)` };
}

/** Opens the registry's lookup over a pool, seeding it from DRYDOCK_REPOS first. */
export async function seededRepoLookup(
  pool: Pool,
  config: Pick<Config, 'DRYDOCK_REPOS'> & Partial<Pick<Config, 'DRYDOCK_TRIGGER_SESSION'>>,
): Promise<RepoLookupService> {
  const registry = new RepoRegistry(pool);
  await registry.seed(config.DRYDOCK_REPOS);
  return createRepoLookup(registry, config.DRYDOCK_TRIGGER_SESSION);
}
