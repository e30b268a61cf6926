/**
 * A session started from Slack or Linear tells its thread how it goes: a
 * report after the phase changes (the newest state, one at a time), the
 * message's ts kept for the next, the outcome last; the service being down
 * fails nothing. Time-skipping test server, stub activities.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { WorkflowBundle } from '@temporalio/worker';
import type { SessionInputDraft } from '../../workflows/input';
import type { ThreadReport } from '../../workflows/session/thread-report';
import { acceptAsGiven, awaitApproval, runSession, startEnvironment, stopEnvironment, type Stubs } from './harness';
import { decide } from '../../workflows/api';
import { within } from '../support/waits';

let harness: { env: TestWorkflowEnvironment; bundle: WorkflowBundle };
beforeAll(async () => {
  harness = await startEnvironment();
});
afterAll(async () => {
  await stopEnvironment(harness?.env);
});

const fromSlack: SessionInputDraft = {
  repo: { url: 'https://github.com/acme/app.git' },
  task: 'Add a greeting',
  agent: { kind: 'script', steps: [{ run: 'echo hi > hello.txt' }] },
  verify: { test: 'npm test' },
  requestedBy: 'alice',
  approval: { required: ['push'], approvers: ['bob'] },
  notify: { slack: { channel: 'C0SHOP' }, linear: { issue: 'issue-1', identifier: 'ENG-1' } },
};

test('a Slack and Linear session: reports in phase order ending with the outcome, the message ts kept, Linear down fails nothing', async () => {
  const slack: { ts?: string; report: ThreadReport }[] = [];
  let linearCalls = 0;
  let gateReported: () => void;
  const gateReport = new Promise<void>((resolve) => (gateReported = resolve));
  const stubs: Stubs = {
    repoPolicy: acceptAsGiven(),
    reportToSlack: async ({ ts, report }) => {
      slack.push({ ts, report });
      if (report.phase === 'awaiting_approval') gateReported();
      return { ts: '1700000000.000100' };
    },
    reportToLinear: async () => {
      linearCalls++;
      throw ApplicationFailure.nonRetryable('Linear answered 400: Authentication required', 'LinearRequest');
    },
  };
  const run = await runSession(harness, 'threads', fromSlack, stubs, async (handle) => {
    const waiting = await awaitApproval(handle, 'push');
    // Decided once the gate's report went out: a decision before it makes the gate's report one of a burst.
    await within(handle, "the Slack report of the session's gate", gateReport);
    await handle.executeUpdate(decide, {
      args: [{ decision: 'approve', action: 'push', by: 'bob', change: waiting.pendingApproval!.change }],
    });
  });
  expect(run.status.phase).toBe('completed');
  expect(run.status.slackMessage).toEqual({ channel: 'C0SHOP', ts: '1700000000.000100' });
  const phases = slack.map((s) => s.report.phase);
  expect(phases[0]).toBe('provisioning');
  expect(phases[phases.length - 1]).toBe('completed');
  expect(phases).toContain('awaiting_approval');
  // The first report posts; every later one updates the message it posted.
  expect(slack[0].ts).toBeUndefined();
  expect(slack.slice(1).every((s) => s.ts === '1700000000.000100')).toBe(true);
  const atGate = slack.find((s) => s.report.phase === 'awaiting_approval')!.report;
  expect(atGate).toMatchObject({ requestedBy: 'alice', pending: { action: 'push', approvers: ['bob'] } });
  expect(slack[slack.length - 1].report.lastDecision).toEqual({ decision: 'approve', action: 'push', by: 'bob' });
  // Linear refused every report; the session went on, and tried again at each phase.
  expect(linearCalls).toBe(slack.length);
});
