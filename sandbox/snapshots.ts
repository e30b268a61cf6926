/**
 * Snapshots: prepared images of registered repos (clone + setup done ahead of
 * time), so a session starts from one in about a second and only catches up
 * with the commits made since. This module holds the registry (Postgres), the
 * names (images, schedules) and what counts as a setup input.
 */
import { inferSetup, type InferredSetup } from '../workflows/rules/setup-inference';
import { createHash } from 'node:crypto';
import { ScheduleAlreadyRunning, ScheduleNotFoundError, ScheduleOverlapPolicy, type Client } from '@temporalio/client';
import type { Pool } from 'pg';
import { readAtCommit } from '../repos/git';
import { repoFileSetup } from '../repos/config-file';
import type { RepoRegistration } from '../repos/registry';
import { plainLogText } from '../platform/scrub';

export type BuildStatus = 'building' | 'ready' | 'failed' | 'removed';

export interface SnapshotBuildRow {
  id: string;
  repo: string;
  host: string;
  status: BuildStatus;
  commit?: string;
  setupHash?: string;
  image?: string;
  sizeBytes?: number;
  startedAt: string;
  finishedAt?: string;
  durationMs?: number;
  error?: string;
  /** The setup command it ran, and where that came from ("--setup", ".drydock/config.yaml", "inferred from uv.lock"…). */
  setup?: string;
  setupSource?: string;
  /** Its services: images pinned by digest, and the data images setup's data is in. */
  services?: { name: string; image: string; dataImage?: string }[];
  /** What the build read of the repo's environment that may not be what its developers meant (noteBuild). */
  notes?: string[];
}

/** The file a repo may carry instead of a registered setup command. */
export const SETUP_SCRIPT = '.drydock/setup.sh';
/** Files whose change means setup must run again (anywhere in the tree: monorepos have several). */
export const LOCKFILES = [
  'package-lock.json',
  'npm-shrinkwrap.json',
  'yarn.lock',
  'pnpm-lock.yaml',
  'bun.lock',
  'bun.lockb',
  'uv.lock',
  'poetry.lock',
  'requirements.txt',
  'requirements-dev.txt',
  'dev-requirements.txt',
  'requirements-test.txt',
  'test-requirements.txt',
  'go.sum',
  'Cargo.lock',
  'Gemfile.lock',
];

/**
 * Package managers' manifests and settings: where no lockfile pins it, what setup installs is
 * named here. Not setup inputs (a script's edit in package.json would make every session run
 * setup), but a refresh takes an earlier build's setup result only when none of them changed.
 */
export const MANIFESTS = [
  'package.json',
  '.npmrc',
  '.yarnrc.yml',
  'pyproject.toml',
  'setup.py',
  'setup.cfg',
  'Pipfile',
  'go.mod',
  'Cargo.toml',
  'Gemfile',
];

/** Whether a manifest (MANIFESTS, anywhere in the tree) differs between two commits; unknown counts as yes. */
export async function manifestChanged(mirror: string, from: string, to: string): Promise<boolean> {
  const changed = await readAtCommit(mirror, to, ['diff', '--name-only', '-z', from, to]).catch(() => undefined);
  if (changed === undefined) return true;
  return changed.split('\0').some((file) => MANIFESTS.includes(file.split('/').pop()!));
}

/** Docker labels of snapshot images. */
export const SNAPSHOT_LABELS = {
  image: 'drydock.image',
  repo: 'drydock.snapshot.repo',
  commit: 'drydock.snapshot.commit',
  setupHash: 'drydock.snapshot.setup-hash',
  created: 'drydock.snapshot.created',
  build: 'drydock.snapshot.build',
  /** The image the snapshot sits on (its repo's environment, or the base image). */
  environment: 'drydock.snapshot.environment',
  host: 'drydock.host',
  /** When setup last ran for what the snapshot holds: its own build's, or the one whose result it reuses. */
  setupAt: 'drydock.snapshot.setup-at',
} as const;

/**
 * A refresh reuses the newest snapshot's setup result (its /workspace, caught
 * up to the new commit, setup not run) when the setup hash is the same (the
 * command, the lockfiles and setup script, the environment) and setup last
 * ran at most this long ago: so what setup made from the sources (a build's
 * output) is at most a day behind them, as a session's catch-up leaves it.
 */
