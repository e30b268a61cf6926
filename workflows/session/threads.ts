/**
 * A session started from Slack or Linear keeps its thread told. After every
 * phase change one report of where the session is goes out (Slack: its
 * message updated in place; Linear: a comment at each milestone), from a loop
 * beside the phases: one report at a time, always of the newest state, so a
 * burst of phase changes is one report. The last one is sent before the
 * session ends. A service being down never fails the session.
 */
import { CancellationScope, condition, log, proxyActivities } from '@temporalio/workflow';
import type { SharedActivities } from '../../activities';
import type { Action, GatedAction, Phase } from '../api';
import type { SessionRun } from './state';

/**
 * How much of a pending change's diffstat a thread shows (about 30 files):
 * past it the thread links to the console instead of offering Approve.
 */
const DIFFSTAT_SHOWN = 2500;

/** What a thread shows: small, so every report stays small in the history. */
export interface ThreadReport {
  sessionId: string;
  repo: string;
  /** The request (its first 300 characters). */
  task: string;
  phase: Phase;
  round: number;
  requestedBy?: string;
  /** When the session started: a message posted since then may be its own (looked for before posting). */
  startedAt: string;
  pending?: {
    action: GatedAction;
    covers?: Action[];
    change: string;
    diffstat: string;
    /** The diffstat was longer than DIFFSTAT_SHOWN and is cut: the thread does not offer Approve beside it. */
    diffstatCut?: boolean;
    tests: string;
    approvers: string[];
  };
  lastDecision?: { decision: 'approve' | 'reject'; action: GatedAction; by: string };
  pullRequest?: string;
  error?: string;
}

/** Quick calls to a chat or tracker API: a few tries, then the session goes on without. */
const services = proxyActivities<SharedActivities>({
  startToCloseTimeout: '30s',
  retry: { maximumAttempts: 5, initialInterval: '1s', maximumInterval: '20s' },
});

export function startThreadReports(run: SessionRun): void {
  const { notify } = run.input;
  if (!notify?.slack && !notify?.linear) return;
  // Not cancellable: a cancelled session still says so in its thread.
  run.threadReports = CancellationScope.nonCancellable(() => reportLoop(run));
}

/** Sends what is left to report, then stops the loop. */
export async function finishThreadReports(run: SessionRun): Promise<void> {
  run.reportsClosing = true;
  await run.threadReports;
}

async function reportLoop(run: SessionRun): Promise<void> {
  let sent = -1;
  for (;;) {
    await condition(() => (run.phaseChanges !== sent && settled(run)) || run.reportsClosing);
    if (run.phaseChanges === sent) return;
    sent = run.phaseChanges;
    await sendReport(run, threadReport(run));
  }
}

/**
 * Between a decision and the next phase the session is still awaiting_approval
 * with nothing pending (the audit is written first): a report then would show
 * a gate without its change and buttons. The next phase change reports.
 */
function settled(run: SessionRun): boolean {
  return run.status.phase !== 'awaiting_approval' || run.status.pendingApproval !== undefined;
}

async function sendReport(run: SessionRun, report: ThreadReport): Promise<void> {
  const { slack, linear } = run.input.notify ?? {};
  try {
    if (slack) {
      const known = run.status.slackMessage;
      const { ts } = await services.reportToSlack({ ...slack, ts: known?.ts, report });
      run.status.slackMessage = { channel: slack.channel, ts };
    }
    if (linear) await services.reportToLinear({ ...linear, report });
  } catch (err) {
    log.warn('could not report to the thread', { error: err instanceof Error ? err.message : String(err) });
  }
}

function threadReport(run: SessionRun): ThreadReport {
  const { status, input } = run;
  const pending = status.pendingApproval;
  const last = status.decisions[status.decisions.length - 1];
  return {
    sessionId: run.sessionId,
    repo: status.repo,
    task: input.task.slice(0, 300),
    phase: status.phase,
    round: status.round ?? 1,
    ...(status.requestedBy ? { requestedBy: status.requestedBy } : {}),
    startedAt: status.startedAt,
    ...(pending
      ? {
          pending: {
            action: pending.action,
            ...(pending.covers ? { covers: pending.covers } : {}),
            change: pending.change,
            diffstat: pending.evidence.diffstat.slice(0, DIFFSTAT_SHOWN),
            ...(pending.evidence.diffstat.length > DIFFSTAT_SHOWN ? { diffstatCut: true } : {}),
            tests: pending.evidence.tests.slice(0, 500),
            approvers: pending.approvers,
          },
        }
      : {}),
    ...(last ? { lastDecision: { decision: last.decision, action: last.action, by: last.by } } : {}),
    ...(status.pullRequest ? { pullRequest: status.pullRequest.url } : {}),
    ...(status.error ? { error: status.error.slice(0, 500) } : {}),
  };
}
