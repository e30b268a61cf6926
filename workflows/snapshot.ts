/**
 * refreshSnapshot: builds a new snapshot of a registered repo (run by its
 * Temporal Schedule, `drydock snapshot build`, or a session's cold start).
 * The setup runs as an ordinary sandbox step, with the repo's egress
 * allowlist for that step only; the build container is removed on every path.
 */
import { ApplicationFailure, CancellationScope, proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { HostActivities, SharedActivities } from '../activities';
import type { SnapshotBuildPlan, SnapshotBuildResult } from '../sandbox/contract';
import type { StepInput } from '../sandbox/contract';
import { ErrorType } from './api';
import { stepNonce } from './session/nonce';

const common = { heartbeatTimeout: '10s', retry: { maximumAttempts: 5 } } as const;

/** `hostQueue`: build on that host (its own refresh schedule); absent: on whichever host picks it up. */
export async function refreshSnapshot(input: { repo: string; hostQueue?: string }): Promise<SnapshotBuildResult> {
  if (typeof input?.repo !== 'string' || !input.repo) {
    throw ApplicationFailure.nonRetryable('repo: required (the registered URL)', ErrorType.InvalidSessionInput);
  }
  if (input.hostQueue !== undefined && (typeof input.hostQueue !== 'string' || !input.hostQueue)) {
    throw ApplicationFailure.nonRetryable('hostQueue: a host task queue, or absent', ErrorType.InvalidSessionInput);
  }
  const buildId = workflowInfo().workflowId;
  // On the host's queue, or the shared one: either serves startSnapshotBuild.
  const planner = proxyActivities<Pick<SharedActivities & HostActivities, 'startSnapshotBuild'>>({
    taskQueue: input.hostQueue,
    // A host that is gone fails its scheduled build instead of holding it (and, overlaps skipped, the next ones).
    ...(input.hostQueue ? { scheduleToStartTimeout: '10m' } : {}),
    // It may build the repo's environment and its services' images, each within DRYDOCK_BUILD_TIMEOUT (at most 30m).
    startToCloseTimeout: '40m',
    ...common,
  });
  let plan: SnapshotBuildPlan | undefined;
  try {
    plan = await planner.startSnapshotBuild({ buildId, repo: input.repo });
    const onHost = proxyActivities<HostActivities>({
      taskQueue: plan.hostQueue,
      startToCloseTimeout: plan.setupTimeoutMs + 10 * 60_000,
      ...common,
    });
    // The egress proxy opens for this step only, with the repo's registries (sandbox/egress.ts).
    const setupStep: StepInput & { egress: SnapshotBuildPlan['egress'] } = {
      sandbox: plan.sandbox,
      sessionId: buildId,
      key: 'setup',
      nonce: stepNonce(),
      step: { run: plan.setup, timeout: plan.setupTimeoutMs },
      timeoutMs: plan.setupTimeoutMs,
      egress: plan.egress,
      recordsSetup: true,
    };
    // A refresh that takes the newest snapshot's setup result (SnapshotBuildPlan.reused) runs no setup.
    const setup = plan.reused ? { exitCode: 0, timedOut: false, outputTail: '' } : await onHost.runStep(setupStep);
    const result = await onHost.finishSnapshotBuild({ plan, setup });
    if (result.status === 'failed') {
      // The previous snapshot stays in service; the failure says why (and is in the registry).
      throw ApplicationFailure.nonRetryable(
        `snapshot of ${input.repo} failed: ${result.error}`,
        ErrorType.SnapshotSetupFailed,
        result,
      );
    }
    // The host's warm pool moves to the new snapshot (a failure here leaves it to the reaper's run).
    await onHost.fillPools({ repo: input.repo }).catch(() => undefined);
    return result;
  } finally {
    await CancellationScope.nonCancellable(async () => {
      const teardown = proxyActivities<Pick<SharedActivities & HostActivities, 'destroySandbox'>>({
        taskQueue: plan?.hostQueue,
        startToCloseTimeout: '2m',
        scheduleToCloseTimeout: '10m',
        ...common,
      });
      await teardown.destroySandbox({ sessionId: buildId });
    });
  }
}
