/**
 * Verification's side in the sandbox: the JUnit reports a test step wrote,
 * read back and parsed; and the browser check, which starts the app in the
 * sandbox and drives Chromium from a companion container in its network
 * namespace.
 */
import { ApplicationFailure } from '@temporalio/common';
import { rm } from 'node:fs/promises';
import { junitCases } from '../../review/test-cases';
import { egressDirOf } from '../egress';
import { ErrorType, type BrowserResult, type TestReport } from '../../workflows/api';
import type { BrowserCheck } from '../../workflows/input';
import { APP_LOG_IN_SANDBOX } from '../../workflows/rules/verification';
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
import { stopAgentApp } from './agent-app';
import { toolchainsOf } from './environment';
import { OUTPUT_CAPS, tail } from './output';
import { DESKTOP_DISPLAY, desktopShown } from '../desktop';

/** Report files the usual test runners write (jest-junit, surefire, gradle, pytest --junitxml, ...). */
const USUAL_JUNIT_FILE =
  /(^|\/)(junit[^/]*|TEST-[^/]*|[^/]*results?[^/]*)\.xml$|\/(test-results|test-reports|surefire-reports)\//i;

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
  for (const { file, content } of documents) {
    const cases = junitCases(content);
    if (!cases) continue;
    report.files.push(file);
    for (const c of cases) {
      report.total++;
      report[c.outcome]++;
      if (c.outcome === 'failed' && report.failures.length < MAX_FAILURES) {
        report.failures.push({ name: c.name, message: c.message ?? '', ...c.place });
      }
    }
  }
  return report;
}

/** Of the XML files a test step wrote (drydock-run lists them), those in the usual places of reports. */
export const usualReports = (written: string[]): string[] => written.filter((f) => USUAL_JUNIT_FILE.test(`/${f}`));

/**
 * The JUnit XML of a test step in `files` (the given ones, or usualReports of
 * what it wrote); scrubbed, and kept in the artifact store. Called by runStep
 * once the step's result is known.
 */
