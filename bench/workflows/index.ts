/**
 * Bench-only workflows (deterministic code, bundled by bench/stack.ts for a
 * worker of their own): activity round trips with nothing else in them.
 */
import { proxyActivities } from '@temporalio/workflow';
import type { HostActivities } from '../../activities';
import { stepNonce } from '../../workflows/session/nonce';

/** The bench worker's own activities. */
export interface BenchActivities {
  /** Does nothing: what remains is Temporal's round trip. */
  noop(): Promise<void>;
}

/** `n` no-op activities in a row, on this workflow's own task queue. */
export async function roundTrips(n: number): Promise<void> {
  const { noop } = proxyActivities<BenchActivities>({ startToCloseTimeout: '1m', retry: { maximumAttempts: 1 } });
  for (let i = 0; i < n; i++) await noop();
}

export interface ExecStepsInput {
  /** A running sandbox (container name) on the host of `hostQueue`. */
  sandbox: string;
  sessionId: string;
  /** The drydock worker's host queue, where runStep runs. */
  hostQueue: string;
  /** Step keys are `<prefix>-<i>`: unique, since a step runs once per key. */
  keyPrefix: string;
  command: string;
  n: number;
}

/**
 * `n` commands through drydock's own runStep activity, as a session's
 * script steps run: same activity, same task queue, same options.
 */
export async function execSteps(input: ExecStepsInput): Promise<number[]> {
  const { runStep } = proxyActivities<HostActivities>({
    taskQueue: input.hostQueue,
    startToCloseTimeout: '2m',
    heartbeatTimeout: '10s',
    retry: { maximumAttempts: 1 },
  });
  const exitCodes: number[] = [];
  for (let i = 0; i < input.n; i++) {
    const result = await runStep({
      sandbox: input.sandbox,
      sessionId: input.sessionId,
      key: `${input.keyPrefix}-${i}`,
      nonce: stepNonce(),
      step: { run: input.command, timeout: 60_000 },
      timeoutMs: 60_000,
    });
    exitCodes.push(result.exitCode);
  }
  return exitCodes;
}
