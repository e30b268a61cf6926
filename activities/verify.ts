import { XMLParser } from 'fast-xml-parser';
import type { BrowserResult, TestReport } from '../workflows/api';
import type { BrowserCheck } from '../workflows/input';
import type { ActivityDeps } from './deps';
import { endStrayProcesses, inSandbox, STATE_DIR } from './container';
import { tail } from './output';

/** Report files the usual test runners write (jest-junit, surefire, gradle, pytest --junitxml, ...). */
const USUAL_REPORT =
  /(^|\/)(junit[^/]*|TEST-[^/]*|[^/]*results?[^/]*)\.xml$|\/(test-results|test-reports|surefire-reports)\//i;

const xml = new XMLParser({
  ignoreAttributes: false,
  attributeNamePrefix: '',
  textNodeName: 'text',
  isArray: (name) => ['testsuite', 'testcase'].includes(name),
});

type Node = Record<string, any>;

/** Failing tests kept in status and history; the whole reports are in the artifact store. */
const MAX_FAILURES = 50;

/** Console errors (and failed requests) kept of one browser check, and characters of each. */
export const MAX_BROWSER_MESSAGES = 50;
export const MAX_BROWSER_MESSAGE_CHARS = 1_000;

/**
 * The browser runner's messages, bounded in count and length: the runner
 * runs in the sandbox, so a page can log without end, and the result goes
 * into workflow history and status. What is cut is counted.
 */
export function boundMessages(messages: unknown): string[] {
  const list: unknown[] = Array.isArray(messages) ? messages : [];
  const kept = list.slice(0, MAX_BROWSER_MESSAGES).map((m) => {
    const text = String(m);
    const cut = text.length - MAX_BROWSER_MESSAGE_CHARS;
    return cut > 0 ? `${text.slice(0, MAX_BROWSER_MESSAGE_CHARS)}… (${cut} more characters)` : text;
  });
  if (list.length > MAX_BROWSER_MESSAGES) kept.push(`… and ${list.length - MAX_BROWSER_MESSAGES} more`);
  return kept;
}

/** Counts and failing tests of JUnit XML documents (testsuites/testsuite/testcase). */
export function parseJUnit(documents: { file: string; content: string }[]): TestReport {
  const report: TestReport = { files: [], total: 0, passed: 0, failed: 0, skipped: 0, failures: [] };
  const suitesOf = (node: Node): Node[] => [
    ...((node.testsuite as Node[] | undefined) ?? []),
    ...((node.testsuite as Node[] | undefined) ?? []).flatMap(suitesOf),
  ];
  for (const { file, content } of documents) {
    const doc = xml.parse(content) as Node;
    const root: Node = doc.testsuites ?? { testsuite: doc.testsuite ?? [] };
    const suites = suitesOf(root);
    if (suites.length === 0) continue;
    report.files.push(file);
    for (const testcase of suites.flatMap((s) => (s.testcase as Node[] | undefined) ?? [])) {
      report.total++;
      const problem = testcase.failure ?? testcase.error;
      if (problem !== undefined) {
        report.failed++;
        const first = Array.isArray(problem) ? problem[0] : problem;
        const message = typeof first === 'string' ? first : (first?.message ?? first?.text ?? '');
        const name = [testcase.classname, testcase.name].filter(Boolean).join(' › ');
        if (report.failures.length < MAX_FAILURES) {
          report.failures.push({ name, message: String(message).trim().split('\n')[0].slice(0, 300) });
        }
      } else if (testcase.skipped !== undefined) {
        report.skipped++;
      } else {
        report.passed++;
      }
    }
  }
  return report;
}

