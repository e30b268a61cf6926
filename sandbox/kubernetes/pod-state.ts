/**
 * Where a sandbox's pod is, as one pure function of what the API says of it
 * (unit-tested): running; still starting (scheduled, pulling, being
 * created, its services' folders being filled); failed for good (it ended,
 * or its container or a service's cannot be made: a bad image, a missing
 * command); or gone (deleted, or being deleted). And,
 * for a pod still not running when its start time is up, why and where to look.
 */
import type { CoreV1Event, V1Pod } from '@kubernetes/client-node';
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
    // A service's folder filler that failed (./service-containers.ts): its end of log is its message.
    const filler = status.initContainerStatuses?.find((c) => (c.state?.terminated?.exitCode ?? 0) !== 0);
    const why = [
      status.reason,
      status.message,
      ended && `exit ${ended.exitCode} ${ended.reason ?? ''}`.trim(),
      ended?.message,
      filler && `${filler.name} exited ${filler.state!.terminated!.exitCode}`,
      filler?.state?.terminated?.message?.trim(),
    ];
    return { phase: 'failed', why: why.filter(Boolean).join(': ') || `the pod ${status.phase.toLowerCase()}` };
  }
  // A service's container that cannot be made (its image, its command) keeps the pod from running for ever.
  const stuck = [...(status.initContainerStatuses ?? []), ...(status.containerStatuses ?? [])].find(
    (c) => c.name !== SANDBOX_CONTAINER && CANNOT_START.has(c.state?.waiting?.reason ?? ''),
  );
  if (stuck) {
    const { reason, message } = stuck.state!.waiting!;
    return { phase: 'failed', why: `container ${stuck.name}: ${reason}: ${message ?? ''}`.trim() };
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
  const waiting = state?.waiting && [state.waiting.reason, state.waiting.message].filter(Boolean).join(': ');
  return { phase: 'starting', why: (unscheduled?.message ?? waiting) || `phase ${status.phase ?? 'unknown'}` };
}

/** The pod's warnings (the scheduler's, the kubelet's: a volume, the pod sandbox, an image), newest last, each once. */
export function warningsOf(events: CoreV1Event[], most = 3): string[] {
  const when = (e: CoreV1Event) => new Date(e.lastTimestamp ?? e.eventTime ?? e.firstTimestamp ?? 0).getTime();
  const lines = events
    .filter((e) => e.type === 'Warning')
    .sort((a, b) => when(a) - when(b))
    .map((e) => `${e.reason ?? 'Warning'}: ${(e.message ?? '').trim().replace(/\s+/g, ' ')}`.slice(0, 300));
  return [...new Set(lines.reverse())].slice(0, most).reverse();
}

/**
 * The error of a pod that did not run within its start time: its state and
 * warnings, then where to look: the node (its taints, conditions and free
 * resources) when the scheduler could not place it, else the pod's events
 * and the kubelet; and the setting that gives pods longer.
 */
export function notStartedMessage(
  pod: V1Pod | undefined,
  warnings: string[],
  at: { sandbox: string; namespace: string; node: string; limitMs: number },
): string {
  const name = pod?.metadata?.name ?? at.sandbox;
  const { why } = runningState(pod);
  // The scheduler's event repeats the condition's message: said once.
  const more = warnings.filter((w) => !why || !w.endsWith(`: ${why}`));
  const seen = more.length ? `; ${more.join('; ')}` : '';
  const look = pod?.spec?.nodeName
    ? `node ${at.node} has not started it: see its events (kubectl describe pod ${name} -n ${at.namespace}) and the node's kubelet`
    : `the scheduler did not place it on node ${at.node}: see kubectl describe node ${at.node} (its taints, conditions and free resources)`;
  return (
    `the pod ${name}${name === at.sandbox ? '' : ` of ${at.sandbox}`} did not start within ${Math.round(at.limitMs / 1000)} s ` +
    `(${why || 'no status yet'}${seen}): ${look}; DRYDOCK_K8S_START_TIMEOUT gives pods longer to start`
  );
}
