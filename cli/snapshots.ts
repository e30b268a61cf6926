/** CLI verbs of snapshots: `repo add|list`, `snapshot build|list`. */
import { WorkflowFailedError, type Client } from '@temporalio/client';
import type { SnapshotBuildResult } from '../activities/snapshot';
import type { Config } from '../lib/config';
import { openDatabase } from '../lib/db';
import {
  ensureSnapshotSchedule,
  REGISTRATION_DEFAULTS,
  SnapshotRegistry,
  snapshotScheduleId,
  type RepoRegistration,
  type SetupEgressRule,
  type SnapshotBuildRow,
} from '../lib/snapshots';
import { duration, durationMs } from '../workflows/input';

export class SnapshotUsageError extends Error {}

async function withRegistry<T>(config: Config, fn: (registry: SnapshotRegistry) => Promise<T>): Promise<T> {
  const db = await openDatabase(config);
  try {
    return await fn(new SnapshotRegistry(db.pool));
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

export async function addRepo(
  client: Client,
  config: Config,
  url: string,
  opts: { setup?: string; ref?: string; every?: string; keep?: string; timeout?: string; allow?: string[] },
): Promise<{ registration: RepoRegistration; scheduleId: string }> {
  const keep = opts.keep === undefined ? REGISTRATION_DEFAULTS.keep : Number(opts.keep);
  if (!Number.isInteger(keep) || keep < 1) throw new SnapshotUsageError(`--keep: expected a whole number ≥ 1`);
  const registration: RepoRegistration = {
    repo: url,
    ...(opts.setup ? { setup: opts.setup } : {}),
    ...(opts.ref ? { ref: opts.ref } : {}),
    everyMs: opts.every ? parseDuration('--every', opts.every) : REGISTRATION_DEFAULTS.everyMs,
    keep,
    setupTimeoutMs: opts.timeout ? parseDuration('--timeout', opts.timeout) : REGISTRATION_DEFAULTS.setupTimeoutMs,
    egress: opts.allow?.length ? opts.allow.map(parseAllow) : REGISTRATION_DEFAULTS.egress,
  };
  await withRegistry(config, (registry) => registry.upsertRepo(registration));
  const scheduleId = await ensureSnapshotSchedule(client, {
    repo: url,
    everyMs: registration.everyMs,
    taskQueue: config.DRYDOCK_TASK_QUEUE,
  });
  return { registration, scheduleId };
}

export async function listRepos(config: Config, json: boolean): Promise<void> {
  const rows = await withRegistry(config, async (registry) =>
    Promise.all(
      (await registry.repos()).map(async (reg) => {
        const builds = await registry.builds({ repo: reg.repo, limit: 20 });
        return { ...reg, lastBuild: builds[0], newestReady: builds.find((b) => b.status === 'ready') };
      }),
    ),
  );
  if (json) {
    console.log(JSON.stringify(rows, null, 2));
    return;
  }
  if (rows.length === 0) console.log('no repos registered (drydock repo add <url> --setup "<command>")');
  for (const r of rows) {
    console.log(
      `${r.repo}\n  setup: ${r.setup ?? 'sh .drydock/setup.sh'}  every ${minutes(r.everyMs)}  keep ${r.keep}  ` +
        `allow ${r.egress.map((e) => (e.port ? `${e.host}:${e.port}` : e.host)).join(', ')}\n` +
        `  newest snapshot: ${r.newestReady ? describeBuild(r.newestReady) : 'none yet'}` +
        (r.lastBuild && r.lastBuild !== r.newestReady ? `\n  last build: ${describeBuild(r.lastBuild)}` : ''),
    );
  }
}

export async function listSnapshots(config: Config, repo: string | undefined, json: boolean): Promise<void> {
  const builds = await withRegistry(config, (registry) => registry.builds({ repo, limit: 50 }));
  if (json) {
    console.log(JSON.stringify(builds, null, 2));
    return;
  }
  if (builds.length === 0) console.log('no snapshot builds');
  for (const b of builds) console.log(`${b.repo}  ${describeBuild(b)}`);
}

/** Builds a repo's snapshot now and waits for the outcome; exit code 0 when it is ready. */
export async function buildSnapshot(
  client: Client,
  config: Config,
  repo: string,
  opts: { detach: boolean; json: boolean },
): Promise<number> {
  const workflowId = `${snapshotScheduleId(repo)}-manual-${Date.now().toString(36)}`;
  const handle = await client.workflow.start('refreshSnapshot', {
    workflowId,
    taskQueue: config.DRYDOCK_TASK_QUEUE,
    args: [{ repo }],
  });
  if (opts.detach) {
    console.log(opts.json ? JSON.stringify({ buildId: workflowId }) : workflowId);
    return 0;
  }
  try {
    const result = (await handle.result()) as SnapshotBuildResult;
    console.log(
      opts.json
        ? JSON.stringify(result)
        : `snapshot ready: ${result.image} (commit ${result.commit.slice(0, 12)}, ${mb(result.sizeBytes)}, ${seconds(result.durationMs)})`,
    );
    return 0;
  } catch (err) {
    if (!(err instanceof WorkflowFailedError)) throw err;
    const result = (err.cause as { details?: unknown[] } | undefined)?.details?.[0] as SnapshotBuildResult | undefined;
    if (opts.json) console.log(JSON.stringify(result ?? { error: err.cause?.message }));
    else console.error(`drydock: ${err.cause?.message ?? err.message}; the previous snapshot stays in service`);
    return 1;
  }
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
