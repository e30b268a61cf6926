/**
 * Faults on purpose (a pilot's, docs/pilot.md): a session's sandbox killed on
 * its host while it works. Its containers are removed, companions too, as a
 * crash or an out-of-memory host would lose them; the session finds its
 * sandbox gone and replaces it from its last checkpoint.
 */
import { Context } from '@temporalio/activity';
import { LABELS } from '../provider';
import type { SandboxDeps } from './deps';

export function createFaultActivities({ sandboxes, hostId, log }: Pick<SandboxDeps, 'sandboxes' | 'hostId' | 'log'>) {
  return {
    /**
     * Removes the session's containers on this host that were there when the fault was asked
     * for (a retry must not kill the replacement the session made meanwhile); returns their
     * names (none: it had no sandbox here).
     */
    async killSessionSandbox(input: { sessionId: string }): Promise<{ killed: string[] }> {
      const asked = Context.current().info.scheduledTimestampMs;
      const theirs = (await sandboxes.list(hostId)).filter((c) => c.labels[LABELS.session] === input.sessionId);
      // When each was made to the millisecond (an engine's list may say only the second): a replacement can follow within it.
      const made = await Promise.all(theirs.map((c) => sandboxes.info(c.name)));
      const mine = theirs.filter((_, i) => made[i] !== undefined && made[i].createdMs <= asked);
      const killed: string[] = [];
      for (const container of mine) if (await sandboxes.destroy(container.name)) killed.push(container.name);
      log.warn({ sessionId: input.sessionId, killed }, 'fault on purpose: sandbox killed');
      return { killed };
    },
  };
}
