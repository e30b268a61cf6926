/**
 * The reaper's activities, run on each host by its schedule: they remove what
 * nothing will tear down (sandboxes of closed or expired sessions, idle pool
 * sandboxes past their time, orphaned storage) and old snapshot images.
 */
import type { SandboxDeps } from './deps';
import type { Reaped } from '../contract';
import { COMPANION_LABEL, LABELS, type SandboxInfo } from '../provider';
import { collectSnapshots } from './snapshot-build';
import { POOL_LABEL, PoolRegistry } from '../pool-registry';

export function createReaperActivities(
  deps: Pick<SandboxDeps, 'sandboxes' | 'snapshots' | 'db' | 'hostId' | 'hostQueue' | 'sessionIsRunning' | 'log'>,
) {
  const { sandboxes, hostId, sessionIsRunning, log } = deps;
  return {
    /**
     * Removes this host's snapshot images that fell out of their repo's newest
     * `keep` while a sandbox still used them (the build could not remove them).
     * Its run also marks the host as alive for new repos' refresh schedules.
     */
    async reapSnapshotImages(): Promise<string[]> {
      await deps.snapshots.recordHost({ id: hostId, queue: deps.hostQueue });
      const removed: string[] = [];
      for (const repo of await deps.snapshots.repos())
        removed.push(...(await collectSnapshots(deps, repo.repo, repo.keep)));
      return removed;
    },

    /**
     * Removes this host's sandboxes that nothing will tear down: their session
     * is closed (terminated, or teardown never ran) or their expiry passed.
     */
    async reapHostSandboxes(): Promise<Reaped[]> {
      const reaped: Reaped[] = [];
      const pools = new PoolRegistry(deps.db.pool);
      for (const container of await sandboxes.list(hostId)) {
        const sandbox = container.name;
        // A companion (a service, a browser) goes with its sandbox; alone, once that is gone.
        const of = container.labels[COMPANION_LABEL];
        if (of) {
          if (!(await sandboxes.exists(of)) && (await sandboxes.destroy(container.id))) {
            const sessionId = container.labels[LABELS.session];
            log.info({ sessionId, sandboxId: sandbox, host: hostId }, 'reaped a companion whose sandbox is gone');
            reaped.push({ sandbox, sessionId, reason: `its sandbox ${of} is gone` });
          }
          continue;
        }
        const { sessionId, reason } = container.labels[POOL_LABEL]
          ? await poolSandboxFate(pools, sandbox, container, sessionIsRunning)
          : await sandboxFate(container, sessionIsRunning);
        if (!reason) continue;
        if (await sandboxes.destroy(container.id)) {
          if (container.labels[POOL_LABEL]) await pools.forget(sandbox);
          log.info({ sessionId, sandboxId: sandbox, host: hostId, reason }, 'reaped sandbox');
          reaped.push({ sandbox, sessionId, reason });
        }
      }
      const storage = await sandboxes.reapStorage();
      if (storage.length) log.info({ host: hostId, storage }, 'reaped sandbox storage');
      return reaped;
    },
  };
}

type Fate = { sessionId: string; reason?: string };

/** Why a session's sandbox goes (its expiry passed, its session is closed), or undefined: it stays. */
async function sandboxFate(container: SandboxInfo, sessionIsRunning: SandboxDeps['sessionIsRunning']): Promise<Fate> {
  const sessionId = container.labels[LABELS.session];
  const expires = Date.parse(container.labels[LABELS.expires] ?? '');
  if (expires < Date.now()) return { sessionId, reason: `expired at ${container.labels[LABELS.expires]}` };
  if (!(await sessionIsRunning(sessionId))) return { sessionId, reason: 'its session is closed' };
  return { sessionId };
}

/** Orphaned pool containers older than this go (younger ones may be a fill between create and record). */
const POOL_ORPHAN_AFTER_MS = 10 * 60_000;

/**
 * A pool sandbox: claimed, it is its session's (the claim's expiry, the
 * session's state); idle, the pool's fill retires it (the reaper's run fills
 * right after); with no row, an interrupted fill left it.
 */
async function poolSandboxFate(
  pools: PoolRegistry,
  name: string,
  container: SandboxInfo,
  sessionIsRunning: SandboxDeps['sessionIsRunning'],
): Promise<Fate> {
  const row = await pools.get(name);
  if (!row) {
    const orphan = Date.now() - container.createdMs > POOL_ORPHAN_AFTER_MS;
    return { sessionId: container.labels[LABELS.session], reason: orphan ? 'a pool sandbox no pool holds' : undefined };
  }
  if (!row.claimedBy) {
    const expired = Date.parse(container.labels[LABELS.expires] ?? '') < Date.now();
    return {
      sessionId: container.labels[LABELS.session],
      reason: expired && (await pools.retire(name)) ? 'an idle pool sandbox past its time' : undefined,
    };
  }
  if (row.expiresAt && Date.parse(row.expiresAt) < Date.now()) {
    return { sessionId: row.claimedBy, reason: `expired at ${row.expiresAt}` };
  }
  if (!(await sessionIsRunning(row.claimedBy))) return { sessionId: row.claimedBy, reason: 'its session is closed' };
  return { sessionId: row.claimedBy };
}
