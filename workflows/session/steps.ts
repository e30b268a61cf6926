/** One script step in the sandbox: a script agent's step, or the test command of verification. */
import type { StepInput, StepResult } from '../../sandbox/contract';
import type { ScriptStep } from '../input';
import { durationMs } from '../units';
import { exitText, SessionEnd } from './errors';
import { stepNonce } from './nonce';
import { onHost } from './proxies';
import { inSandbox } from './sandbox';
import { recordStep, type SessionRun } from './state';

export interface StepOptions {
  /** The step's key: it runs once per key, even when retried after a crash. */
  key: string;
  /** Its timeline entry. */
  name: string;
  /** A failed step ends the session (an agent's step) or is only reported (verification). */
  failOnExit: boolean;
  /** An agent's step leaves the session's new checkpoint behind. */
  checkpoint?: boolean;
  /** A test command's step: its result carries the JUnit report it wrote (see StepInput). */
  testReport?: { files?: string[] };
  /** Variables of the step (a plan first: DRYDOCK_PLAN, the approved plan). */
  env?: Record<string, string>;
  /** A script agent's step that may start child sessions: its gateway serves start_child to drydock-child. */
  gateway?: StepInput['gateway'];
}

export async function runScriptStep(run: SessionRun, step: ScriptStep, opts: StepOptions): Promise<StepResult> {
  const { input, sessionId } = run;
  const timeoutMs = 'run' in step ? durationMs(step.timeout) : 60_000;
  const nonce = stepNonce();
  return run.track(opts.name, async (record) => {
    const result = await inSandbox(run, (sb) =>
      onHost(sb, timeoutMs + 60_000).runStep({
        sandbox: sb.name,
        sessionId,
        key: opts.key,
        nonce,
        step,
        timeoutMs,
        ...(opts.checkpoint ? { checkpointBase: sb.baseCommit } : {}),
        ...(opts.testReport ? { testReport: opts.testReport } : {}),
        ...(opts.env ? { env: opts.env } : {}),
        ...(opts.gateway ? { gateway: opts.gateway } : {}),
      }),
    );
    recordStep(record, result);
    run.countRefusals(result);
    if (opts.failOnExit && (result.exitCode !== 0 || result.failure)) {
      throw new SessionEnd(
        'failed',
        `${opts.name} ${exitText(result, input.limits, timeoutMs)}`,
        result.failure ? `sandbox_${result.failure}` : 'step_failed',
      );
    }
    return result;
  });
}

/** A script step in a few words, for its timeline entry. */
export function describeStep(step: ScriptStep): string {
  const text = 'run' in step ? step.run : 'write' in step ? `write ${step.write.path}` : 'apply patch';
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}
