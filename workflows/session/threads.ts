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
import type { SessionRun } from './state';
import type { ThreadReport } from './thread-report';

/**
 * How much of a pending change's diffstat a thread shows (about 30 files):
 * past it the thread links to the console instead of offering Approve.
 */
const DIFFSTAT_SHOWN = 2500;

/** Quick calls to a chat or tracker API: a few tries, then the session goes on without. */
const services = proxyActivities<SharedActivities>({
  startToCloseTimeout: '30s',
  retry: { maximumAttempts: 5, initialInterval: '1s', maximumInterval: '20s' },
});

export function startThreadReports(run: SessionRun): void {
  const { notify } = run.input;
  if (!notify?.slack && !notify?.linear) return;
  // Phase changes from here on; the loop reports the state it starts in first.
  const seen = { changes: 0 };
  run.onPhaseChange(() => seen.changes++);
  // Not cancellable: a cancelled session still says so in its thread.
  run.threadReports = CancellationScope.nonCancellable(() => reportLoop(run, seen));
}

/** Sends what is left to report, then stops the loop. */
export async function finishThreadReports(run: SessionRun): Promise<void> {
  run.reportsClosing = true;
  await run.threadReports;
}

async function reportLoop(run: SessionRun, seen: { changes: number }): Promise<void> {
  let sent = -1;
  for (;;) {
    await condition(() => (seen.changes !== sent && settled(run)) || run.reportsClosing);
    if (seen.changes === sent) return;
    sent = seen.changes;
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
            ...(pending.evidence.plan ? planShown(pending.evidence.plan.text) : {}),
          },
        }
      : {}),
    ...(last ? { lastDecision: { decision: last.decision, action: last.action, by: last.by } } : {}),
    ...(status.pullRequest ? { pullRequest: status.pullRequest.url } : {}),
    ...(status.error ? { error: status.error.slice(0, 500) } : {}),
  };
}

/** A plan at its gate (plan.ts), as much as a thread shows of a diffstat. */
function planShown(text: string): { plan: string; planCut?: true } {
  return { plan: text.slice(0, DIFFSTAT_SHOWN), ...(text.length > DIFFSTAT_SHOWN ? { planCut: true } : {}) };
}
