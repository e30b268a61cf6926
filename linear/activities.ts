/**
 * The worker's side of a Linear-started session: a comment on the issue at
 * each milestone (started, waiting for review, pull request, the end), each
 * once, whatever the number of reports (workflows/session/threads.ts).
 */
import { ApplicationFailure } from '@temporalio/common';
import type { ActivityDeps } from '../activities/deps';
import type { ThreadReport } from '../workflows/session/threads';
import { LinearError, LinearIssues } from './client';

export interface LinearReportInput {
  issue: string;
  identifier: string;
  report: ThreadReport;
}

const ENDED: Record<string, string> = {
  completed: 'completed',
  failed: 'failed',
  rejected: 'was rejected in review',
  cancelled: 'was cancelled',
  timed_out: 'timed out',
};

/** The milestone a report is, with its comment; undefined for the phases in between. */
export function milestoneOf(r: ThreadReport, link: string): { key: string; body: string } | undefined {
  if (ENDED[r.phase]) {
    const why = r.error ? `: ${r.error}` : '';
    const pr = r.pullRequest ? ` Pull request: ${r.pullRequest}` : '';
    return { key: 'end', body: `drydock's session ${ENDED[r.phase]}${why}.${pr} ([session](${link}))` };
  }
  if (r.pullRequest)
    return {
      key: `pr-${r.round}`,
      body: `drydock opened a pull request for this: ${r.pullRequest} ([session](${link}))`,
    };
  if (r.phase === 'awaiting_approval' && r.pending) {
    const tests = r.pending.tests ? ` Tests: ${r.pending.tests}.` : '';
    return {
      key: `review-${r.pending.change.slice(0, 12)}`,
      body: `A change is ready for review (${r.pending.action}, change \`${r.pending.change.slice(0, 12)}\`).${tests} Review it in the console: ${link}`,
    };
  }
  if (r.phase === 'provisioning' || r.phase === 'agent') {
    return { key: 'started', body: `drydock is working on this: ${link}` };
  }
  return undefined;
}

export function createLinearActivities({ linear, sessionLink, reviewLink, log }: ActivityDeps) {
  const issues = linear ? new LinearIssues(linear) : undefined;
  return {
    /** Comments on the issue at the report's milestone, once. */
    async reportToLinear(input: LinearReportInput): Promise<void> {
      if (!issues) {
        throw ApplicationFailure.nonRetryable(
          'Linear is not configured on this worker (DRYDOCK_LINEAR_API_KEY)',
          'LinearRequest',
        );
      }
      const { sessionId } = input.report;
      const milestone = milestoneOf(input.report, (reviewLink ?? sessionLink)(sessionId));
      if (!milestone) return;
      try {
        const { created } = await issues.commentOnce(input.issue, `${sessionId}/${milestone.key}`, milestone.body);
        log.info({ sessionId, issue: input.identifier, milestone: milestone.key, created }, 'reported to Linear');
      } catch (err) {
        if (
          err instanceof LinearError &&
          err.status >= 400 &&
          err.status < 500 &&
          err.status !== 429 &&
          err.type !== 'ratelimited'
        ) {
          throw ApplicationFailure.nonRetryable(err.message, 'LinearRequest');
        }
        throw err;
      }
    },
  };
}
