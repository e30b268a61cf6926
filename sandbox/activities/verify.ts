import { rm } from 'node:fs/promises';
import { XMLParser } from 'fast-xml-parser';
import { egressDirOf } from '../egress';
import { locateFailure } from '../../github/test-locations';
import type { BrowserResult, TestReport } from '../../workflows/api';
import type { BrowserCheck } from '../../workflows/input';
import type { SandboxDeps } from './deps';
import { LABELS, SandboxNotFound, type ExecResult } from '../provider';
import { sandboxOf, type SandboxHandle, type ShellScript } from '../handle';
import { HELPER, HELPERS_MOUNT } from '../toolchains';
import {
  browserContainerName,
  createOwnedContainer,
  endStrayProcesses,
  inSandbox,
  STATE_DIR,
  type ContainerDeps,
} from './container';
import { toolchainsOf } from './environment';
import { runDir } from './run-once';
import { OUTPUT_CAPS, tail } from './output';

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
          const whole = typeof first === 'string' ? first : `${first?.message ?? ''}\n${first?.text ?? ''}`;
          const place = locateFailure(testcase, whole);
          report.failures.push({ name, message: String(message).trim().split('\n')[0].slice(0, 300), ...place });
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

/** XML reports in the usual places that the step `stepNonce` wrote (newer than its start). */
async function reportsWrittenDuring(sandbox: SandboxHandle, stepNonce: string): Promise<string[]> {
  const found = await sandbox.commands.exec([
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
    `${runDir(stepNonce)}/started`,
    '-print',
  ]);
  return found.stdout
    .toString()
    .split('\n')
    .map((f) => f.replace(/^\.\//, ''))
    .filter((f) => f && USUAL_REPORT.test(`/${f}`));
}

/**
 * The JUnit XML that the test step `stepNonce` wrote: the given files, or else
 * XML reports in the usual places written during the step; scrubbed, and kept
 * in the artifact store. Called by runStep once the step's result is known.
 */
export async function readTestReport(
  { sandboxes, artifacts, redactor }: Pick<SandboxDeps, 'sandboxes' | 'artifacts' | 'redactor'>,
  input: { sandbox: string; sessionId: string; stepNonce: string; files?: string[] },
): Promise<TestReport | undefined> {
  const sandbox = sandboxOf(sandboxes, input.sandbox);
  const files = input.files ?? (await reportsWrittenDuring(sandbox, input.stepNonce));
  const documents = [];
  for (const file of files) {
    const read = await sandbox.files.read(file, { ...OUTPUT_CAPS.junit, what: `the JUnit report ${file}` });
    if (read) documents.push({ file, content: read.toString() });
  }
  if (documents.length === 0) return undefined;
  for (const d of documents) {
    d.content = await redactor.large(d.content);
    await artifacts.put(input.sessionId, `junit/${d.file.replace(/\//g, '_')}`, d.content);
  }
  // Scrubbed again once parsed: an XML escape in the file can hide a secret from the first pass.
  return redactor.value(parseJUnit(documents));
}

type RunnerResult = Omit<BrowserResult, 'url' | 'appLogTail' | 'durationMs'>;

/** Where the browser container writes screenshots (its own /tmp). */
const BROWSER_OUT = '/tmp/drydock-browser';
/** Limits of a browser container: Chromium with one page. */
const BROWSER_LIMITS = {
  cpus: 1,
  memoryBytes: 1536 * 1024 ** 2,
  pids: 512,
  tmpBytes: 256 * 1024 ** 2,
  diskBytes: 1024 ** 3,
};

/** Starts the app ($1) with its log and pid in $2; a retry finds the app it started instead of starting a second one. */
const START_APP: ShellScript = {
  name: 'start-app',
  text:
    'mkdir -p "$2"; if [ -f "$2/app.pid" ] && kill -0 "$(cat "$2/app.pid")" 2>/dev/null; then cat "$2/app.pid"; ' +
    'else cd /workspace && nohup sh -c "$1" >"$2/app.log" 2>&1 </dev/null & echo $! | tee "$2/app.pid"; fi',
};

/** Starts the app in the sandbox; returns its pid. */
async function startApp(sandbox: SandboxHandle, start: string, outDir: string): Promise<number> {
  return Number((await sandbox.commands.runScript(START_APP, [start, outDir])).trim());
}

/** The runner's one JSON line, or a browser_crashed result naming how it failed. */
function runnerResult(run: ExecResult): RunnerResult {
  try {
    return JSON.parse(run.stdout.toString().trim().split('\n').pop() ?? '') as RunnerResult;
  } catch {
    return {
      outcome: 'browser_crashed',
      message: `the browser runner failed (exit ${run.exitCode}): ${tail(`${run.stderr}${run.stdout}`, 500)}`,
      checks: [],
      screenshots: [],
      consoleErrors: [],
      failedRequests: [],
    };
  }
}

/**
 * Runs `work` with a browser container of the sandbox: drydock's base image
 * (Chromium, playwright-core), the helpers mounted, in the sandbox's network
 * namespace (no IP network of its own), as hardened as a sandbox and
 * labelled with the same owner and expiry, so teardown and the reaper find
 * it. Removed afterwards, whatever happened.
 */
async function inBrowserContainer<T>(
  deps: VerifyDeps,
  sandbox: string,
  work: (browser: SandboxHandle) => Promise<T>,
): Promise<T> {
  const name = browserContainerName(sandbox);
  const info = await deps.sandboxes.info(sandbox);
  if (!info) throw new SandboxNotFound(sandbox);
  const { labels } = info;
  try {
    await createOwnedContainer(deps, {
      name,
      image: deps.baseImage,
      owner: labels[LABELS.session] ?? sandbox,
      repo: labels[LABELS.repo] ?? '',
      expiresAt: labels[LABELS.expires] ?? new Date(Date.now() + 60 * 60_000).toISOString(),
      limits: BROWSER_LIMITS,
      mounts: [{ source: await toolchainsOf(deps).helpers(), target: HELPERS_MOUNT }],
      companionOf: sandbox,
    });
    return await work(sandboxOf(deps.sandboxes, name));
  } finally {
    await deps.sandboxes.destroy(name);
    await rm(egressDirOf(deps.egressRoot, name), { recursive: true, force: true });
  }
}

/** What verification needs: the sandbox, a browser container beside it, the artifact store. */
export type VerifyDeps = ContainerDeps &
  Pick<SandboxDeps, 'baseImage' | 'toolsRoot' | 'egressRoot' | 'artifacts' | 'redactor' | 'log'>;

export function createVerifyActivities(deps: VerifyDeps) {
  const { sandboxes, artifacts, log, redactor } = deps;

  return inSandbox({
    /**
     * Starts the app in the sandbox and waits until its URL answers (the
     * helper, in the sandbox), then drives Chromium through the checks in a
     * drydock-owned browser container that joins the sandbox's network
     * namespace: the app is on its loopback, and the sandbox image needs
     * neither Node.js nor Chromium. Screenshots and the app's log are copied
     * out to the artifact store; the browser container is removed.
     */
    async verifyInBrowser(input: {
      sandbox: string;
      sessionId: string;
      browser: BrowserCheck;
      readyTimeoutMs: number;
    }) {
      const { sessionId, browser } = input;
      const sandbox = sandboxOf(sandboxes, input.sandbox);
      const outDir = `${STATE_DIR}/browser`;
      const started = Date.now();
      const pid = await startApp(sandbox, browser.start, outDir);
      // Nothing the sandbox user prepared steers node's module loading (the runner loads by absolute path).
      const cleanNode = (home: string) => ({ env: ['NODE_PATH=', 'NODE_OPTIONS=', `HOME=${home}`] });
      const ready = await sandbox.commands.exec(
        [
          HELPER.browser,
          JSON.stringify({ phase: 'ready', url: browser.url, pid, readyTimeoutMs: input.readyTimeoutMs }),
        ],
        cleanNode(outDir),
      );
      let raw = runnerResult(ready);
      const copies: { file: string; ref: string }[] = [];
      if (raw.outcome === 'passed') {
        const browsed = await inBrowserContainer(deps, input.sandbox, async (container) => {
          const run = await container.commands.exec(
            [HELPER.browser, JSON.stringify({ ...browser, phase: 'browse', outDir: BROWSER_OUT })],
            cleanNode(BROWSER_OUT),
          );
          const result = runnerResult(run);
          const files = [
            ...result.checks.map((c) => c.screenshot),
            ...(result.screenshots as { file?: string }[]).map((s) => s.file),
          ];
          for (const file of files.filter((f): f is string => Boolean(f))) {
            const ref = await artifacts.put(sessionId, `browser/${file.split('/').pop()}`, '');
            // Straight to the artifact store on disk, never whole in memory.
            const cap = { ...OUTPUT_CAPS.screenshot, what: `the screenshot ${file}` };
            await container.files.readToFile(file, artifacts.pathOf(ref), cap);
            copies.push({ file, ref });
          }
          return result;
        });
        raw = browsed;
      }
      raw = redactor.value(raw);
      raw.consoleErrors = boundMessages(raw.consoleErrors);
      raw.failedRequests = boundMessages(raw.failedRequests);
      // The app, and whatever it started: nothing of it runs on while the change is exported.
      await endStrayProcesses(sandbox);
      const copied = (file: string) => copies.find((c) => c.file === file)?.ref ?? file;
      for (const check of raw.checks) {
        if (check.screenshot) check.screenshot = copied(check.screenshot);
      }
      const screenshots = (raw.screenshots as { path: string; file?: string; message?: string }[]).map(
        ({ file, ...rest }) => (file ? { ...rest, screenshot: copied(file) } : rest),
      );
      const appLog = await redactor.large(await appLogEnd(sandbox, `${outDir}/app.log`));
      const result: BrowserResult = {
        ...raw,
        url: browser.url,
        screenshots,
        appLogTail: tail(appLog, 1_000),
        appLog: await artifacts.put(sessionId, 'browser/app.log', appLog),
        durationMs: Date.now() - started,
      };
      log.info({ sessionId, sandboxId: input.sandbox, outcome: result.outcome }, 'browser verification');
      return result;
    },
  });
}

/** The end of the app's log, at most OUTPUT_CAPS.appLog of it; a cut start is said so. */
async function appLogEnd(sandbox: SandboxHandle, file: string): Promise<string> {
  const { bytes, what } = OUTPUT_CAPS.appLog;
  const { size, text: kept } = await sandbox.files.tail(file, bytes);
  return size > bytes
    ? `[${what} is over ${bytes / 1024 ** 2} MiB: its first ${size - bytes} bytes are not kept]\n${kept}`
    : kept;
}
