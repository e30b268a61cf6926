import type { ActivityDeps } from './deps';
import { LABELS } from '../lib/sandbox';

export interface Reaped {
  sandbox: string;
  sessionId: string;
  reason: string;
}

export function createReaperActivities({ sandboxes, hostId, sessionIsRunning, log }: ActivityDeps) {
  return {
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
      return reaped;
    },
  };
}