export const SETUP_REUSE_MAX_AGE_MS = 24 * 60 * 60_000;

/** On a snapshot image: the environment its inferred setup's tool needs in sessions (JSON), e.g. GOMODCACHE. */
export const SNAPSHOT_ENV_LABEL = 'drydock.snapshot.env';

/** The label a session's sandbox carries naming the snapshot it started from. */
export const SANDBOX_SNAPSHOT_LABEL = 'drydock.snapshot';

/** A short, Docker- and id-safe name of a repo: its basename and a hash of the URL. */
export function repoSlug(url: string): string {
  const base = (url.replace(/\/+$/, '').split(/[/:]/).pop() ?? 'repo')
    .replace(/\.git$/, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 40);
  return `${base || 'repo'}-${createHash('sha256').update(url).digest('hex').slice(0, 8)}`;
}

/** `drydock-snapshot-<slug>:<commit12>-<build hash>`: by repo and commit, unique per build. */
export function snapshotImageTag(repo: string, commit: string, buildId: string): string {
  const build = createHash('sha256').update(buildId).digest('hex').slice(0, 8);
  return `drydock-snapshot-${repoSlug(repo)}:${commit.slice(0, 12)}-${build}`;
}

/** The Temporal Schedule that refreshes a repo's snapshot on one host. */
export function snapshotScheduleId(repo: string, host: string): string {
  return `drydock-snapshot-${repoSlug(repo)}@${host}`;
}

/** A Docker host with a worker: its id and its task queue (`<queue>@<host id>`). */
export interface HostRow {
  id: string;
  queue: string;
}

/** Hosts not seen for this long (no worker start, no reaper run) get no new schedules. */
const HOST_SEEN_WITHIN = '1 day';

/** The audit chain of a repo's snapshot builds. */
export function snapshotAuditId(repo: string): string {
  return `snapshot:${repo}`;
}

/** The setup inputs at a commit: each lockfile and the setup script, by blob id. */
export async function setupInputs(mirror: string, commit: string): Promise<Record<string, string>> {
  const listing = await readAtCommit(mirror, commit, ['ls-tree', '-r', '-z', commit]);
  const inputs: Record<string, string> = {};
  for (const entry of listing.split('\0')) {
    const m = /^\d+ blob ([0-9a-f]+)\t(.+)$/.exec(entry);
    if (!m) continue;
    const [, blob, file] = m;
    if (file === SETUP_SCRIPT || LOCKFILES.includes(file.split('/').pop()!)) inputs[file] = blob;
  }
  return inputs;
}

/** Where a setup given with `repo add --setup` is said to come from (builds record it; `repo list` shows it). */
export const OPERATOR_SETUP_SOURCE = 'the operator (--setup)';

/** Where the dev container's own lifecycle commands (its features' among them) are said to come from as setup. */
const DEVCONTAINER_SETUP_SOURCE = 'the dev container';
/** Where its features' lifecycle commands alone are said to come from. */
const FEATURES_SETUP_SOURCE = "the dev container's features";

/**
 * The setup command of a registration at a commit, or undefined when it has
 * none: the operator's, else the repo file's `setup`, else the dev
 * container's lifecycle commands, else the setup script, else what the
 * lockfiles imply (workflows/rules/setup-inference.ts). With where it came from.
 */
export function setupOf(
  reg: Pick<RepoRegistration, 'setup'>,
  inputs: Record<string, string>,
  repoFileSetup?: string,
  devcontainerSetup?: string,
  inferred?: InferredSetup,
): { command: string; source: string; env?: Record<string, string> } | undefined {
  if (reg.setup) return { command: reg.setup, source: OPERATOR_SETUP_SOURCE };
  if (repoFileSetup) return { command: repoFileSetup, source: '.drydock/config.yaml' };
  if (devcontainerSetup) return { command: devcontainerSetup, source: DEVCONTAINER_SETUP_SOURCE };
  if (inputs[SETUP_SCRIPT]) return { command: `sh ${SETUP_SCRIPT}`, source: SETUP_SCRIPT };
  if (!inferred) return undefined;
  const from = inferred.steps.map((s) => s.lockfile).join(', ');
  return { command: inferred.command, source: `inferred from ${from}`, env: inferred.env };
}

