/** CLI verbs of snapshots: `repo add|list`, `snapshot build|list`. */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { parseMcpDeclaration, type McpServer } from '../workflows/mcp-servers';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { WorkflowFailedError, type Client } from '@temporalio/client';
import { followBuild } from './build-progress';
import { isRegistryName, normalizeRegistry } from '../workflows/rules/images';
import {
  matchRule,
  type SnapshotBuildResult,
  POOL_MAX,
  PoolRegistry,
  ensureSnapshotSchedules,
  inferredSetupAt,
  OPERATOR_SETUP_SOURCE,
  removeSnapshotSchedules,
  SnapshotRegistry,
  repoSlug,
  type SnapshotBuildRow,
} from '../sandbox';
import { describeInferredSetup, type InferredSetup } from '../workflows/rules/setup-inference';
import { hasUrlCredentials, URL_CREDENTIALS_REFUSED } from '../workflows/rules/repo-url';
import type { Pool } from 'pg';
import type { Config } from '../platform/config';
import { openDatabase } from '../store/db';
import { REPO_NAME, repoNameOf, RepoRegistry, seededRepoLookup } from '../repos/registry';
import { REGISTRATION_DEFAULTS, type RepoRegistration, type SetupEgressRule } from '../repos/registry';
import { duration, secretName } from '../workflows/input';
import { durationMs } from '../workflows/units';
import { repoMaxima, type RepoMaxima } from '../workflows/repo-config';
import {
  conflictingFlags,
  parseEnvironmentSetting,
  type OperatorEnvironment,
} from '../workflows/rules/environment-choice';

const run = promisify(execFile);

export class SnapshotUsageError extends Error {}

async function withRegistry<T>(config: Config, fn: (registry: SnapshotRegistry, pool: Pool) => Promise<T>): Promise<T> {
  const db = await openDatabase(config);
  try {
    return await fn(new SnapshotRegistry(db.pool), db.pool);
  } finally {
    await db.close();
  }
}

function parseDuration(flag: string, value: string): number {
  const parsed = duration.safeParse(/^\d+$/.test(value) ? Number(value) : value);
  if (!parsed.success) throw new SnapshotUsageError(`${flag}: expected a duration like "30m" or "2h", got "${value}"`);
  return durationMs(parsed.data);
}

/** "host" or "host:port" (IPv6 in brackets) → an egress rule. */
export function parseAllow(value: string): SetupEgressRule {
  const m = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9*.-]+)(?::(\d{1,5}))?$/.exec(value.trim());
  if (!m || (m[2] && (Number(m[2]) < 1 || Number(m[2]) > 65535))) {
    throw new SnapshotUsageError(`--allow: expected "host" or "host:port", got "${value}"`);
  }
  return { host: m[1].replace(/^\[|\]$/g, ''), ...(m[2] ? { port: Number(m[2]) } : {}) };
}

export interface AddRepoOptions {
  name?: string;
  setup?: string;
  ref?: string;
  every?: string;
  keep?: string;
  timeout?: string;
  allow?: string[];
  allowRegistry?: string[];
  secret?: string[];
  approver?: string[];
  maxCpus?: string;
  maxMemory?: string;
  maxPids?: string;
  maxTmp?: string;
  maxWallTime?: string;
  maxDisk?: string;
  pool?: string;
  /** `--environment devcontainer|dockerfile|base|image:<ref>`. */
  environment?: string;
  /** `--mcp <file>`: the repo's MCP servers, a JSON or YAML list (docs/mcp.md). */
  mcp?: string;
  /** `--webhook-secret <NAME>`: its own webhook secrets, serve's DRYDOCK_SECRET_<NAME>, current first (docs/forges.md). */
  webhookSecret?: string[];
  ignoreDevcontainer?: boolean;
}

