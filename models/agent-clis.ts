/**
 * The host's cache of agent CLIs: each pinned package version installed once
 * per host with the host's npm (through its registry) into
 * `<root>/<pkg>@<version>`, which every sandbox sees read-only at
 * /opt/drydock-agents. An install is made under the temp dir, copied to a
 * scratch folder beside its place and renamed into place when complete, so
 * a sandbox never sees half a CLI and a crash mid-install only leaves
 * scratch behind. Concurrent installs of the
 * same version (two sessions, two workers of one host) take turns on a lock
 * folder; the second finds the first's result.
 */
import { spawn } from 'node:child_process';
import { access, chmod, cp, mkdir, mkdtemp, rename, rm, stat, writeFile, constants } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { agentCliFolder, AGENT_CLIS, type AgentCliName } from '../workflows/rules/agent-clis';

export interface InstallProgress {
  (line: string): void;
}

/** A lock older than this is from a dead installer and is taken over. */
const STALE_LOCK_MS = 15 * 60_000;

/** The installed binary's host path, installing the version first when this host has not got it. */
export async function ensureAgentCli(
  root: string,
  name: AgentCliName,
  version: string,
  progress: InstallProgress = () => undefined,
): Promise<{ folder: string; installed: boolean }> {
  const spec = AGENT_CLIS[name];
  const folder = agentCliFolder(spec.pkg, version);
  const target = path.join(root, folder);
  const binary = path.join(target, spec.bin[process.arch === 'arm64' ? 'arm64' : 'x64']);
  if (await executable(binary)) return { folder, installed: false };
  await mkdir(root, { recursive: true });
  const lock = `${target}.lock`;
  await takeLock(lock, progress);
  try {
    if (await executable(binary)) return { folder, installed: false };
    const scratch = `${target}.partial-${process.pid}`;
    await rm(scratch, { recursive: true, force: true });
    progress(`installing ${spec.pkg}@${version} into ${target}`);
    await installOutside(scratch, `${spec.pkg}@${version}`, spec.installScripts, progress);
    if (!(await executable(path.join(scratch, spec.bin[process.arch === 'arm64' ? 'arm64' : 'x64'])))) {
      throw new Error(`${spec.pkg}@${version} installed, but its native binary ${spec.bin.x64} is missing`);
    }
    await rm(target, { recursive: true, force: true });
    await rename(scratch, target);
    progress(`installed ${spec.pkg}@${version}`);
    return { folder, installed: true };
  } finally {
    await rm(lock, { recursive: true, force: true });
  }
}

/**
 * Installs into a folder of its own under the system's temp dir (which nobody
 * can reach, unlike an agents dir inside the 0700 data dir) and copies the
 * result to `scratch`, next to its final place, as the worker.
 */
export async function installOutside(scratch: string, pkg: string, scripts: boolean, progress: InstallProgress) {
  const outside = await mkdtemp(path.join(tmpdir(), 'drydock-agent-install-'));
  try {
    await chmod(outside, 0o755);
    await writeFile(path.join(outside, 'package.json'), JSON.stringify({ private: true }));
    await npmInstall(outside, pkg, progress, { scripts });
    await cp(outside, scratch, { recursive: true, verbatimSymlinks: true });
  } finally {
    await rm(outside, { recursive: true, force: true });
  }
}

async function executable(file: string): Promise<boolean> {
  return access(file, constants.X_OK).then(
    () => true,
    () => false,
  );
}

async function takeLock(lock: string, progress: InstallProgress): Promise<void> {
  let said = false;
  for (;;) {
    try {
      await mkdir(lock);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const since = await stat(lock).then(
      (s) => Date.now() - s.mtimeMs,
      () => 0,
    );
    if (since > STALE_LOCK_MS) {
      await rm(lock, { recursive: true, force: true });
      continue;
    }
    if (!said) progress(`waiting for another install (${lock})`);
    said = true;
    await new Promise((r) => setTimeout(r, 1_000));
  }
}

/** Who runs an install when the worker is root: nobody, so a package's scripts cannot read the worker's files or /proc. */
const INSTALL_USER = { uid: 65534, gid: 65534 };
/** What an install's environment keeps of the worker's: npm's settings, the proxy and CAs; no credential. */
const INSTALL_ENV =
  /^(PATH|LANG|LC_[A-Z]+|TZ|NODE_EXTRA_CA_CERTS|SSL_CERT_(FILE|DIR)|(https?|no)_proxy|npm_config_.+)$/i;

/**
 * `npm install` of one exact package, its optional platform dependency
 * included; output lines to `progress`. Lifecycle scripts run only when
 * `scripts` is true (Claude Code's and opencode's postinstall puts their
 * binary in place; Codex has none and installs with --ignore-scripts). They
 * run with none of the worker's environment (GitHub token, model keys, audit
 * key, database URL) and, when the worker is root, as nobody with its own
 * HOME and cache, which cannot read the worker's data dir (0700,
 * platform/data-dir.ts: mirrors, artifacts, audit key); what they made is
 * root's again before any sandbox sees it.
 */
export async function npmInstall(
  folder: string,
  spec: string,
  progress: InstallProgress,
  opts: { scripts: boolean } = { scripts: true },
): Promise<void> {
  const env: NodeJS.ProcessEnv = { HOME: folder, npm_config_update_notifier: 'false' };
  for (const [name, value] of Object.entries(process.env)) if (INSTALL_ENV.test(name)) env[name] = value;
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    env.npm_config_cache = path.join(folder, '.npm-cache');
    await run('chown', ['-R', `${INSTALL_USER.uid}:${INSTALL_USER.gid}`, folder]);
  }
  try {
    const args = [...NPM_INSTALL, ...(opts.scripts ? [] : ['--ignore-scripts']), spec];
    await runNpm(folder, args, env, asRoot ? INSTALL_USER : {}, progress);
  } finally {
    if (asRoot) {
      await rm(path.join(folder, '.npm-cache'), { recursive: true, force: true });
      await run('chown', ['-R', '0:0', folder]);
    }
  }
}

function run(command: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) =>
    spawn(command, args, { stdio: 'ignore' })
      .on('error', reject)
      .on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${command} ${args[0]} exited ${code}`)))),
  );
}

const NPM_INSTALL = ['install', '--no-audit', '--no-fund', '--include=optional', '--save-exact', '--loglevel=http'];

function runNpm(
  folder: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  user: { uid?: number; gid?: number },
  progress: InstallProgress,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('npm', args, { cwd: folder, env, ...user, stdio: ['ignore', 'pipe', 'pipe'] });
    let last = '';
    const lines = (chunk: Buffer) => {
      for (const line of chunk.toString().split('\n')) {
        if (line.trim()) {
          last = line.trim();
          progress(last.slice(0, 200));
        }
      }
    };
    child.stdout.on('data', lines);
    child.stderr.on('data', lines);
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`npm install ${args.at(-1)} failed (exit ${code}): ${last}`)),
    );
  });
}