/**
 * The setup a registration runs at a commit, chosen the same way for a snapshot build and for a
 * session that must run it (so their setup hashes agree): setupOf's order with the one inferred
 * from the lockfiles last, the dev container's features' commands first (withFeatureSetup).
 * Undefined when nothing gives one (a build then looks at imageOnlySetup).
 */
export async function chooseSetup(
  reg: Pick<RepoRegistration, 'setup'>,
  at: { mirror: string; commit: string; inputs: Record<string, string> },
  environment: { setup?: string; featureSetup?: string },
): Promise<ReturnType<typeof setupOf>> {
  const [fileSetup, inferred] = await Promise.all([
    repoFileSetup(at.mirror, at.commit),
    inferredSetupAt(at.mirror, at.commit),
  ]);
  return withFeatureSetup(setupOf(reg, at.inputs, fileSetup, environment.setup, inferred), environment.featureSetup);
}

/**
 * When nothing gives a setup and the sandbox's image is the repo's own (its dev
 * container or Dockerfile, built whole, or the operator's image), that image is
 * the whole setup: nothing more runs (gufolabs/gufo_acme's Dockerfile installs
 * the package and its test extras), but its features' lifecycle commands
 * (`featureSetup`). On drydock's base image it stays a refusal.
 */
export function imageOnlySetup(imageFrom: string | undefined, featureSetup?: string): ReturnType<typeof setupOf> {
  if (!imageFrom) return undefined;
  if (featureSetup) return { command: featureSetup, source: FEATURES_SETUP_SOURCE };
  return { command: 'true', source: `none beyond the image from ${imageFrom}` };
}

/**
 * A setup with the dev container's features' lifecycle commands before it
 * (`featureSetup`, sandbox/activities/environment.ts): a setup given
 * elsewhere replaces the dev container's own commands, never its features',
 * which the Dev Container CLI runs whatever else does. The dev container's
 * own setup holds them already (in the CLI's order).
 */
export function withFeatureSetup(
  chosen: ReturnType<typeof setupOf>,
  featureSetup: string | undefined,
): ReturnType<typeof setupOf> {
  if (!chosen || !featureSetup || chosen.source === DEVCONTAINER_SETUP_SOURCE) return chosen;
  // Each in its own subshell, ended on a line of its own: a trailing comment or || in either stays inside it.
  return {
    ...chosen,
    command: `(${featureSetup}\n) && (${chosen.command}\n)`,
    source: `${FEATURES_SETUP_SOURCE}, then ${chosen.source}`,
  };
}

/** setupOf's command alone. */
export function setupCommandOf(...args: Parameters<typeof setupOf>): string | undefined {
  return setupOf(...args)?.command;
}

/** The setup a repo's lockfiles at `commit` imply (its root's names, package.json and two lockfiles read). */
export async function inferredSetupAt(mirror: string, commit: string): Promise<InferredSetup | undefined> {
  const names = await readAtCommit(mirror, commit, ['ls-tree', '--name-only', commit]);
  const read = (file: string) =>
    readAtCommit(mirror, commit, ['cat-file', 'blob', `${commit}:${file}`]).catch(() => undefined);
  const root = names.split('\n').filter(Boolean);
  return inferSetup({
    root,
    packageJson: root.includes('package.json') ? await read('package.json') : undefined,
    yarnLock: root.includes('yarn.lock') ? (await read('yarn.lock'))?.slice(0, 4096) : undefined,
    pnpmLock: root.includes('pnpm-lock.yaml') ? (await read('pnpm-lock.yaml'))?.slice(0, 4096) : undefined,
  });
}

/**
 * What a snapshot's setup depended on: the command, the inputs' contents and
 * the environment (image and Node.js version, sandbox/activities/environment.ts).
 */
export function setupHash(command: string, inputs: Record<string, string>, environment = ''): string {
  const hash = createHash('sha256').update(command).update('\0');
  if (environment) hash.update(`environment\0${environment}\0`);
  for (const file of Object.keys(inputs).sort()) hash.update(`${file}\0${inputs[file]}\0`);
  return hash.digest('hex');
}

/** Setup inputs that differ between two commits' listings (added, removed or changed). */
export function changedInputs(before: Record<string, string>, after: Record<string, string>): string[] {
  return [...new Set([...Object.keys(before), ...Object.keys(after)])].filter((f) => before[f] !== after[f]).sort();
}

