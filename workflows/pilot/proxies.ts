/** The pilot's activities: on any worker, and the one that kills a sandbox on its host. */
import { proxyActivities } from '@temporalio/workflow';
import type { HostActivities, SharedActivities } from '../../activities';

export const pilotActivities = proxyActivities<SharedActivities>({
  startToCloseTimeout: '5m',
  heartbeatTimeout: '30s',
  retry: { maximumAttempts: 5 },
});

/** On the sandbox's host; a host that does not answer within 2 minutes: the fault is recorded as not done. */
export function onSandboxHost(hostQueue: string): Pick<HostActivities, 'killSessionSandbox'> {
  return proxyActivities<HostActivities>({
    taskQueue: hostQueue,
    startToCloseTimeout: '2m',
    scheduleToStartTimeout: '2m',
    retry: { maximumAttempts: 3 },
  });
}
