import type { ActivityDeps } from './deps';
import { LABELS } from '../lib/sandbox';
import { collectSnapshots } from './snapshot';

export interface Reaped {
  sandbox: string;
  sessionId: string;
  reason: string;
}

export function createReaperActivities(deps: ActivityDeps) {
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
      for (const container of await sandboxes.list(hostId)) {
        const sessionId = container.Labels[LABELS.session];
        const expires = Date.parse(container.Labels[LABELS.expires] ?? '');
        let reason: string | undefined;
        if (expires < Date.now()) reason = `expired at ${container.Labels[LABELS.expires]}`;
        else if (!(await sessionIsRunning(sessionId))) reason = 'its session is closed';
        if (!reason) continue;
        const sandbox = container.Names[0]?.replace(/^\//, '') ?? container.Id;
        if (await sandboxes.destroy(container.Id)) {
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