/** The snapshot registry and build history, in Postgres. */
export class SnapshotRegistry {
  constructor(private readonly pool: Pool) {}

  async upsertRepo(reg: RepoRegistration): Promise<void> {
    await this.pool.query(
      `insert into snapshot_repos (repo, setup, ref, every_ms, keep, setup_timeout_ms, egress, registries,
         environment, ignore_devcontainer)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
       on conflict (repo) do update set setup = $2, ref = $3, every_ms = $4, keep = $5,
         setup_timeout_ms = $6, egress = $7, registries = $8, environment = $9, ignore_devcontainer = $10,
         updated_at = now()`,
      [
        reg.repo,
        reg.setup ?? null,
        reg.ref ?? null,
        reg.everyMs,
        reg.keep,
        reg.setupTimeoutMs,
        JSON.stringify(reg.egress),
        JSON.stringify(reg.registries ?? []),
        reg.environment ?? null,
        reg.ignoreDevcontainer ?? false,
      ],
    );
  }

  async repo(url: string): Promise<RepoRegistration | undefined> {
    const { rows } = await this.pool.query('select * from snapshot_repos where repo = $1', [url]);
    return rows[0] && repoFromDb(rows[0]);
  }

  async repos(): Promise<RepoRegistration[]> {
    const { rows } = await this.pool.query('select * from snapshot_repos order by repo');
    return rows.map(repoFromDb);
  }

  /** Unregisters a repo (`repo remove`): its row goes; its build history stays. False when it was not registered. */
  async removeRepo(url: string): Promise<boolean> {
    const { rowCount } = await this.pool.query('delete from snapshot_repos where repo = $1', [url]);
    return (rowCount ?? 0) > 0;
  }

  /** Every host that ever ran a worker here, however long ago (a repo's schedules may be on any of them). */
  async everyHost(): Promise<HostRow[]> {
    const { rows } = await this.pool.query<HostRow>('select id, queue from hosts order by id');
    return rows;
  }

  /** This host runs a worker now (its start, each reaper run). */
  async recordHost(host: HostRow): Promise<void> {
    await this.pool.query(
      `insert into hosts (id, queue) values ($1, $2) on conflict (id) do update set queue = $2, seen_at = now()`,
      [host.id, host.queue],
    );
  }

  /** The hosts seen lately: each gets a refresh schedule for every repo. */
  async hosts(): Promise<HostRow[]> {
    const { rows } = await this.pool.query<HostRow>(
      `select id, queue from hosts where seen_at > now() - interval '${HOST_SEEN_WITHIN}' order by id`,
    );
    return rows;
  }

  /** Records a build as started; a retry finds the row it wrote. */
  async startBuild(build: { id: string; repo: string; host: string }): Promise<SnapshotBuildRow> {
    await this.pool.query(
      `insert into snapshot_builds (id, repo, host, status, started_at) values ($1, $2, $3, 'building', now())
       on conflict (id) do nothing`,
      [build.id, build.repo, build.host],
    );
    return (await this.build(build.id))!;
  }

  async finishBuild(
    id: string,
    result: (
      | { status: 'ready'; commit: string; setupHash: string; image: string; sizeBytes: number }
      | { status: 'failed'; commit?: string; setupHash?: string; error: string }
    ) &
      Pick<SnapshotBuildRow, 'setup' | 'setupSource' | 'services'>,
  ): Promise<SnapshotBuildRow> {
    const ready = result.status === 'ready' ? result : undefined;
    await this.pool.query(
      `update snapshot_builds set status = $2, commit_sha = $3, setup_hash = $4, image = $5, size_bytes = $6,
         error = $7, setup = $8, setup_source = $9, services = $10,
         finished_at = now(), duration_ms = (extract(epoch from now() - started_at) * 1000)::bigint
       where id = $1 and status = 'building'`,
      [
        id,
        result.status,
        result.commit ?? null,
        result.setupHash ?? null,
        ready?.image ?? null,
        ready?.sizeBytes ?? null,
        result.status === 'failed' ? result.error : null,
        result.setup ?? null,
        result.setupSource ?? null,
        result.services ? JSON.stringify(result.services) : null,
      ],
    );
    return (await this.build(id))!;
  }

