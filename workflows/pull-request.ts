/**
 * pullRequestClosed: a durable record that a drydock pull request was closed,
 * merged or not, for the pilot metrics. The session has usually completed
 * when GitHub reports it, and a closed workflow takes no signals, so the
 * record is its own tiny workflow: it writes the event into the session's
 * audit chain and `merged` into its metrics row (waiting while Postgres is
 * away), and its result is the record.
 */
import { proxyActivities } from '@temporalio/workflow';
import type { SharedActivities } from '../activities';
import type { PullRequestClosed } from './api';

const { recordPullRequestClosed } = proxyActivities<SharedActivities>({
  startToCloseTimeout: '10m',
  heartbeatTimeout: '10s',
  retry: { maximumAttempts: 10 },
});

export async function pullRequestClosed(record: PullRequestClosed): Promise<PullRequestClosed> {
  await recordPullRequestClosed(record);
  return record;
}