export async function readJUnitResults(
  { sandboxes, artifacts, redactor }: Pick<SandboxDeps, 'sandboxes' | 'artifacts' | 'redactor'>,
  input: { sandbox: string; sessionId: string; files: string[] },
): Promise<TestReport | undefined> {
  const sandbox = sandboxOf(sandboxes, input.sandbox);
  const documents = [];
  for (const file of input.files) {
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
/** The check's copy of the desktop's X authority, in its container's own /tmp (sandbox/desktop.ts XAUTH_FILE). */
const CHECK_XAUTH = '/tmp/drydock-check.xauth';
/** Limits of a browser container: Chromium with one page. */
const BROWSER_LIMITS = {
  cpus: 1,
  memoryBytes: 1536 * 1024 ** 2,
  pids: 512,
  tmpBytes: 256 * 1024 ** 2,
  diskBytes: 1024 ** 3,
};

/** The workspace's state, one line per changed or untracked file. */
const STATUS = 'git status --porcelain=v1 --untracked-files=all';

/** Keeps the workspace's state in $1 (before the app runs on the base). */
const KEEP_STATUS: ShellScript = {
  name: 'keep-status',
  text: `mkdir -p "$(dirname "$1")"; cd /workspace && ${STATUS} >"$1"`,
};

/**
 * Undoes what the app changed in the workspace since KEEP_STATUS ($1): files
 * it added are removed, tracked files it changed are restored (names git
 * would quote are left: the change shows them to the reviewer).
 */
const UNDO_APP_WRITES: ShellScript = {
  name: 'undo-app-writes',
  text: [
    'cd /workspace || exit 0',
    `${STATUS} | grep -vxF -f "$1" | while IFS= read -r line; do`,
    '  p=${line#???}',
    '  case "$line" in "??"*) rm -rf -- "$p" ;; *) git checkout -q -- "$p" 2>/dev/null || true ;; esac',
    'done; true',
  ].join('\n'),
};

/** Starts the app ($1) with its pid in $2 and its log in $3; a retry finds the app it started instead of starting a second one. */
const START_APP: ShellScript = {
  name: 'start-app',
  text:
    'mkdir -p "$2"; if [ -f "$2/app.pid" ] && kill -0 "$(cat "$2/app.pid")" 2>/dev/null; then cat "$2/app.pid"; ' +
    'else cd /workspace && nohup sh -c "$1" >"$3" 2>&1 </dev/null & echo $! | tee "$2/app.pid"; fi',
};

/** Starts the app in the sandbox, its output in APP_LOG_IN_SANDBOX; returns its pid. */
async function startApp(sandbox: SandboxHandle, start: string, outDir: string): Promise<number> {
  return Number((await sandbox.commands.runScript(START_APP, [start, outDir, APP_LOG_IN_SANDBOX])).trim());
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
      /** Names this run's artifacts (browser/<label>/…): "before" the agent's change, or the round's. */
      label?: string;
      /** Record a video of the check (Playwright's, within OUTPUT_CAPS.video). */
      video?: boolean;
    }) {
      const { sessionId, browser } = input;
      // repoPolicy settled both: the check's own, else the repo's app's.
      if (!browser.start || !browser.url)
        throw ApplicationFailure.nonRetryable('verify.browser: no start or url', ErrorType.InvalidSessionInput);
      const label = input.label ?? 'after';
      const sandbox = sandboxOf(sandboxes, input.sandbox);
      // The app kept for the agent holds its port: the check starts the app its own way (the check's start command).
      await stopAgentApp(deps, input.sandbox);
      const outDir = `${STATE_DIR}/browser`;
      const started = Date.now();
      // Before the agent's change, the workspace is the session's to be: what the app writes there is undone.
      if (label === 'before') await sandbox.commands.runScript(KEEP_STATUS, [`${outDir}.status`]);
      const pid = await startApp(sandbox, browser.start, outDir);
      const url = browser.url;
      // Nothing the sandbox user prepared steers node's module loading (the runner loads by absolute path).
      const cleanNode = (home: string) => ({ env: ['NODE_PATH=', 'NODE_OPTIONS=', `HOME=${home}`] });
      const ready = await sandbox.commands.exec(
        [HELPER.browser, JSON.stringify({ phase: 'ready', url, pid, readyTimeoutMs: input.readyTimeoutMs })],
        cleanNode(outDir),
      );
      let raw = runnerResult(ready);
      const copies: { file: string; ref: string }[] = [];
      if (raw.outcome === 'passed') {
        // A person watching the sandbox's desktop sees the check: its Chromium draws on that display
        // (not under gVisor, whose browser container has a kernel of its own: no X socket of the desktop's).
        // It presents the display's cookie (Xvnc takes no client without it), in a file of its own /tmp.
        const xauth = deps.runtime?.startsWith('runsc') ? undefined : await desktopShown(sandboxes, input.sandbox);
        const display = xauth ? DESKTOP_DISPLAY : undefined;
        const browsed = await inBrowserContainer(deps, input.sandbox, async (container) => {
          const spec = { ...browser, phase: 'browse', outDir: BROWSER_OUT, video: input.video, display };
          const env = cleanNode(BROWSER_OUT);
          if (xauth) {
            await container.commands.exec(['sh', '-c', `umask 077; cat >${CHECK_XAUTH}`], { stdin: xauth });
            env.env.push(`DISPLAY=${display}`, `XAUTHORITY=${CHECK_XAUTH}`);
          }
          const run = await container.commands.exec([HELPER.browser, JSON.stringify(spec)], env);
          const result = runnerResult(run);
          const files = [
            ...result.checks.map((c) => c.screenshot),
            ...(result.screenshots as { file?: string }[]).map((s) => s.file),
            result.video,
          ];
          for (const file of files.filter((f): f is string => Boolean(f))) {
            const video = file === result.video;
            const ref = await artifacts.put(
              sessionId,
              `browser/${label}/${video ? 'video.webm' : file.split('/').pop()}`,
              '',
            );
            // Straight to the artifact store on disk, never whole in memory.
            const cap = video ? OUTPUT_CAPS.video : { ...OUTPUT_CAPS.screenshot, what: `the screenshot ${file}` };
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
      if (label === 'before') await sandbox.commands.runScript(UNDO_APP_WRITES, [`${outDir}.status`]);
      const copied = (file: string) => copies.find((c) => c.file === file)?.ref ?? file;
      if (raw.video) raw.video = copied(raw.video);
      for (const check of raw.checks) {
        if (check.screenshot) check.screenshot = copied(check.screenshot);
      }
      const screenshots = (raw.screenshots as { path: string; file?: string; message?: string }[]).map(
        ({ file, ...rest }) => (file ? { ...rest, screenshot: copied(file) } : rest),
      );
      const appLog = await redactor.large(await appLogEnd(sandbox, APP_LOG_IN_SANDBOX));
      const result: BrowserResult = {
        ...raw,
        url,
        screenshots,
        appLogTail: tail(appLog, 1_000),
        appLog: await artifacts.put(sessionId, `browser/${label}/app.log`, appLog),
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
