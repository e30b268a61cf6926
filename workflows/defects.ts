/**
 * findEscapedDefects: run by the Temporal Schedule `drydock-escaped-defects`
 * (hourly): merged drydock changes searched on GitHub for a revert or a fix
 * of their lines within DRYDOCK_DEFECT_WINDOW (figures/defects.ts).
 */
import { proxyActivities } from '@temporalio/workflow';
import type { SharedActivities } from '../activities';

const { sweepEscapedDefects } = proxyActivities<SharedActivities>({
  startToCloseTimeout: '30m',
  heartbeatTimeout: '1m',
  retry: { maximumAttempts: 3 },
});

export async function findEscapedDefects(): Promise<{ searched: number; found: number }> {
  return sweepEscapedDefects();
}
