/** Pure: what a verification's results mean, in words a reviewer (and later the agent) can act on. */
import type { Verification } from '../api';

/** Where the app the browser check starts writes its output, in the sandbox (docs/services.md). */
export const APP_LOG_IN_SANDBOX = '/home/drydock/.drydock/app.log';

export type VerificationResults = Omit<Verification, 'passed' | 'summary'>;

/** Passed only if the test command, its JUnit report and the browser checks all passed. */
export function summarizeVerification(
  v: VerificationResults,
  appStart?: string,
): Pick<Verification, 'passed' | 'summary'> {
  const problems: string[] = [];
  if (v.command !== undefined && v.exitCode !== 0) {
    problems.push(`'${v.command}' ${v.timedOut ? 'timed out' : `exited with ${v.exitCode}`}`);
  }
  if (v.report && v.report.failed > 0) {
    const names = v.report.failures.map((f) => `${f.name}${f.message ? `: ${f.message}` : ''}`);
    const more = v.report.failed > names.length ? `; and ${v.report.failed - names.length} more` : '';
    problems.push(`${v.report.failed} of ${v.report.total} tests failed: ${names.join('; ')}${more}`);
  }
  const b = v.browser;
  if (b) {
    const lastLog = b.appLogTail.trim().split('\n').slice(-3).join(' | ');
    if (b.outcome === 'app_did_not_start') {
      problems.push(`the app did not start ('${appStart}'): ${lastLog || b.message || 'no output'}`);
    } else if (b.outcome === 'not_ready') {
      const log = lastLog
        ? `its log (${APP_LOG_IN_SANDBOX}) ends: ${lastLog}`
        : `its log (${APP_LOG_IN_SANDBOX}) is empty`;
      problems.push(`the page never became ready: ${b.message}; the app ('${appStart}') runs on, ${log}`);
    } else if (b.outcome === 'browser_crashed') {
      problems.push(`the browser crashed: ${b.message}`);
    }
    for (const c of b.checks.filter((c) => !c.ok)) {
      problems.push(`check ${c.path} failed: ${c.message}${c.screenshot ? ` (screenshot ${c.screenshot})` : ''}`);
    }
  }
  return { passed: problems.length === 0, summary: problems.join('\n') };
}

/** One line for the reviewer: what ran and how it went. */
export function describeVerification(v: Verification | undefined): string {
  if (!v) return 'no verification configured';
  const parts: string[] = [];
  if (v.command !== undefined) {
    const counts = v.report
      ? ` (${v.report.total} tests: ${v.report.passed} passed, ${v.report.failed} failed, ${v.report.skipped} skipped)`
      : '';
    parts.push(`${v.exitCode === 0 ? 'passed' : 'failed'}: ${v.command}${counts}`);
  }
  if (v.browser) {
    const ok = v.browser.checks.filter((c) => c.ok).length;
    parts.push(`browser ${v.browser.url}: ${v.browser.outcome}, ${ok}/${v.browser.checks.length} checks`);
  }
  return parts.join('; ');
}

/** Artifact references of every screenshot the verification took. */
export function screenshotsOf(v: Verification | undefined): string[] {
  return [
    ...(v?.browser?.checks ?? []).map((c) => c.screenshot),
    ...(v?.browser?.screenshots ?? []).map((s) => s.screenshot),
  ].filter((s): s is string => s !== undefined);
}
