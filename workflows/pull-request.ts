/**
 * pullRequestClosed: a durable record that a drydock pull request was closed,
 * merged or not, for the pilot metrics. The session has usually completed
 * when GitHub reports it, and a closed workflow takes no signals, so the
 * record is its own tiny workflow: its result is the record, its search
 * attribute DrydockRepo the repo.
 */
import type { PullRequestClosed } from './api';

export async function pullRequestClosed(record: PullRequestClosed): Promise<PullRequestClosed> {
  return record;
}
