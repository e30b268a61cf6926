/**
 * A session started by a GitHub webhook: its task gets the context of where
 * it came from, and GitHub hears how it goes (the activity is idempotent).
 * Sessions without a trigger skip both.
 */
import { log } from '@temporalio/workflow';
import type { ProgressStage } from '../../github/activities';
import { anyHost } from './proxies';
import type { SessionRun } from './state';

/**
 * Reads the context once, on the worker, into the status's task: what the
 * agent is asked (the input's task stays the request, for the commit and the
 * pull request). A continued run keeps the status, and so the task.
 */
export async function addTriggerContext(run: SessionRun): Promise<void> {
  const { trigger } = run.input;
  if (!trigger) return;
  run.status.task = await run.track('context from GitHub', async (record) => {
    record.detail = `${trigger.kind} on ${trigger.repo}`;
    return anyHost.triggerTask({ sessionId: run.sessionId, task: run.input.task, trigger });
  });
}

/** Tells GitHub the stage the session is at (a commit status, a comment); GitHub being down never fails the session. */
export async function tellGitHub(run: SessionRun, stage: ProgressStage): Promise<void> {
  const { trigger } = run.input ?? {};
  if (!trigger) return;
  const { status } = run;
  try {
    await anyHost.reportToGitHub({
      sessionId: run.sessionId,
      trigger,
      stage,
      commit: status.sandbox?.baseCommit,
      pullRequestUrl: status.pullRequest?.url,
      detail: stage === 'failed' || stage === 'timed_out' ? status.error?.slice(0, 300) : undefined,
      tests: status.verification
        ? { summary: status.verification.summary.slice(0, 2000), failures: status.verification.report?.failures ?? [] }
        : undefined,
      changedFiles: status.agent?.changed ? (status.agent.files ?? []) : [],
    });
  } catch (err) {
    log.warn('could not report to GitHub', { stage, error: err instanceof Error ? err.message : String(err) });
  }
}
