/** Verification: the repo's tests (exit code and JUnit report) and the browser checks, with the evidence. */
import type { Verification } from '../api';
import { durationMs } from '../units';
import { summarizeVerification, type VerificationResults } from '../rules/verification';
import { onHost, records } from './proxies';
import { inSandbox, stopAgentApp } from './sandbox';
import type { SessionRun } from './state';
import { runScriptStep } from './steps';

/** Verifies the change of the agent's attempt, records it in status and the audit trail, and returns it. */
export async function verify(run: SessionRun): Promise<Verification> {
  const { attempt } = run.loop;
  run.setPhase('verifying');
  await stopAgentApp(run);
  const results: VerificationResults = {};
  await runTests(run, attempt, results);
  await runBrowserChecks(run, results);
  const verification = { ...results, ...summarizeVerification(results, run.input.verify.browser?.start) };
  run.status.verification = verification;
  run.status.verificationRounds = attempt;
  const { passed, summary, command, exitCode, report: tests } = verification;
  await records.recordAudit({
    sessionId: run.sessionId,
    key: `${run.keyPrefix}verification-${attempt}`,
    kind: 'verification',
    actor: 'drydock',
    data: { passed, summary, command, exitCode, tests: tests && { total: tests.total, failed: tests.failed } },
  });
  return verification;
}

async function runTests(run: SessionRun, attempt: number, results: VerificationResults): Promise<void> {
  const { test, timeout, junit } = run.input.verify;
  if (!test) return;
  // Each attempt's verification is its own step (a step runs once per key).
  const key = run.keyPrefix + (attempt === 1 ? 'verify' : `verify-${attempt}`);
  const name = attempt === 1 ? `verify: ${test}` : `verify: ${test} (attempt ${attempt})`;
  const testReport = junit ? { files: junit } : {};
  const step = await runScriptStep(run, { run: test, timeout }, { key, name, failOnExit: false, testReport });
  Object.assign(results, {
    command: test,
    exitCode: step.exitCode,
    timedOut: step.timedOut,
    outputTail: step.outputTail,
    artifact: step.artifact,
    report: step.report,
  });
}

async function runBrowserChecks(run: SessionRun, results: VerificationResults): Promise<void> {
  const { browser } = run.input.verify;
  if (!browser) return;
  const { attempt } = run.loop;
  // The artifacts' names: the round, and the agent's attempt in it after the first (docs/architecture.md, Words).
  const label = `round-${run.status.round ?? 1}${attempt > 1 ? `-attempt-${attempt}` : ''}`;
  results.browser = await browserRun(run, `browser: ${browser.url}`, label);
}

/**
 * The browser checks on the base, before the agent changes anything: the
 * pages as they were, beside the round's for the reviewer. Only evidence: an
 * app that does not start on the base fails nothing.
 */
export async function captureBefore(run: SessionRun): Promise<void> {
  const { browser } = run.input.verify;
  if (!browser || run.status.before) return;
  run.status.before = await browserRun(run, `browser before the change: ${browser.url}`, 'before', true);
}

/** One run of the browser checks (with a video), as a timeline step; `evidence`: its failure is no failure. */
async function browserRun(run: SessionRun, name: string, label: string, evidence = false) {
  const browser = run.input.verify.browser!;
  // repoPolicy settled it: the session's own start, url and timeout, else the repo's app's.
  const readyTimeoutMs = durationMs(browser.readyTimeout ?? '60s');
  return run.track(name, async (record) => {
    const result = await inSandbox(run, (sb) =>
      onHost(sb, readyTimeoutMs + 10 * 60_000).verifyInBrowser({
        sandbox: sb.name,
        sessionId: run.sessionId,
        browser,
        readyTimeoutMs,
        label,
        video: true,
      }),
    );
    record.ok = evidence || result.outcome === 'passed';
    record.detail = `${result.outcome}, ${result.checks.filter((c) => c.ok).length}/${result.checks.length} checks`;
    return result;
  });
}
