/**
 * The session's activity proxies and their timeout presets: on any worker
 * (provisioning picks the host), on the sandbox's host, and for teardown.
 * Each proxy is typed by the set its queue serves (activities/index.ts), so a
 * host-bound activity on the shared queue does not compile.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  proxyActivities,
  proxyLocalActivities,
  TimeoutFailure,
  type ActivityOptions,
  type RetryPolicy,
} from '@temporalio/workflow';
import type { HostActivities, SharedActivities } from '../../activities';
import type { Sandbox, SandboxPlace } from '../../sandbox/contract';
import { ErrorType } from '../api';

/**
 * Permanent failures are thrown as non-retryable where they happen (ErrorType); the rest retry.
 * A sandbox that is gone never comes back by retrying: the session replaces it.
 */
const RETRY = { maximumAttempts: 5, nonRetryableErrorTypes: [ErrorType.SandboxNotFound] };
/**
 * Every activity heartbeats while it runs (platform/heartbeat.ts), so a dead
 * worker is noticed within this, whatever the phase.
 */
const HEARTBEAT_TIMEOUT = '10s';

/**
 * Activities on any worker: provisioning picks the host. (A cancelled session
 * waits for an activity in flight to stop, the SDK's default cancellation
 * type, so teardown never runs before provisioning has created its container.)
 */
export const anyHost = proxyActivities<SharedActivities>({
  startToCloseTimeout: '10m',
  heartbeatTimeout: HEARTBEAT_TIMEOUT,
  retry: RETRY,
});

/**
 * The session's own records in the database (an audit event the workflow
 * witnessed, a repo note, the metrics row at the end): a statement or two
 * each, run as local activities by the worker that runs the workflow, so none
 * costs an activity task and a workflow task of its own on the session's path
 * (bench/RESULTS.md, issue 51 goal 3). While the database is away one waits,
 * as the activity did (anyHost's timeouts; the worker keeps the workflow task
 * alive meanwhile). A worker that dies in one leaves the workflow task to time
 * out, and the next worker's replay runs it again (each is keyed: it writes once).
 */
export const records = proxyLocalActivities<
  Pick<SharedActivities, 'recordAudit' | 'recordSessionMetrics' | 'keepNotes'>
>({
  startToCloseTimeout: '10m',
  retry: RETRY,
});

/**
 * Provisioning's retries outlast a stall of the worker or its database: under load (20
 * sessions at once, load average 40–56) heartbeats came late and the store was busy for
 * longer than the five attempts' 15 s of backoff, and 17 of 20 sessions were lost
 * (bench/RESULTS.md, park). Ten attempts, backing off to 30 s: about 2.5 minutes of waits.
 * A sandbox's own failures are non-retryable where they happen and end at once, as before.
 */
export const PROVISION_RETRY: RetryPolicy = {
  ...RETRY,
  maximumAttempts: 10,
  initialInterval: '1s',
  backoffCoefficient: 2,
  maximumInterval: '30s',
};

/**
 * Provisioning, on any worker: as anyHost, with the time of a build of the
 * repo's environment (a cold start on a host without its image), within
 * DRYDOCK_BUILD_TIMEOUT's 30 minutes at most, and PROVISION_RETRY's budget. A
 * dead worker is still noticed within the heartbeat timeout.
 */
export const provisioning = proxyActivities<Pick<SharedActivities, 'provisionSandbox'>>({
  startToCloseTimeout: '40m',
  heartbeatTimeout: HEARTBEAT_TIMEOUT,
  retry: PROVISION_RETRY,
});

/**
 * Activities on the host that owns the sandbox, allowed to run `startToCloseMs`.
 * A task nobody picks up within the host timeout means the host is gone (see sandboxLoss).
 * `retrying` lifts the attempt limit and bounds all attempts together instead.
 */
export function onHost(
  sandbox: Sandbox,
  startToCloseMs = 10 * 60_000,
  retrying?: { scheduleToCloseMs: number },
): HostActivities {
  const options: ActivityOptions = {
    taskQueue: sandbox.hostQueue,
    startToCloseTimeout: startToCloseMs,
    scheduleToStartTimeout: sandbox.hostTimeoutMs,
    heartbeatTimeout: HEARTBEAT_TIMEOUT,
    retry: retrying ? { nonRetryableErrorTypes: RETRY.nonRetryableErrorTypes } : RETRY,
    ...(retrying ? { scheduleToCloseTimeout: retrying.scheduleToCloseMs } : {}),
  };
  return proxyActivities<HostActivities>(options);
}

/**
 * Teardown gives up after 10 minutes, or when the host does not answer within
 * its host timeout (a host that is gone): the reaper removes what is left.
 * Without a sandbox (provisioning failed) any worker removes it by name.
 */
export function teardownOn(sandbox?: SandboxPlace): Pick<HostActivities & SharedActivities, 'destroySandbox'> {
  return proxyActivities<HostActivities & SharedActivities>({
    taskQueue: sandbox?.hostQueue,
    startToCloseTimeout: '2m',
    scheduleToCloseTimeout: '10m',
    ...(sandbox ? { scheduleToStartTimeout: sandbox.hostTimeoutMs } : {}),
    heartbeatTimeout: HEARTBEAT_TIMEOUT,
    retry: RETRY,
  });
}

export interface SandboxLoss {
  why: string;
  hostLost: boolean;
}

/** Why a failed sandbox activity means the sandbox is lost: it is gone, or its host stopped answering. */
export function sandboxLoss(err: unknown, sandbox: Sandbox): SandboxLoss | undefined {
  if (!(err instanceof ActivityFailure)) return undefined;
  const cause = err.cause;
  if (cause instanceof ApplicationFailure && cause.type === ErrorType.SandboxNotFound)
    return { why: `sandbox ${sandbox.name} is gone`, hostLost: false };
  // The service is named: "service db exited (code 137); its log ends: …".
  if (cause instanceof ApplicationFailure && cause.type === ErrorType.ServiceLost)
    return { why: cause.message, hostLost: false };
  if (cause instanceof TimeoutFailure && cause.timeoutType === 'SCHEDULE_TO_START')
    return {
      why: `host ${sandbox.host} did not pick up ${err.activityType} within ${Math.round(sandbox.hostTimeoutMs / 1000)}s`,
      hostLost: true,
    };
  return undefined;
}