/** Registers (or updates) a repo: its snapshot settings, its name and the operator's limits. */
export async function addRepo(
  client: Client,
  config: Config,
  url: string,
  opts: AddRepoOptions,
): Promise<{
  registration: RepoRegistration & { name: string; pool: number; mcp: McpServer[]; webhookSecrets: string[] };
  scheduleIds: string[];
  inferred?: string[];
  lockfileEgress?: LockfileEgress;
}> {
  if (hasUrlCredentials(url)) throw new SnapshotUsageError(`<url>: ${URL_CREDENTIALS_REFUSED}`);
  const keep = opts.keep === undefined ? REGISTRATION_DEFAULTS.keep : Number(opts.keep);
  if (!Number.isInteger(keep) || keep < 1) throw new SnapshotUsageError(`--keep: expected a whole number ≥ 1`);
  const poolSize = opts.pool === undefined ? 0 : /^\d+$/.test(opts.pool) ? Number(opts.pool) : NaN;
  if (!(poolSize >= 0 && poolSize <= POOL_MAX)) {
    throw new SnapshotUsageError(`--pool: expected a whole number from 0 to ${POOL_MAX}, got "${opts.pool}"`);
  }
  const name = opts.name ?? repoNameOf(url);
  if (!REPO_NAME.test(name)) throw new SnapshotUsageError(`--name: expected "owner/name", got "${name}"`);
  const registration: RepoRegistration = {
    repo: url,
    ...(opts.setup ? { setup: opts.setup } : {}),
    ...(opts.ref ? { ref: opts.ref } : {}),
    everyMs: opts.every ? parseDuration('--every', opts.every) : REGISTRATION_DEFAULTS.everyMs,
    keep,
    setupTimeoutMs: opts.timeout ? parseDuration('--timeout', opts.timeout) : REGISTRATION_DEFAULTS.setupTimeoutMs,
    egress: opts.allow?.length ? opts.allow.map(parseAllow) : REGISTRATION_DEFAULTS.egress,
    registries: parseRegistries(opts.allowRegistry ?? []),
    ...parseEnvironment(opts),
  };
  // No setup given: what the lockfiles imply, printed; without --allow its registries are the egress.
  // A setup given: the lockfiles still say which registries it fetches from (lockfileEgress).
  const lockfiles = await inferAtRegistration(url, opts.ref, {
    devcontainerCounts: readsDevcontainer(registration),
    repoSetupCounts: !opts.setup,
  });
  const inferred = opts.setup ? undefined : lockfiles;
  if (inferred && !opts.allow?.length) registration.egress = inferred.egress.map((host) => ({ host }));
  const lockfileEgress =
    opts.setup && lockfiles ? keepLockfileHosts(registration, lockfiles, !opts.allow?.length) : undefined;
  const mcp = opts.mcp ? await readMcpFile(opts.mcp) : [];
  const webhookSecrets = parseSecrets(opts.webhookSecret ?? [], '--webhook-secret');
  const limits = {
    secrets: parseSecrets(opts.secret ?? []),
    maxima: parseMaxima(opts),
    approvers: opts.approver ?? [],
  };
  const hosts = await withRegistry(config, async (registry, pool) => {
    await registry.upsertRepo(registration);
    await new RepoRegistry(pool).setLimits(url, name, limits);
    await new RepoRegistry(pool).setMcp(url, mcp);
    await new RepoRegistry(pool).setWebhookSecrets(url, webhookSecrets);
    await new PoolRegistry(pool).setSize(url, poolSize);
    return registry.hosts();
  });
  // Every known host refreshes it on its own schedule; a host whose worker starts later adds its own.
  const scheduleIds = await ensureSnapshotSchedules(client, {
    repos: [registration],
    hosts,
    taskQueue: config.DRYDOCK_TASK_QUEUE,
  });
  return {
    registration: { ...registration, name, ...limits, pool: poolSize, mcp, webhookSecrets },
    scheduleIds,
    ...(inferred ? { inferred: describeInferredSetup(inferred, operatorImage(registration)) } : {}),
    ...(lockfileEgress ? { lockfileEgress } : {}),
  };
}

/** The registries a repo's lockfiles fetch from, beside an operator's --setup: kept, or left out by --allow. */
export interface LockfileEgress {
  /** The lockfiles that named them, e.g. ["yarn.lock"]. */
  lockfiles: string[];
  /** Hosts added to the default egress (no --allow given). */
  kept: string[];
  /** Hosts the operator's --allow list does not reach. */
  leftOut: string[];
}

