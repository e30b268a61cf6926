/**
 * The worker's side of a Slack-started session: its status message, posted in
 * its channel or thread and updated in place at every phase (workflows/session/threads.ts).
 */
import { ErrorCode } from '@slack/web-api';
import { ApplicationFailure } from '@temporalio/common';
import type { Logger } from '../platform/log';
import type { ThreadReport } from '../workflows/session/threads';
import { SlackThreads, type SlackSettings } from './client';
import { statusMessage } from './message';

export interface SlackReportInput {
  channel: string;
  /** The app mention whose thread holds the message. */
  thread?: string;
  /** The message, once known. */
  ts?: string;
  report: ThreadReport;
}

/** Slack refusing the token, the channel or the message will not change on a retry; a rate limit will. */
function permanent(err: unknown): never {
  const e = err as { code?: string; data?: { error?: string } };
  if (e.code === ErrorCode.PlatformError) {
    throw ApplicationFailure.nonRetryable(`Slack answered ${e.data?.error ?? 'an error'}`, 'SlackRequest');
  }
  throw err;
}

/** What Slack's activities use of the worker. */
export interface SlackDeps {
  /** Slack's API and credentials (absent: not configured; the activity then fails, non-retryable). */
  slack?: SlackSettings;
  /** Link to a session in the Temporal Web UI. */
  sessionLink: (sessionId: string) => string;
  /** Link to a session in the review console (default: sessionLink). */
  reviewLink?: (sessionId: string) => string;
  log: Logger;
}

export function createSlackActivities({ slack, sessionLink, reviewLink, log }: SlackDeps) {
  const threads = slack ? new SlackThreads(slack) : undefined;
  return {
    /** Shows the session in its Slack message; resolves with the message's ts. */
    async reportToSlack(input: SlackReportInput): Promise<{ ts: string }> {
      if (!threads) {
        throw ApplicationFailure.nonRetryable(
          'Slack is not configured on this worker (DRYDOCK_SLACK_BOT_TOKEN)',
          'SlackRequest',
        );
      }
      const { sessionId } = input.report;
      const links = { console: (reviewLink ?? sessionLink)(sessionId), temporal: sessionLink(sessionId) };
      try {
        const ts = await threads.showStatus(input.channel, statusMessage(input.report, links), {
          ts: input.ts,
          thread: input.thread,
          since: input.report.startedAt,
        });
        log.info({ sessionId, phase: input.report.phase, channel: input.channel, ts }, 'reported to Slack');
        return { ts };
      } catch (err) {
        permanent(err);
      }
    },
  };
}
