/**
 * The worker's side of a Linear-started session: a comment on the issue at
 * each milestone (started, waiting for review, pull request, the end), each
 * once, whatever the number of reports (workflows/session/threads.ts).
 */
import { ApplicationFailure } from '@temporalio/common';
import type { Logger } from '../platform/log';
import type { ThreadReport } from '../workflows/session/threads';
import { LinearError, LinearIssues, type LinearSettings } from './client';

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

/**
 * The milestones a report has reached, each with its comment: the start, a
 * change waiting for review, the pull request, the end. Posted once each (by
 * key), so a report that comes late still leaves none out.
 */
export function milestonesOf(r: ThreadReport, link: string): { key: string; body: string }[] {
  const reached: { key: string; body: string }[] = [{ key: 'started', body: `drydock is working on this: ${link}` }];
  if (r.phase === 'awaiting_approval' && r.pending) {
    const tests = r.pending.tests ? ` Tests: ${r.pending.tests}.` : '';
    const change = r.pending.change.slice(0, 12);
    reached.push({
      key: `review-${change}`,
      body: `A change is ready for review (${r.pending.action}, change \`${change}\`).${tests} Review it in the console: ${link}`,
    });
  }
  if (r.pullRequest) {
    reached.push({
      key: `pr-${r.pullRequest}`,
      body: `drydock opened a pull request for this: ${r.pullRequest} ([session](${link}))`,
    });
  }
  if (ENDED[r.phase]) {
    const why = r.error ? `: ${r.error}` : '';
    reached.push({ key: 'end', body: `drydock's session ${ENDED[r.phase]}${why}. ([session](${link}))` });
  }
  return reached;
}

/** What Linear's activities use of the worker. */
export interface LinearDeps {
  /** Linear's API and credentials (absent: not configured; the activity then fails, non-retryable). */
  linear?: LinearSettings;
  /** Link to a session in the Temporal Web UI. */
  sessionLink: (sessionId: string) => string;
  /** Link to a session in the review console (default: sessionLink). */
  reviewLink?: (sessionId: string) => string;
  log: Logger;
}

export function createLinearActivities({ linear, sessionLink, reviewLink, log }: LinearDeps) {
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
      try {
        for (const milestone of milestonesOf(input.report, (reviewLink ?? sessionLink)(sessionId))) {
          const { created } = await issues.commentOnce(input.issue, `${sessionId}/${milestone.key}`, milestone.body);
          if (created) log.info({ sessionId, issue: input.identifier, milestone: milestone.key }, 'reported to Linear');
        }
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
