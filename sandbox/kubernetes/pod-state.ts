/**
 * Where a sandbox's pod is, as one pure function of what the API says of it
 * (unit-tested): running; still starting (scheduled, pulling, being
 * created); failed for good (it ended, or its container cannot be made: a
 * bad image, a missing command); or gone (deleted, or being deleted).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { SANDBOX_CONTAINER } from './pod';

export type PodState = { phase: 'running' | 'starting' | 'failed' | 'gone'; why: string };

/** Reasons a container waits for ever: retrying the same pod cannot help. */
const CANNOT_START = new Set([
  'ErrImageNeverPull',
  'InvalidImageName',
  'CreateContainerConfigError',
  'CreateContainerError',
  'RunContainerError',
  'StartError',
]);

export function runningState(pod: V1Pod | undefined): PodState {
  if (!pod || pod.metadata?.deletionTimestamp) return { phase: 'gone', why: 'the pod is gone' };
  const status = pod.status ?? {};
  const container = status.containerStatuses?.find((c) => c.name === SANDBOX_CONTAINER);
  const state = container?.state;
  if (status.phase === 'Failed' || status.phase === 'Succeeded') {
    const ended = state?.terminated;
    const why = [
      status.reason,
      status.message,
      ended && `exit ${ended.exitCode} ${ended.reason ?? ''}`.trim(),
      ended?.message,
    ];
    return { phase: 'failed', why: why.filter(Boolean).join(': ') || `the pod ${status.phase.toLowerCase()}` };
  }
  if (state?.running)
    return status.phase === 'Running' ? { phase: 'running', why: '' } : { phase: 'starting', why: '' };
  if (state?.terminated) {
    const { exitCode, reason, message } = state.terminated;
    return { phase: 'failed', why: [`exited ${exitCode}`, reason, message].filter(Boolean).join(': ') };
  }
  if (state?.waiting?.reason && CANNOT_START.has(state.waiting.reason)) {
    return { phase: 'failed', why: `${state.waiting.reason}: ${state.waiting.message ?? ''}`.trim() };
  }
  const unscheduled = status.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'False');
  const waiting = state?.waiting && `${state.waiting.reason ?? ''}: ${state.waiting.message ?? ''}`;
  return { phase: 'starting', why: (unscheduled?.message ?? waiting) || `phase ${status.phase ?? 'unknown'}` };
}