  /** Keeps the environment's notes of a build (bounded: BUILD_NOTES); none leaves the row as it is. */
  async noteBuild(id: string, notes: string[]): Promise<void> {
    const kept = boundedNotes(notes);
    if (!kept.length) return;
    await this.pool.query('update snapshot_builds set notes = $2 where id = $1', [id, JSON.stringify(kept)]);
  }

  async build(id: string): Promise<SnapshotBuildRow | undefined> {
    const { rows } = await this.pool.query('select * from snapshot_builds where id = $1', [id]);
    return rows[0] && buildFromDb(rows[0]);
  }

  /** Ready snapshots of a repo on a host, newest first. */
  async ready(repo: string, host: string): Promise<SnapshotBuildRow[]> {
    const { rows } = await this.pool.query(
      `select * from snapshot_builds where repo = $1 and host = $2 and status = 'ready'
       order by finished_at desc, id desc`,
      [repo, host],
    );
    return rows.map(buildFromDb);
  }

  async markRemoved(id: string): Promise<void> {
    await this.pool.query(`update snapshot_builds set status = 'removed', removed_at = now() where id = $1`, [id]);
  }

  /** The build history, newest first (of one repo when given). */
  async builds(opts: { repo?: string; limit?: number } = {}): Promise<SnapshotBuildRow[]> {
    const { rows } = await this.pool.query(
      `select * from snapshot_builds where ($1::text is null or repo = $1) order by started_at desc, id desc limit $2`,
      [opts.repo ?? null, opts.limit ?? 50],
    );
    return rows.map(buildFromDb);
  }
}

/** A build's notes at most: how many, and the characters of each (they quote the repo's files). */
export const BUILD_NOTES = { count: 20, chars: 600 } as const;

/**
 * Notes as a build keeps them: control characters and terminal sequences
 * removed (the text quotes repo files), each cut to BUILD_NOTES.chars, at
 * most BUILD_NOTES.count, the last saying how many more there were.
 */
export function boundedNotes(notes: string[]): string[] {
  const clean = [...new Set(notes.map((n) => plainLogText(n).replace(/\s+/g, ' ').trim()).filter(Boolean))];
  const cut = clean.map((n) => (n.length > BUILD_NOTES.chars ? `${n.slice(0, BUILD_NOTES.chars - 1)}…` : n));
  if (cut.length <= BUILD_NOTES.count) return cut;
  const kept = cut.slice(0, BUILD_NOTES.count - 1);
  return [...kept, `and ${cut.length - kept.length} more notes (the worker's log has them all)`];
}

function repoFromDb(r: Record<string, any>): RepoRegistration {
  return {
    repo: r.repo,
    ...(r.setup ? { setup: r.setup } : {}),
    ...(r.ref ? { ref: r.ref } : {}),
    everyMs: Number(r.every_ms),
    keep: r.keep,
    setupTimeoutMs: Number(r.setup_timeout_ms),
    egress: r.egress,
    registries: r.registries ?? [],
    ...(r.environment ? { environment: r.environment } : {}),
    ...(r.ignore_devcontainer ? { ignoreDevcontainer: true } : {}),
  };
}

function buildFromDb(r: Record<string, any>): SnapshotBuildRow {
  const optional = {
    commit: r.commit_sha,
    setupHash: r.setup_hash,
    image: r.image,
    sizeBytes: r.size_bytes === null ? undefined : Number(r.size_bytes),
    finishedAt: r.finished_at ? (r.finished_at as Date).toISOString() : undefined,
    durationMs: r.duration_ms === null ? undefined : Number(r.duration_ms),
    error: r.error,
    setup: r.setup,
    setupSource: r.setup_source,
    services: r.services,
    notes: r.notes,
  };
  return {
    id: r.id,
    repo: r.repo,
    host: r.host,
    status: r.status,
    startedAt: (r.started_at as Date).toISOString(),
    ...Object.fromEntries(Object.entries(optional).filter(([, v]) => v !== null && v !== undefined)),
  };
}

