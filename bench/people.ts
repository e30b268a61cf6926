/**
 * bench/people: from the click on a session's page to each way in for people
 * (issue 48), in a real Chromium through `drydock serve`, beside its floor,
 * median of RUNS runs:
 *   terminal  click "Open a terminal here" until the shell's prompt shows in xterm (interactive);
 *             floor: `docker exec -i <sandbox> sh -c 'echo ready'`, its first output
 *   VS Code   click "VS Code", then "Open VS Code" once it is ready, until README.md is listed in
 *             VS Code's Explorer (the workbench loaded, the workspace read);
 *             floor: code-server started by hand (`docker exec -d`, drydock's flags) from the same
 *             read-only mount in a container of the sandbox's own image, on the host's loopback
 *             (`--network host`: the floor has no forwarding), the same Chromium opening it until
 *             README.md is listed
 *   desktop   click "the desktop" until noVNC's canvas has drawn its first frame;
 *             floor: bench/desktop.ts's (`docker run` in the sandbox's network namespace, Xvnc by
 *             hand, a VNC client's first frame), with no browser
 * Each run is a session of its own at its gate (a fresh sandbox: no editor, no desktop yet); the
 * desktop's image is built before the first run. Also the editor's memory in the sandbox once loaded.
 *
 *   npx tsx bench/people.ts          RUNS=3
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Browser, Page } from 'playwright-core';
import type { Client } from '@temporalio/client';
import { createLogger } from '../platform/log';
import { ensureDesktopImage } from '../sandbox-images/desktop-image';
import { endSessions, inPhase, makeFixtureRepo, startSession, waitForStatus } from '../test/support/helpers';
import { launchChromium, signedIn } from '../test/support/console-browser';
import { personalTokens } from '../test/support/identity';
import { startServer } from '../workers/serve';
import { desktopFloor } from './desktop';
import { atExit, benchMain, freePort, startStack, tempDir } from './stack';
import { fmt, markdownTable, median, runsFromEnv, say, timingTable, type Row } from './table';

const run = promisify(execFile);
const RUNS = runsFromEnv(3);
const EDITOR_MOUNT = '/opt/drydock-editor';
const REPO = 'acme/fixture';
/** The longest any one way in may take before the run fails (ms). */
const WAIT_MS = 240_000;

async function terminalFloor(sandbox: string): Promise<number> {
  const t = performance.now();
  await new Promise<void>((resolve, reject) => {
    const child = spawn('docker', ['exec', '-i', sandbox, 'sh', '-c', 'echo ready'], { stdio: 'pipe' });
    child.stdout.once('data', () => resolve());
    child.on('error', reject);
  });
  return performance.now() - t;
}

/** VS Code's Explorer listing README.md: the workbench loaded and the workspace read. */
const explorerLists = (code: Page) =>
  code.locator('.explorer-folders-view .monaco-list-row', { hasText: 'README.md' }).waitFor({ timeout: WAIT_MS });

async function editorFloor(browser: Browser, image: string, editorDir: string): Promise<number> {
  const name = `drydock-bench-editor-floor-${process.pid}`;
  const port = await freePort();
  await run('docker', [
    'run', '-d', '--name', name, '--network', 'host', '--user', '1000:1000', '--read-only', '--tmpfs', '/tmp:exec',
    '-v', `${editorDir}:${EDITOR_MOUNT}:ro`, '--entrypoint', 'sleep', image, 'infinity',
  ]); // prettier-ignore
  const page = await browser.newPage();
  try {
    await run('docker', [
      'exec',
      name,
      'sh',
      '-c',
      'mkdir -p /tmp/ws /tmp/e && printf "# fixture\\n" >/tmp/ws/README.md',
    ]);
    const t = performance.now();
    await run('docker', [
      'exec', '-d', '-e', 'HOME=/tmp/e', name, `${EDITOR_MOUNT}/bin/code-server`, '--auth', 'none',
      '--bind-addr', `127.0.0.1:${port}`, '--disable-telemetry', '--disable-update-check', '--disable-workspace-trust',
      '--disable-getting-started-override', '--user-data-dir', '/tmp/e/data', '--extensions-dir', '/tmp/e/ext', '/tmp/ws',
    ]); // prettier-ignore
    for (const until = Date.now() + WAIT_MS; ;) {
      const answered = await page.goto(`http://127.0.0.1:${port}/?folder=/tmp/ws`).catch(() => undefined);
      if (answered?.ok()) break;
      if (Date.now() > until) throw new Error('code-server started by hand never answered');
      await new Promise((r) => setTimeout(r, 100));
    }
    await explorerLists(page);
    return performance.now() - t;
  } finally {
    await page.context().close();
    await run('docker', ['rm', '-f', name]).catch(() => undefined);
  }
}

