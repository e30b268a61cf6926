/**
 * A session started by a forge's webhook (GitHub, GitLab, Gitea): its task gets the
 * context of where it came from, and the forge hears how it goes (the
 * activity is idempotent). Sessions without a trigger skip both. The
 * activity keeps its first name, reportToGitHub: recorded histories name it.
 */
import { log } from '@temporalio/workflow';
import type { ProgressStage } from '../../forge/progress';
import { anyHost } from './proxies';
import type { SessionRun } from './state';

const FORGE_NAMES = { github: 'GitHub', gitlab: 'GitLab', gitea: 'Gitea' } as const;

/**
 * Reads the context once, on the worker, into the status's task: what the
 * agent is asked (the input's task stays the request, for the commit and the
 * pull request). A continued run keeps the status, and so the task.
 */
export async function addTriggerContext(run: SessionRun): Promise<void> {
  const { trigger } = run.input;
  if (!trigger) return;
  run.status.task = await run.track(`context from ${FORGE_NAMES[trigger.forge ?? 'github']}`, async (record) => {
    record.detail = `${trigger.kind} on ${trigger.repo}`;
    return anyHost.triggerTask({ sessionId: run.sessionId, task: run.input.task, trigger });
  });
}

/** Tells the forge the stage the session is at (a commit status, a comment); a forge being down never fails the session. */
export async function tellForge(run: SessionRun, stage: ProgressStage): Promise<void> {
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
    log.warn('could not report to the forge', { stage, error: err instanceof Error ? err.message : String(err) });
  }
}