/**
 * Creates (or updates) the Schedule that runs `refreshSnapshot` for a repo on
 * one host every `everyMs`, overlaps skipped. Each host builds its own
 * snapshot: images stay on the engine that built them (there is no registry).
 *
 * Its first run is one period after it was made, and it keeps that phase when it is made again
 * (a worker's start, `repo add` once more) unless its period changed. A bare interval would be
 * aligned to the epoch: every repo of every host refreshed at the same moment (each hour's
 * first second with `--every 1h`), and a repo added a second before such a moment built at once,
 * beside whatever was building it then.
 */
async function ensureSnapshotSchedule(
  client: Client,
  opts: { repo: string; everyMs: number; taskQueue: string; host: HostRow },
): Promise<string> {
  const scheduleId = snapshotScheduleId(opts.repo, opts.host.id);
  const action = {
    type: 'startWorkflow' as const,
    workflowType: 'refreshSnapshot',
    workflowId: scheduleId,
    taskQueue: opts.taskQueue,
    args: [{ repo: opts.repo, hostQueue: opts.host.queue }],
  };
  const interval = (offset: number) => ({ intervals: [{ every: opts.everyMs, offset }] });
  // Whole seconds, as the server keeps them: rounded up, an offset could reach the period itself.
  const phaseNow = () => Math.floor((Date.now() % opts.everyMs) / 1000) * 1000;
  try {
    await client.schedule.create({
      scheduleId,
      spec: interval(phaseNow()),
      action,
      policies: { overlap: ScheduleOverlapPolicy.SKIP },
    });
  } catch (err) {
    if (!(err instanceof ScheduleAlreadyRunning)) throw err;
    await client.schedule.getHandle(scheduleId).update((previous) => {
      const kept = previous.spec.intervals?.[0];
      const samePeriod = kept?.every === opts.everyMs;
      return {
        ...previous,
        spec: interval(samePeriod ? (kept.offset ?? 0) : phaseNow()),
        action,
        policies: { ...previous.policies, overlap: ScheduleOverlapPolicy.SKIP },
      };
    });
  }
  return scheduleId;
}

/**
 * The refresh schedules of these repos on these hosts: a new repo on every
 * known host (`repo add`), every repo on a host whose worker starts.
 */
export async function ensureSnapshotSchedules(
  client: Client,
  opts: { repos: RepoRegistration[]; hosts: HostRow[]; taskQueue: string },
): Promise<string[]> {
  const ids: string[] = [];
  for (const reg of opts.repos) {
    for (const host of opts.hosts) {
      ids.push(
        await ensureSnapshotSchedule(client, { repo: reg.repo, everyMs: reg.everyMs, taskQueue: opts.taskQueue, host }),
      );
    }
  }
  return ids;
}

/** Deletes a repo's refresh schedule on each of these hosts (those already gone are skipped). */
export async function deleteSnapshotSchedules(client: Client, repo: string, hosts: string[]): Promise<void> {
  for (const host of hosts) {
    await client.schedule
      .getHandle(snapshotScheduleId(repo, host))
      .delete()
      .catch((err: unknown) => {
        if (!(err instanceof ScheduleNotFoundError)) throw err;
      });
  }
}

/**
 * Deletes every refresh schedule of a repo: those of these hosts, and any
 * other the server lists under the repo's name; returns the ids deleted.
 */
export async function removeSnapshotSchedules(client: Client, repo: string, hosts: string[]): Promise<string[]> {
  const prefix = snapshotScheduleId(repo, '');
  const ids = new Set(hosts.map((host) => snapshotScheduleId(repo, host)));
  for await (const schedule of client.schedule.list()) {
    if (schedule.scheduleId.startsWith(prefix)) ids.add(schedule.scheduleId);
  }
  const deleted: string[] = [];
  for (const id of ids) {
    const gone = await client.schedule
      .getHandle(id)
      .delete()
      .then(
        () => true,
        (err: unknown) => {
          if (err instanceof ScheduleNotFoundError) return false;
          throw err;
        },
      );
    if (gone) deleted.push(id);
  }
  return deleted.sort();
}

/** Runs the repo's refresh on this host now (skipped if one is running); false when it has no schedule there. */
export async function triggerSnapshotBuild(client: Client, repo: string, host: string): Promise<boolean> {
  try {
    await client.schedule.getHandle(snapshotScheduleId(repo, host)).trigger();
    return true;
  } catch (err) {
    if (err instanceof ScheduleNotFoundError) return false;
    throw err;
  }
}
