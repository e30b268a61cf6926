/** reapSandboxes: run by a Temporal Schedule per Docker host (drydock-reaper-<host>). */
import { proxyActivities } from '@temporalio/workflow';
import type { HostActivities } from '../activities';
import type { Reaped } from '../sandbox/contract';

export async function reapSandboxes(input: { hostQueue: string }): Promise<Reaped[]> {
  const { reapHostSandboxes, reapSnapshotImages, fillPools } = proxyActivities<HostActivities>({
    taskQueue: input.hostQueue,
    startToCloseTimeout: '5m',
    scheduleToStartTimeout: '5m',
    heartbeatTimeout: '10s',
    retry: { maximumAttempts: 3 },
  });
  const reaped = await reapHostSandboxes();
  // Images of old snapshots go once no sandbox uses them.
  await reapSnapshotImages();
  // Warm pools: idle sandboxes of an older snapshot replaced, claimed ones refilled.
  await fillPools({});
  return reaped;
}