/** What `repo add --setup` says of the lockfiles' registries: kept (and the whole egress), or left out by --allow. */
export function describeLockfileEgress(found: LockfileEgress, egress: SetupEgressRule[]): string {
  const from = found.lockfiles.join(', ');
  if (found.leftOut.length) {
    return (
      `note: a setup from ${from} fetches from ${found.leftOut.join(', ')}, which --allow leaves out: add ` +
      `${found.leftOut.map((h) => `--allow ${h}`).join(' ')} if yours needs it`
    );
  }
  const all = egress.map((r) => (r.port ? `${r.host}:${r.port}` : r.host)).join(', ');
  const kept = found.kept.length ? ` (${found.kept.join(', ')} kept from ${from}; --allow replaces the list)` : '';
  return `egress for setup: ${all}${kept}`;
}

/**
 * An operator's --setup replaces the command, not the registries it needs:
 * without --allow, the lockfiles' hosts join the default egress (yarn.lock's
 * registry.yarnpkg.com beside registry.npmjs.org), as they are the egress when
 * no setup is given. With --allow the operator's list stands, and the hosts
 * it leaves out are named.
 */
function keepLockfileHosts(registration: RepoRegistration, lockfiles: InferredSetup, keep: boolean): LockfileEgress {
  const reached = (host: string) => matchRule(registration.egress, host, 443, 'CONNECT').allowed;
  const missing = lockfiles.egress.filter((host) => !reached(host));
  if (keep) registration.egress = [...registration.egress, ...missing.map((host) => ({ host }))];
  return {
    lockfiles: lockfiles.steps.map((s) => s.lockfile),
    kept: keep ? missing : [],
    leftOut: keep ? [] : missing,
  };
}

/** `--environment` and `--ignore-devcontainer` as the registry keeps them; a bad value names its flag. */
function parseEnvironment(opts: AddRepoOptions): OperatorEnvironment {
  const parsed = opts.environment === undefined ? undefined : parseEnvironmentSetting(opts.environment);
  if (parsed && !parsed.ok) throw new SnapshotUsageError(parsed.problem);
  const operator: OperatorEnvironment = {
    ...(parsed?.ok ? { environment: parsed.setting } : {}),
    ...(opts.ignoreDevcontainer ? { ignoreDevcontainer: true } : {}),
  };
  const conflict = conflictingFlags(operator);
  if (conflict) throw new SnapshotUsageError(conflict);
  return operator;
}

/** The operator's `--environment image:<ref>`, as it was given, or undefined. */
function operatorImage(reg: OperatorEnvironment): string | undefined {
  return reg.environment?.startsWith('image:') ? reg.environment : undefined;
}

/** Whether the repo's own dev container may be its environment (and so say its setup). */
function readsDevcontainer(reg: OperatorEnvironment): boolean {
  return !reg.ignoreDevcontainer && (reg.environment === undefined || reg.environment === 'devcontainer');
}

/** What `repo remove` removed. */
export interface RepoRemoval {
  name: string;
  repo: string;
  /** The refresh schedules deleted, one per host that had one. */
  scheduleIds: string[];
}

/**
 * Unregisters a repo (by URL or "owner/name"): its registration (name,
 * limits, setup, environment, pool size) and its refresh schedule on every
 * host. Its build history stays; its idle pool sandboxes go at each host's
 * next reaper run. One seeded from DRYDOCK_REPOS is refused: it would return.
 */
export async function removeRepo(client: Client, config: Config, repo: string): Promise<RepoRemoval> {
  if (hasUrlCredentials(repo)) throw new SnapshotUsageError(`<url>: ${URL_CREDENTIALS_REFUSED}`);
  const { removed, hosts } = await withRegistry(config, async (registry, pool) => {
    const known = (await new RepoRegistry(pool).list()).find(
      (r) => r.url === repo || (REPO_NAME.test(repo) && r.name.toLowerCase() === repo.toLowerCase()),
    );
    if (!known) throw new SnapshotUsageError(`${repo} is not registered (drydock repo list shows what is)`);
    const seeded = (config.DRYDOCK_REPOS ?? []).some(
      (entry) => entry.slice(entry.indexOf('=') + 1).trim() === known.url,
    );
    if (seeded) {
      throw new SnapshotUsageError(
        `${known.name} is seeded from DRYDOCK_REPOS: take it out of DRYDOCK_REPOS first, or it comes back at the next start`,
      );
    }
    await registry.removeRepo(known.url);
    return { removed: known, hosts: await registry.everyHost() };
  });
  const scheduleIds = await removeSnapshotSchedules(
    client,
    removed.url,
    hosts.map((h) => h.id),
  );
  return { name: removed.name, repo: removed.url, scheduleIds };
}

