/**
 * The host's cache of agent CLIs: each pinned package version installed once
 * per host with the host's npm (through its registry) into
 * `<root>/<pkg>@<version>`, which every sandbox sees read-only at
 * /opt/drydock-agents. An install goes to a scratch folder first and is
 * renamed into place when complete, so a sandbox never sees half a CLI and a
 * crash mid-install only leaves scratch behind. Concurrent installs of the
 * same version (two sessions, two workers of one host) take turns on a lock
 * folder; the second finds the first's result.
 */
import { spawn } from 'node:child_process';
import { access, mkdir, rename, rm, stat, writeFile, constants } from 'node:fs/promises';
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
    await mkdir(scratch, { recursive: true });
    await writeFile(path.join(scratch, 'package.json'), JSON.stringify({ private: true }));
    progress(`installing ${spec.pkg}@${version} into ${target}`);
    await npmInstall(scratch, `${spec.pkg}@${version}`, progress);
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

/** `npm install` of one exact package, its optional platform dependency included; output lines to `progress`. */
function npmInstall(folder: string, spec: string, progress: InstallProgress): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      'npm',
      ['install', '--no-audit', '--no-fund', '--include=optional', '--save-exact', '--loglevel=http', spec],
      { cwd: folder, stdio: ['ignore', 'pipe', 'pipe'] },
    );
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
      code === 0 ? resolve() : reject(new Error(`npm install ${spec} failed (exit ${code}): ${last}`)),
    );
  });
}