/** The resident memory of the editor's processes in the sandbox (MiB; shared pages counted in each). */
async function editorMemory(sandbox: string): Promise<number> {
  const { stdout } = await run('docker', [
    'exec', sandbox, 'sh', '-c',
    `for p in /proc/[0-9]*; do case "$(tr '\\0' ' ' <$p/cmdline 2>/dev/null)" in *${EDITOR_MOUNT}/*) ` +
      `grep VmRSS $p/status;; esac; done`,
  ]); // prettier-ignore
  const kib = [...stdout.matchAll(/VmRSS:\s+(\d+)/g)].reduce((sum, m) => sum + Number(m[1]), 0);
  return kib / 1024;
}

/** Whether noVNC's canvas has drawn anything yet. */
const canvasDrawn = (page: Page) =>
  page.evaluate(() => {
    const canvas = document.querySelector<HTMLCanvasElement>('#desktop canvas');
    if (!canvas || canvas.width < 2) return false;
    const data = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height).data;
    for (let i = 3; i < data.length; i += 4 * 7) if (data[i] !== 0) return true;
    return false;
  });

async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  for (const end = Date.now() + WAIT_MS; !(await check());) {
    if (Date.now() > end) throw new Error(`never: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface Setup {
  client: Client;
  taskQueue: string;
  url: string;
  token: string;
  repoUrl: string;
  browser: Browser;
  editorDir: string;
  desktopImage: string;
  sessions: string[];
}

type Way = 'terminal' | 'editor' | 'desktop';
type RunResult = Record<Way, { floor: number; drydock: number }> & { editorMiB: number };

/** One session at its gate; the desktop (no takeover), then the terminal (an edit: a new gate), then VS Code. */
async function oneRun(s: Setup): Promise<RunResult> {
  const id = `bench-people-${randomBytes(3).toString('hex')}`;
  s.sessions.push(id);
  const handle = await startSession({ client: s.client, config: { DRYDOCK_TASK_QUEUE: s.taskQueue } }, id, {
    repo: { url: s.repoUrl },
    task: 'greet in the README',
    requestedBy: 'alice',
    agent: { steps: [{ run: 'echo hello >> README.md' }] },
    verify: { test: 'sh check.sh' },
    approval: { required: ['push'], approvers: ['alice'] },
  });
  const gate = await waitForStatus(handle, inPhase('awaiting_approval'), 300_000);
  const sandbox = gate.sandbox!.name;
  const { stdout: image } = await run('docker', ['inspect', '-f', '{{.Config.Image}}', sandbox]);
  const page = await signedIn(s.browser, s.url, s.token, { width: 1400, height: 1100 });
  const fromClick = async (link: string, loaded: () => Promise<unknown>) => {
    await page.goto(`${s.url}/sessions/${encodeURIComponent(id)}`);
    const t = performance.now();
    await page.click(link);
    await loaded();
    return performance.now() - t;
  };
  try {
    const desktop = {
      floor: await desktopFloor(sandbox, s.desktopImage),
      drydock: await fromClick('#open-desktop', () => until('a desktop frame', () => canvasDrawn(page))),
    };
    const terminalFloorMs = await terminalFloor(sandbox);
    const rows = () => page.locator('.xterm-rows').innerText();
    const terminalMs = await fromClick('#open-terminal', () =>
      until('the prompt', async () => /\/workspace\$ /.test((await rows()).replace(/\u00a0/g, ' '))),
    );
    await page.keyboard.type('echo bench >> bench.txt');
    await page.keyboard.press('Enter');
    await page.click('#detach');
    await page.locator('#terminal-state', { hasText: /detached after/ }).waitFor({ timeout: WAIT_MS });
    const changed = (x: typeof gate) =>
      x.pendingApproval !== undefined && x.pendingApproval.change !== gate.pendingApproval!.change;
    await waitForStatus(handle, changed, 300_000);
    const editorFloorMs = await editorFloor(s.browser, image.trim(), s.editorDir);
    let code: Page | undefined;
    const editorMs = await fromClick('#open-editor', async () => {
      await page.locator('#editor-state', { hasText: 'ready' }).waitFor({ timeout: WAIT_MS });
      [code] = await Promise.all([page.context().waitForEvent('page'), page.click('#open-editor-window')]);
      await explorerLists(code);
    });
    const editorMiB = await editorMemory(sandbox);
    await code?.close();
    await page.click('#detach');
    await page.locator('#editor-state', { hasText: /detached/ }).waitFor({ timeout: WAIT_MS });
    return {
      desktop,
      terminal: { floor: terminalFloorMs, drydock: terminalMs },
      editor: { floor: editorFloorMs, drydock: editorMs },
      editorMiB,
    };
  } finally {
    await page.context().close();
  }
}

async function setUp(): Promise<Setup> {
  const { stdout } = await run('bash', [path.join(__dirname, '../infra/code-server.sh')], { maxBuffer: 16 << 20 });
  const editorDir = stdout.trim().split('\n').pop()!;
  // serve and the worker in one process share the database: PostgreSQL, not the embedded PGlite.
  const stack = await startStack({ database: 'postgres', config: { DRYDOCK_EDITOR_DIR: editorDir } });
  const desktopImage = await ensureDesktopImage(stack.image, say);
  const repo = await makeFixtureRepo();
  const identities = path.join(await tempDir('people'), 'identities.yaml');
  await writeFile(identities, `people:\n  alice: {}\nroles:\n  ${REPO}:\n    approver: alice\n`);
  process.env.DATABASE_URL = stack.config.DATABASE_URL;
  const { alice } = await personalTokens('alice');
  const config = {
    ...stack.config,
    DRYDOCK_HTTP_HOST: '127.0.0.1',
    DRYDOCK_HTTP_PORT: 0,
    DRYDOCK_IDENTITIES_FILE: identities,
    DRYDOCK_REPOS: [`${REPO}=${repo.url}`],
  };
  const server = await startServer({ config, client: stack.client, log: createLogger('warn') });
  atExit(() => server.close());
  const browser = await launchChromium();
  atExit(() => browser.close());
  const sessions: string[] = [];
  atExit(() => endSessions(stack.client, sessions)); // before the worker stops: their sandboxes are torn down
  return {
    client: stack.client,
    taskQueue: stack.taskQueue,
    url: server.url,
    token: alice,
    repoUrl: repo.url,
    browser,
    editorDir,
    desktopImage,
    sessions,
  };
}

async function main(): Promise<string> {
  const setup = await setUp();
  const names: Record<Way, [string, string]> = {
    terminal: ['docker exec sh, first output', 'click → the prompt in xterm'],
    editor: ['code-server by hand, Chromium → README.md in the Explorer', 'click → README.md in VS Code’s Explorer'],
    desktop: ['Xvnc by hand, first frame (no browser)', 'click → first frame in noVNC'],
  };
  const ways: Way[] = ['terminal', 'editor', 'desktop'];
  const rowsOf = (w: Way): { floor: Row; drydock: Row } => ({
    floor: { name: `${w} floor: ${names[w][0]}`, ms: [] },
    drydock: { name: `${w} drydock: ${names[w][1]}`, ms: [] },
  });
  const rows: Record<Way, { floor: Row; drydock: Row }> = {
    terminal: rowsOf('terminal'),
    editor: rowsOf('editor'),
    desktop: rowsOf('desktop'),
  };
  const memory: number[] = [];
  for (let r = 0; r < RUNS; r++) {
    const result = await oneRun(setup);
    for (const w of ways) {
      rows[w].floor.ms.push(result[w].floor);
      rows[w].drydock.ms.push(result[w].drydock);
    }
    memory.push(result.editorMiB);
    say(
      `run ${r + 1}/${RUNS}: ${ways.map((w) => `${w} ${fmt(result[w].floor)} / ${fmt(result[w].drydock)}`).join(', ')}`,
    );
  }
  return [
    timingTable(ways.flatMap((w) => [rows[w].floor, rows[w].drydock])),
    '',
    markdownTable(
      ['way in', 'floor', 'drydock, from the click', 'drydock / floor'],
      ways.map((w) => {
        const [floor, drydock] = [median(rows[w].floor.ms), median(rows[w].drydock.ms)];
        return [w, fmt(floor), fmt(drydock), `${(drydock / floor).toFixed(2)} ×`];
      }),
      [1, 2, 3],
    ),
    '',
    `The editor's processes in the sandbox once VS Code is loaded (resident memory, shared pages counted in each): ` +
      `${memory.map((m) => `${m.toFixed(0)} MiB`).join(', ')}.`,
  ].join('\n');
}

benchMain('bench/people', main);
