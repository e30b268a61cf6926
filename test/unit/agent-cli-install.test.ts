/**
 * An agent CLI's install runs its package's lifecycle scripts (real npm, a
 * local package): they get none of the worker's credentials, and when the
 * worker is root they run as nobody, so the worker's /proc, root's files and
 * the worker's data dir (0700) are out of their reach; what they made is
 * root's afterwards. A CLI that needs no script installs with none run.
 */
import { execFileSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readFile, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { installOutside, npmInstall } from '../../models/agent-clis';
import { ownDataDir } from '../../platform/data-dir';
import { AGENT_CLIS } from '../../workflows/rules/agent-clis';

const TOKEN = 'ghp_workertoken0123456789abcdefghijklmnop';
let dir: string;
let tarball: string;
let dataDir: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'drydock-cli-install-'));
  await chmod(dir, 0o755);
  // The data dir as an older drydock left it: world-readable, a mirror's file in it.
  dataDir = path.join(dir, 'data');
  await mkdir(path.join(dataDir, 'mirrors'), { recursive: true, mode: 0o755 });
  await chmod(dataDir, 0o755);
  await writeFile(path.join(dataDir, 'mirrors', 'secret'), 'mirror-content', { mode: 0o644 });
  const pkg = path.join(dir, 'pkg');
  await mkdir(pkg, { mode: 0o755 });
  // What a hostile postinstall would take: its environment, the worker's environment, a root-only file.
  const script = [
    'id -u > "$INIT_CWD/seen-uid"',
    'env > "$INIT_CWD/seen-env"',
    `cat /proc/${process.pid}/environ > "$INIT_CWD/seen-worker-env" 2>/dev/null || true`,
    `cat ${dataDir}/mirrors/secret > "$INIT_CWD/seen-data" 2>/dev/null || true`,
  ].join('; ');
  await writeFile(
    path.join(pkg, 'package.json'),
    JSON.stringify({ name: 'hostile-cli', version: '1.0.0', scripts: { postinstall: script } }),
  );
  tarball = path.join(pkg, execFileSync('npm', ['pack', '--silent'], { cwd: pkg, encoding: 'utf8' }).trim());
  await chmod(tarball, 0o644);
});

test("the package's scripts run without the worker's credentials, as nobody when the worker is root", async () => {
  const folder = path.join(dir, 'install');
  await mkdir(folder);
  await writeFile(path.join(folder, 'package.json'), JSON.stringify({ private: true }));
  process.env.GITHUB_TOKEN = TOKEN;
  process.env.DRYDOCK_DATABASE_URL = 'postgres://drydock:db-password@db/drydock';
  try {
    await npmInstall(folder, tarball, () => undefined);
  } finally {
    delete process.env.GITHUB_TOKEN;
    delete process.env.DRYDOCK_DATABASE_URL;
  }
  const seen = await readFile(path.join(folder, 'seen-env'), 'utf8');
  expect(seen).not.toContain(TOKEN);
  expect(seen).not.toContain('db-password');
  expect(seen).toMatch(/^PATH=/m);
  const root = process.getuid?.() === 0;
  expect((await readFile(path.join(folder, 'seen-uid'), 'utf8')).trim()).toBe(
    root ? '65534' : String(process.getuid?.()),
  );
  if (root) {
    expect(await readFile(path.join(folder, 'seen-worker-env'), 'utf8')).toBe('');
    expect((await stat(path.join(folder, 'node_modules', 'hostile-cli', 'package.json'))).uid).toBe(0);
  }
});

test("the worker's data dir is its owner's only, so an install script run as nobody reads none of it", async () => {
  await ownDataDir(dataDir);
  expect((await stat(dataDir)).mode & 0o777).toBe(0o700);
  const folder = path.join(dir, 'install-data');
  await mkdir(folder);
  await writeFile(path.join(folder, 'package.json'), JSON.stringify({ private: true }));
  await npmInstall(folder, tarball, () => undefined);
  // As root the script ran as nobody: the mirror is out of its reach. Otherwise it is the owner's own script.
  if (process.getuid?.() === 0) expect(await readFile(path.join(folder, 'seen-data'), 'utf8')).toBe('');
});

test('a CLI that needs no lifecycle script is installed with none run (--ignore-scripts)', async () => {
  expect(AGENT_CLIS.codex.installScripts).toBe(false);
  const folder = path.join(dir, 'install-no-scripts');
  await mkdir(folder);
  await writeFile(path.join(folder, 'package.json'), JSON.stringify({ private: true }));
  await npmInstall(folder, tarball, () => undefined, { scripts: false });
  expect((await stat(path.join(folder, 'node_modules', 'hostile-cli', 'package.json'))).isFile()).toBe(true);
  await expect(stat(path.join(folder, 'seen-uid'))).rejects.toThrow(/ENOENT/);
});

test('an agents dir inside the 0700 data dir still takes installs: they are made outside it, then copied in', async () => {
  await ownDataDir(dataDir);
  const scratch = path.join(dataDir, 'agents', 'hostile-cli@1.0.0.partial-1');
  await mkdir(path.dirname(scratch), { recursive: true });
  await installOutside(scratch, tarball, true, () => undefined);
  const installed = path.join(scratch, 'node_modules', 'hostile-cli', 'package.json');
  expect(JSON.parse(await readFile(installed, 'utf8'))).toMatchObject({ name: 'hostile-cli' });
  const root = process.getuid?.() === 0;
  expect((await readFile(path.join(scratch, 'seen-uid'), 'utf8')).trim()).toBe(
    root ? '65534' : String(process.getuid?.()),
  );
  if (root) expect((await stat(installed)).uid).toBe(0);
});