function parseRegistries(values: string[]): string[] {
  for (const v of values) {
    if (!isRegistryName(v))
      throw new SnapshotUsageError(`--allow-registry: expected "host" or "host:port", got "${v}"`);
  }
  return values.map(normalizeRegistry);
}

/**
 * The setup a repo's lockfiles imply, read from a shallow clone at
 * registration (the snapshot build infers it again at each commit); undefined
 * when the clone fails (no credentials here, say) or nothing is implied, or
 * when the repo says its setup itself and that counts (no --setup given).
 */
async function inferAtRegistration(
  url: string,
  ref: string | undefined,
  counts: { devcontainerCounts: boolean; repoSetupCounts: boolean },
): Promise<InferredSetup | undefined> {
  const { devcontainerCounts, repoSetupCounts } = counts;
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-repo-add-'));
  try {
    const branch = ref ? ['--branch', ref] : [];
    await run('git', ['clone', '--quiet', '--depth', '1', '--no-checkout', ...branch, url, dir], { timeout: 60_000 });
    // A repo that says its setup itself (its setup script, config file or dev container) needs no inference.
    const { stdout } = await run('git', [
      '-C',
      dir,
      'ls-tree',
      '-r',
      '--name-only',
      'HEAD',
      '.drydock',
      '.devcontainer',
    ]);
    const show = async (file: string) =>
      stdout.split('\n').includes(file) ? (await run('git', ['-C', dir, 'show', `HEAD:${file}`])).stdout : '';
    const config = await show('.drydock/config.yaml');
    // A dev container says setup only with one of its create commands (a compose dev container often has none).
    const devcontainer = await show('.devcontainer/devcontainer.json');
    const says =
      devcontainerCounts && /"(onCreateCommand|updateContentCommand|postCreateCommand)"\s*:/.test(devcontainer);
    const repoSays = /(^|\n)\.drydock\/setup\.sh/.test(stdout) || /^setup:/m.test(config) || says;
    if (repoSays && repoSetupCounts) return undefined;
    return await inferredSetupAt(dir, 'HEAD');
  } catch {
    return undefined;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** `--mcp <file>`: a JSON or YAML list of MCP servers, validated; a problem names the file and the field. */
export async function readMcpFile(file: string): Promise<McpServer[]> {
  let raw: unknown;
  try {
    raw = parseYaml(await readFile(file, 'utf8'));
  } catch (err) {
    throw new SnapshotUsageError(`--mcp ${file}: ${(err as Error).message}`);
  }
  const parsed = parseMcpDeclaration(raw);
  if (!parsed.ok) throw new SnapshotUsageError(`--mcp ${file}: ${parsed.problems.join('; ')}`);
  return parsed.servers;
}

function parseSecrets(names: string[], flag = '--secret'): string[] {
  for (const n of names) {
    if (!secretName.safeParse(n).success)
      throw new SnapshotUsageError(`${flag}: expected a name like MODEL_KEY, got "${n}"`);
  }
  return names;
}

/** --max-* flags → the operator's maxima; numbers given as digits count as numbers (ms, bytes, CPUs). */
function parseMaxima(opts: AddRepoOptions): RepoMaxima {
  const flags = {
    cpus: opts.maxCpus,
    memory: opts.maxMemory,
    pids: opts.maxPids,
    tmp: opts.maxTmp,
    wallTime: opts.maxWallTime,
    disk: opts.maxDisk,
  };
  const raw = Object.fromEntries(
    Object.entries(flags)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => [k, /^\d+(\.\d+)?$/.test(v!) ? Number(v) : v]),
  );
  const parsed = repoMaxima.safeParse(raw);
  if (parsed.success) return parsed.data;
  const dashed = (k: PropertyKey) => `--max-${String(k).replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
  throw new SnapshotUsageError(parsed.error.issues.map((i) => `${dashed(i.path[0])}: ${i.message}`).join('; '));
}

/**
 * A repo given as "owner/name" is looked up in the registry; a URL is passed
 * on as it is (the worker refuses unregistered ones). Every verb that takes a
 * repo (`run --repo`, `list --repo`, `snapshot build`) resolves it here;
 * `field` is how its messages name the argument.
 */
export async function resolveRepo(config: Config, repo: string, field = '--repo'): Promise<string> {
  if (hasUrlCredentials(repo)) throw new SnapshotUsageError(`${field}: ${URL_CREDENTIALS_REFUSED}`);
  if (!REPO_NAME.test(repo) || repo.includes('://')) return repo;
  const found = await withRegistry(config, async (_, pool) => (await seededRepoLookup(pool, config)).byName(repo));
  if (!found.ok) throw new SnapshotUsageError(found.reason);
  return found.repo.url;
}

export async function listRepos(config: Config, json: boolean): Promise<void> {
  const rows = await withRegistry(config, async (registry, pool) => {
    const known = await (await seededRegistry(pool, config)).list();
    return Promise.all(
      (await registry.repos()).map(async (reg) => {
        const builds = await registry.builds({ repo: reg.repo, limit: 20 });
        const { name, limits } = known.find((k) => k.url === reg.repo)!;
        return {
          name,
          mcp: known.find((k) => k.url === reg.repo)!.mcp ?? [],
          webhookSecrets: known.find((k) => k.url === reg.repo)!.webhookSecrets ?? [],
          ...reg,
          secrets: limits.secrets,
          maxima: limits.maxima,
          approvers: limits.approvers,
          pool: await new PoolRegistry(pool).size(reg.repo),
          lastBuild: builds[0],
          newestReady: builds.find((b) => b.status === 'ready'),
          setupInEffect: setupInEffect(reg, builds),
        };
      }),
    );
  });
  if (json) {
    console.log(JSON.stringify(rows, null, 2));
    return;
  }
  if (rows.length === 0) console.log('no repos registered (drydock repo add <url> --setup "<command>")');
  for (const r of rows) {
    const maxima = Object.entries(r.maxima).map(([k, v]) => `${k} ${v}`);
    console.log(
      `${r.name}  ${r.repo}\n  setup: ${describeSetup(r.setupInEffect)}\n  every ${minutes(r.everyMs)}  keep ${r.keep}  ` +
        `allow ${r.egress.map((e) => (e.port ? `${e.host}:${e.port}` : e.host)).join(', ') || 'nothing'}\n` +
        `  secrets: ${r.secrets.join(', ') || 'none'}  maxima: ${maxima.join(', ') || 'the defaults'}  ` +
        `approvers: ${r.approvers.join(', ') || "the server's"}\n` +
        `  webhook secrets: ${r.webhookSecrets.join(', ') || "the forge's"}\n` +
        `  MCP servers: ${r.mcp.map((m) => `${m.name} (${m.tools.length} tools${m.writes.length ? `, ${m.writes.length} writing` : ''})`).join(', ') || 'none'}\n` +
        `  environment: ${r.environment ?? "the repo's"}${r.ignoreDevcontainer ? ' (its dev container ignored)' : ''}\n` +
        `  newest snapshot: ${r.newestReady ? describeBuild(r.newestReady) + notesText(r.newestReady.notes, '    ') : 'none yet'}` +
        (r.lastBuild && r.lastBuild !== r.newestReady ? `\n  last build: ${describeBuild(r.lastBuild)}` : ''),
    );
  }
}

/** What setup a repo's next build runs, as far as the registry knows, and where it comes from. */
export interface SetupInEffect {
  /** The command, unknown (undefined) until a build has chosen one from the repo. */
  command?: string;
  /** "the operator (--setup)", ".drydock/config.yaml", "the dev container", ".drydock/setup.sh", "inferred from go.sum"... */
  source?: string;
  /** The commit of the build that chose it; none for the operator's own. */
  commit?: string;
}

/**
 * The operator's --setup when there is one; else what the newest build chose
 * from the repo (the repo file, its dev container, .drydock/setup.sh, or its
 * lockfiles), which the next build chooses again at its commit. A build that
 * ran an operator's setup since removed says nothing of the repo's.
 */
export function setupInEffect(reg: Pick<RepoRegistration, 'setup'>, builds: SnapshotBuildRow[]): SetupInEffect {
  if (reg.setup) return { command: reg.setup, source: OPERATOR_SETUP_SOURCE };
  const chosen = builds.find((b) => b.setup && b.setupSource && b.setupSource !== OPERATOR_SETUP_SOURCE);
  return chosen ? { command: chosen.setup, source: chosen.setupSource, commit: chosen.commit } : {};
}

function describeSetup(setup: SetupInEffect): string {
  if (!setup.command) {
    return (
      "the repo's, chosen at its first build: .drydock/config.yaml's setup, its dev container's, " +
      '.drydock/setup.sh, else inferred from its lockfiles'
    );
  }
  const from = setup.source!.startsWith('inferred ') ? setup.source! : `from ${setup.source!}`;
  const at = setup.commit ? `, as of the build at ${setup.commit.slice(0, 12)}; chosen again at each build` : '';
  return `${setup.command} (${from}${at})`;
}

/** The registry over a pool, seeded from DRYDOCK_REPOS first. */
async function seededRegistry(pool: Pool, config: Config): Promise<RepoRegistry> {
  const registry = new RepoRegistry(pool);
  await registry.seed(config.DRYDOCK_REPOS);
  return registry;
}

export async function listSnapshots(config: Config, repo: string | undefined, json: boolean): Promise<void> {
  const builds = await withRegistry(config, (registry) => registry.builds({ repo, limit: 50 }));
  if (json) {
    console.log(JSON.stringify(builds, null, 2));
    return;
  }
  if (builds.length === 0) console.log('no snapshot builds');
  for (const b of builds) console.log(`${b.repo}  ${describeBuild(b)}${notesText(b.notes)}`);
}

/** A build's notes about the repo's environment, one a line (sandbox/snapshots.ts boundedNotes: bounded, plain text). */
export function notesText(notes: string[] | undefined, indent = '  '): string {
  return (notes ?? []).map((n) => `\n${indent}note: ${n}`).join('');
}

/** Builds a repo's snapshot (by URL or registered "owner/name") now and waits for the outcome; exit code 0 when it is ready. */
export async function buildSnapshot(
  client: Client,
  config: Config,
  repo: string,
  opts: { detach: boolean; json: boolean },
): Promise<number> {
  repo = await resolveRepo(config, repo, '<repo>');
  const workflowId = `drydock-snapshot-${repoSlug(repo)}-manual-${Date.now().toString(36)}`;
  const handle = await client.workflow.start('refreshSnapshot', {
    workflowId,
    taskQueue: config.DRYDOCK_TASK_QUEUE,
    args: [{ repo }],
  });
  if (opts.detach) {
    console.log(opts.json ? JSON.stringify({ buildId: workflowId }) : workflowId);
    return 0;
  }
  if (!opts.json) console.error(`snapshot build ${workflowId} started`);
  const outcome = handle.result();
  if (!opts.json) await followBuild(client, handle, outcome);
  try {
    const result = (await outcome) as SnapshotBuildResult;
    console.log(
      opts.json
        ? JSON.stringify(result)
        : `snapshot ready: ${result.image} (commit ${result.commit.slice(0, 12)}, ${mb(result.sizeBytes)}, ${seconds(result.durationMs)})` +
            notesText(result.notes),
    );
    return 0;
  } catch (err) {
    if (!(err instanceof WorkflowFailedError)) throw err;
    const result = (err.cause as { details?: unknown[] } | undefined)?.details?.[0] as SnapshotBuildResult | undefined;
    const why = rootCause(err);
    if (opts.json) console.log(JSON.stringify(result ?? { error: why }));
    else
      console.error(
        `drydock: snapshot build failed: ${why}${notesText(result?.notes)}\nthe previous snapshot stays in service`,
      );
    return 1;
  }
}

/**
 * The reason a build failed, not Temporal's wrapping of it: an activity's
 * failure ("Activity task failed") carries the reason as its cause.
 */
export function rootCause(err: Error): string {
  let at: Error = err;
  while (at.cause instanceof Error) at = at.cause;
  return at.message;
}

function describeBuild(b: SnapshotBuildRow): string {
  const what =
    b.status === 'ready' || b.status === 'removed' ? b.image : b.status === 'failed' ? `FAILED: ${b.error}` : '';
  return `${b.status} ${b.commit?.slice(0, 12) ?? ''} ${b.finishedAt ?? b.startedAt} on ${b.host}  ${what ?? ''}`
    .replace(/\s+/g, ' ')
    .trim();
}

const minutes = (ms: number) => (ms % 60_000 === 0 ? `${ms / 60_000}m` : `${ms / 1000}s`);
const mb = (bytes?: number) => (bytes === undefined ? '?' : `${Math.round(bytes / 1024 ** 2)} MB`);
const seconds = (ms?: number) => (ms === undefined ? '?' : `${(ms / 1000).toFixed(1)} s`);
