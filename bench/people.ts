/**
 * bench/people: the ways in for people, from opening to the first answer
 * (issue 48), median of RUNS runs, beside the floor, with no browser (the
 * click to the first output in a real Chromium is printed by
 * test/e2e/web-terminal.test.ts, the desktop's by bench/desktop.ts):
 *   terminal floor    `docker exec -i <sandbox> sh -c 'echo ready'`: the first byte of its output
 *   terminal drydock  DockerProvider.shell (the console terminal's shell: a TTY, drydock's
 *                     startup script and prompt), `echo ready` typed, until it is echoed back
 *   editor floor      code-server (infra/code-server.sh) started by hand in the same image from
 *                     its read-only mount, until VS Code's workbench page answers on the loopback
 * The console's editor is not built yet (docs/desktop.md), so the editor has its floor alone.
 *
 *   npx tsx bench/people.ts          RUNS=3
 */
import { execFile, spawn } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { DockerProvider } from '../sandbox';
import { baseImageTag } from '../sandbox-images/base-image';
import { benchMain } from './stack';
import { fmt, median, runsFromEnv, say, timingTable, type Row } from './table';

const run = promisify(execFile);
const RUNS = runsFromEnv(3);
const EDITOR_MOUNT = '/opt/drydock-editor';

async function terminalFloor(sandbox: string): Promise<number> {
  const t = performance.now();
  await new Promise<void>((resolve, reject) => {
    const child = spawn('docker', ['exec', '-i', sandbox, 'sh', '-c', 'echo ready'], { stdio: 'pipe' });
    child.stdout.once('data', () => resolve());
    child.on('error', reject);
  });
  return performance.now() - t;
}

async function terminalDrydock(provider: DockerProvider, sandbox: string): Promise<number> {
  const t = performance.now();
  const shell = await provider.shell(sandbox, { cols: 80, rows: 24 });
  await new Promise<void>((resolve) => {
    let seen = '';
    shell.stream.on('data', (chunk: Buffer) => {
      seen += chunk.toString();
      if (/ready\r?\n[^]*ready/.test(seen) || /\nready/.test(seen)) resolve();
    });
    shell.stream.write('echo ready\n');
  });
  const ms = performance.now() - t;
  shell.stream.end();
  return ms;
}

const ASK_WORKBENCH = `(async () => {
  for (;;) {
    try { const r = await fetch('http://127.0.0.1:8099/?folder=/tmp'); if (/workbench/.test(await r.text())) return; } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
})();`;

async function editorFloor(sandbox: string): Promise<number> {
  const t = performance.now();
  await run('docker', [
    'exec', '-d', '-e', 'HOME=/tmp', sandbox, `${EDITOR_MOUNT}/bin/code-server`, '--auth', 'none',
    '--bind-addr', '127.0.0.1:8099', '--disable-telemetry', '--disable-update-check', '/tmp',
  ]); // prettier-ignore
  await run('docker', ['exec', sandbox, `${EDITOR_MOUNT}/lib/node`, '-e', ASK_WORKBENCH]);
  const ms = performance.now() - t;
  await run('docker', ['exec', sandbox, 'sh', '-c', 'pkill -f entry.js; sleep 0.5']).catch(() => undefined);
  return ms;
}

async function main(): Promise<string> {
  const image = process.env.DRYDOCK_BASE_IMAGE ?? (await baseImageTag());
  const { stdout } = await run('bash', [path.join(__dirname, '../infra/code-server.sh')], { maxBuffer: 16 << 20 });
  const editorDir = stdout.trim();
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-bench-people-'));
  const provider = new DockerProvider(undefined, path.join(dir, 'storage'));
  const sandbox = `drydock-bench-people-${process.pid}`;
  await run('docker', [
    'run', '-d', '--name', sandbox, '--network', 'none', '--user', '1000:1000', '--read-only', '--tmpfs', '/tmp:exec',
    '--tmpfs', '/workspace:uid=1000', '-v', `${editorDir}:${EDITOR_MOUNT}:ro`, '--entrypoint', 'sleep', image, 'infinity',
  ]); // prettier-ignore
  const rows: Row[] = [
    { name: 'terminal floor: docker exec sh, first output', ms: [] },
    { name: 'terminal drydock: the console shell, `echo ready` echoed', ms: [] },
    { name: 'editor floor: code-server by hand, workbench page', ms: [] },
  ];
  try {
    for (let r = 0; r < RUNS; r++) {
      rows[0].ms.push(await terminalFloor(sandbox));
      rows[1].ms.push(await terminalDrydock(provider, sandbox));
      rows[2].ms.push(await editorFloor(sandbox));
      say(`run ${r + 1}/${RUNS}: ${rows.map((row) => fmt(row.ms[r])).join(', ')}`);
    }
  } finally {
    await run('docker', ['rm', '-f', sandbox]).catch(() => undefined);
  }
  const ratio = median(rows[1].ms) / median(rows[0].ms);
  return [
    timingTable(rows),
    '',
    `terminal: drydock / floor (to the first answer) ${ratio.toFixed(2)} ×; the editor: its floor only ` +
      '(the console editor is not built yet).',
  ].join('\n');
}

benchMain('bench/people', main);
