/**
 * What a forge hears of a webhook-started session, the same on every forge:
 * an acknowledgement (a reaction to the /drydock comment, or a comment on the
 * issue), the change request's link or why there is none, and the session's
 * report on its commit. Written through a ForgeRepo, whose writes are
 * idempotent, so a retried activity adds nothing. What came out of the
 * sandbox (an error's tail, the tests' summary) is fenced and loses its
 * mentions (forge/sandbox-text.ts): drydock's identity publishes no Markdown
 * the agent wrote.
 */
import type { Outcome, TestReport } from '../workflows/api';
import type { TriggerOrigin } from '../workflows/input';
import type { CommitReport, CommitState, ForgeRepo } from './forge';
import { fenced, withoutMentions } from './sandbox-text';

/** Moments of a session that the forge hears about ('pull_request': its change request was opened). */
export type ProgressStage = 'started' | 'awaiting_approval' | 'pull_request' | Outcome;

export interface ProgressInput {
  sessionId: string;
  trigger: TriggerOrigin;
  stage: ProgressStage;
  /** The commit the session started from: its `drydock` status follows the session. */
  commit?: string;
  /** The change request's page, once opened. */
  pullRequestUrl?: string;
  /** Why the session ended, for a failed outcome. */
  detail?: string;
  /** The verification so far: a report's summary, and its failing tests as annotations. */
  tests?: { summary: string; failures: TestReport['failures'] };
  /** The files the session's change touched: the only ones its report annotates. */
  changedFiles?: string[];
  /** The session's repository URL: the forge is chosen by it (and `trigger.forge`). */
  repoUrl?: string;
}

/** The commit state of each stage, and its words. */
export const STATUS: Record<ProgressStage, [CommitState, string]> = {
  started: ['pending', 'in progress'],
  awaiting_approval: ['pending', 'waiting for review'],
  pull_request: ['pending', 'pull request opened'],
  completed: ['success', 'done'],
  failed: ['failure', 'failed'],
  rejected: ['failure', 'rejected in review'],
  timed_out: ['failure', 'timed out'],
  cancelled: ['error', 'cancelled'],
};

const ENDED: Partial<Record<ProgressStage, string>> = {
  failed: 'failed',
  rejected: 'was rejected in review',
  timed_out: 'timed out',
  cancelled: 'was cancelled',
};

/** A finished report's conclusion per outcome; undefined while the session runs. */
const CONCLUSION: Partial<Record<ProgressStage, CommitReport['conclusion']>> = {
  completed: 'success',
  failed: 'failure',
  rejected: 'failure',
  timed_out: 'timed_out',
  cancelled: 'cancelled',
};

/** Why a session ended, for its issue: drydock's words, then the error as the sandbox left it, fenced. */
export function endComment(input: ProgressInput, link: string): string {
  const head = `drydock's session ${ENDED[input.stage] ?? input.stage} (${link})`;
  return input.detail ? `${head}:\n\n${fenced(input.detail)}` : head;
}

/** The session's report on its commit: a status's plain words, a check's title and fenced summary. */
export function commitReport(input: ProgressInput, link: string): CommitReport {
  const { tests, detail } = input;
  const [state, words] = STATUS[input.stage];
  return {
    sessionId: input.sessionId,
    state,
    conclusion: CONCLUSION[input.stage],
    // A status's description is plain text (no Markdown to fence), its mentions dropped all the same.
    description: (detail && state !== 'success' ? `${words}: ${withoutMentions(detail)}` : words).slice(0, 140),
    title: `drydock: ${words}`,
    summary: [
      `Session [${input.sessionId}](${link}): ${words}.`,
      detail ? fenced(detail) : '',
      tests ? `Tests:\n\n${fenced(tests.summary)}` : '',
    ]
      .filter(Boolean)
      .join('\n\n'),
    link,
    failures: tests?.failures,
    changedFiles: input.changedFiles ?? [],
  };
}

/** What the issue hears besides the acknowledgement: the change request, or why there is none. */
async function commentOn(repo: ForgeRepo, input: ProgressInput, link: string): Promise<void> {
  const { stage, sessionId, trigger } = input;
  const thread = { number: trigger.issue!, changeRequest: trigger.pullRequest };
  if (stage === 'pull_request' && input.pullRequestUrl) {
    const body = `drydock opened a pull request for this: ${input.pullRequestUrl} (session: ${link})`;
    await repo.commentOnce(thread, `pr/${sessionId}`, body);
  } else if (stage === 'completed' && !input.pullRequestUrl) {
    await repo.commentOnce(thread, `end/${sessionId}`, `drydock's session made no change: ${link}`);
  } else if (ENDED[stage]) {
    await repo.commentOnce(thread, `end/${sessionId}`, endComment(input, link));
  }
}

/** Tells the forge where the session is: an acknowledgement, the change request's link, the commit's report. */
export async function reportProgress(repo: ForgeRepo, input: ProgressInput, link: string): Promise<void> {
  const { sessionId, trigger, stage } = input;
  const thread = { number: trigger.issue ?? 0, changeRequest: trigger.pullRequest };
  if (stage === 'started' && trigger.comment) {
    await repo.react({ ...thread, comment: trigger.comment }, 'eyes');
  } else if (stage === 'started' && trigger.issue) {
    await repo.commentOnce(thread, `ack/${sessionId}`, `drydock is working on this: ${link}`);
  }
  if (trigger.issue) await commentOn(repo, input, link);
  const commit = trigger.commit ?? input.commit;
  if (commit) await repo.reportCommit(commit, commitReport(input, link));
}
