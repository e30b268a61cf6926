/**
 * The acceptance command of a pilot's task (input.acceptance): run once the
 * first round's change passed verification, recorded in status, the audit
 * trail and the metrics. It measures; it never goes back to the agent and
 * does not change the outcome.
 */
import type { CommitResult } from '../../sandbox/contract';
import { acceptanceScript } from '../rules/acceptance';
import { records } from './proxies';
import type { SessionRun } from './state';
import { runScriptStep } from './steps';

export async function checkAcceptance(run: SessionRun, change: CommitResult): Promise<void> {
  const spec = run.input.acceptance;
  if (!spec || run.status.acceptance) return;
  if (!change.changed) {
    await run.note('acceptance', 'not run: the agent changed nothing');
    return;
  }
  const step = { run: acceptanceScript(spec.command), timeout: spec.timeout };
  const result = await runScriptStep(run, step, {
    key: 'acceptance',
    name: `acceptance: ${spec.command.split('\n')[0].slice(0, 60)}`,
    failOnExit: false,
  });
  const passed = result.exitCode === 0 && !result.timedOut && !result.failure;
  run.status.acceptance = {
    command: spec.command,
    passed,
    exitCode: result.exitCode,
    timedOut: result.timedOut,
    outputTail: result.outputTail,
    ...(result.artifact ? { artifact: result.artifact } : {}),
  };
  await records.recordAudit({
    sessionId: run.sessionId,
    key: 'acceptance',
    kind: 'acceptance',
    actor: 'drydock',
    data: { command: spec.command, passed, exitCode: result.exitCode, timedOut: result.timedOut },
  });
}