/** XML reports in the usual places that the step `stepKey` wrote (newer than its start). */
async function reportsWrittenDuring(
  sandboxes: ActivityDeps['sandboxes'],
  sandbox: string,
  stepKey: string,
): Promise<string[]> {
  const found = await sandboxes.exec(sandbox, [
    'find',
    '.',
    '(',
    '-name',
    'node_modules',
    '-o',
    '-name',
    '.git',
    ')',
    '-prune',
    '-o',
    '-type',
    'f',
    '-name',
    '*.xml',
    '-newer',
    `${STATE_DIR}/steps/${stepKey}/started`,
    '-print',
  ]);
  return found.stdout
    .toString()
    .split('\n')
    .map((f) => f.replace(/^\.\//, ''))
    .filter((f) => f && USUAL_REPORT.test(`/${f}`));
}

export function createVerifyActivities({ sandboxes, artifacts, log, redactor }: ActivityDeps) {
  /** A file of the sandbox, copied to the artifact store; returns its reference. */
  async function copyOut(sandbox: string, sessionId: string, file: string, name: string): Promise<string> {
    const content = (await sandboxes.exec(sandbox, ['cat', file])).stdout;
    return artifacts.put(sessionId, name, content);
  }

  return inSandbox({
    /**
     * Reads the JUnit XML that the test step (key `stepKey`) wrote: the given
     * files, or else XML reports in the usual places written during the step.
     */
    async readTestReport(input: {
      sandbox: string;
      sessionId: string;
      stepKey: string;
      files?: string[];
    }): Promise<TestReport | undefined> {
      const files = input.files ?? (await reportsWrittenDuring(sandboxes, input.sandbox, input.stepKey));
      const documents = [];
      for (const file of files) {
        const read = await sandboxes.exec(input.sandbox, ['cat', file]);
        if (read.exitCode === 0) documents.push({ file, content: read.stdout.toString() });
      }
      if (documents.length === 0) return undefined;
      for (const d of documents) {
        d.content = await redactor.large(d.content);
        await artifacts.put(input.sessionId, `junit/${d.file.replace(/\//g, '_')}`, d.content);
      }
      // Scrubbed again once parsed: an XML escape in the file can hide a secret from the first pass.
      return redactor.value(parseJUnit(documents));
    },

    /**
     * Starts the app in the sandbox, waits until its URL answers, then lets
     * the runner in the image drive Chromium through the checks. Screenshots
     * and the app's log are copied out to the artifact store.
     */
    async verifyInBrowser(input: {
      sandbox: string;
      sessionId: string;
      browser: BrowserCheck;
      readyTimeoutMs: number;
    }) {
      const { sandbox, sessionId, browser } = input;
      const outDir = `${STATE_DIR}/browser`;
      const started = Date.now();
      // Idempotent: a retry finds the app it started (pid file) instead of starting a second one.
      const pid = Number(
        (
          await sandboxes.run(sandbox, [
            'sh',
            '-c',
            'mkdir -p "$2"; if [ -f "$2/app.pid" ] && kill -0 "$(cat "$2/app.pid")" 2>/dev/null; then cat "$2/app.pid"; ' +
              'else cd /workspace && nohup sh -c "$1" >"$2/app.log" 2>&1 </dev/null & echo $! | tee "$2/app.pid"; fi',
            'start-app',
            browser.start,
            outDir,
          ])
        ).trim(),
      );
      const run = await sandboxes.exec(sandbox, [
        'drydock-verify-browser',
        JSON.stringify({ ...browser, pid, outDir, readyTimeoutMs: input.readyTimeoutMs }),
      ]);
      let raw: Omit<BrowserResult, 'url' | 'appLogTail' | 'durationMs'>;
      try {
        raw = JSON.parse(run.stdout.toString().trim().split('\n').pop() ?? '');
      } catch {
        raw = {
          outcome: 'browser_crashed',
          message: `the browser runner failed (exit ${run.exitCode}): ${tail(run.stderr.toString(), 500)}`,
          checks: [],
          screenshots: [],
          consoleErrors: [],
          failedRequests: [],
        };
      }
      raw = redactor.value(raw);
      raw.consoleErrors = boundMessages(raw.consoleErrors);
      raw.failedRequests = boundMessages(raw.failedRequests);
      // The app, and whatever it started: nothing of it runs on while the change is exported.
      await endStrayProcesses(sandboxes, sandbox);
      const copy = (file: string) => copyOut(sandbox, sessionId, file, `browser/${file.split('/').pop()}`);
      for (const check of raw.checks) {
        if (check.screenshot) check.screenshot = await copy(check.screenshot);
      }
      const screenshots = [];
      for (const shot of raw.screenshots as { path: string; file?: string; message?: string }[]) {
        const { file, ...rest } = shot;
        screenshots.push(file ? { ...rest, screenshot: await copy(file) } : rest);
      }
      const appLog = await redactor.large(
        (await sandboxes.exec(sandbox, ['cat', `${outDir}/app.log`])).stdout.toString(),
      );
      const result: BrowserResult = {
        ...raw,
        url: browser.url,
        screenshots,
        appLogTail: tail(appLog, 1_000),
        appLog: await artifacts.put(sessionId, 'browser/app.log', appLog),
        durationMs: Date.now() - started,
      };
      log.info({ sessionId, sandboxId: sandbox, outcome: result.outcome }, 'browser verification');
      return result;
    },
  });
}
