/**
 * The C runtime drydock's helpers bring with them, so they run in any Linux
 * image: glibc-based (Debian, Ubuntu, an old CentOS) or musl-based (Alpine),
 * with or without git. The host's own builds of Node.js (the helpers' runtime),
 * GNU `timeout` (drydock-run needs its process group) and git (checkpoints,
 * bundles) are copied with the host's dynamic loader and the libraries they
 * link, and each binary's interpreter and library path are pointed into the
 * helpers' mount (patchelf). Nothing in the image is used, and nothing of
 * this runtime is visible to the image's own programs: no LD_LIBRARY_PATH,
 * no /lib64. Why not static builds: none of these three is published static
 * in a registry this project may fetch from, and the host already has them.
 */
import { execFile } from 'node:child_process';
import { chmod, copyFile, cp, mkdir, readdir, readFile, readlink, stat, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Where the host keeps git's builtins and templates (Debian's layout, which drydock's images and hosts use). */
const GIT_CORE = '/usr/lib/git-core';
const GIT_TEMPLATES = '/usr/share/git-core/templates';

/** A binary to carry: where it is on the host, and where it goes in the runtime's folder. */
export interface CarriedBinary {
  source: string;
  /** Relative to the runtime's folder. */
  target: string;
}

/**
 * Fills `dir` (to be mounted at `mount`) with `binaries`, patched to load
 * from `<mount>/glibc`, and that folder with the host's loader and every
 * library they link. Also `git/` (see packGit). Needs `patchelf` and `ldd`.
 */
export async function packGlibcRuntime(dir: string, mount: string, binaries: CarriedBinary[]): Promise<void> {
  await requirePatchelf();
  const git = await packGit(dir, mount);
  const all = [...binaries, git];
  await mkdir(path.join(dir, 'glibc'), { recursive: true });
  const libraries = new Map<string, string>();
  for (const b of all) {
    await mkdir(path.dirname(path.join(dir, b.target)), { recursive: true });
    await copyFile(b.source, path.join(dir, b.target));
    for (const [name, file] of await linkedLibraries(b.source)) libraries.set(name, file);
  }
  for (const [name, file] of libraries) await copyFile(file, path.join(dir, 'glibc', name));
  const loader = [...libraries.keys()].find((n) => n.startsWith('ld-linux'));
  if (!loader) throw new Error(`no dynamic loader among the libraries of ${all.map((b) => b.source).join(', ')}`);
  for (const b of all) {
    const file = path.join(dir, b.target);
    await chmod(file, 0o755);
    await run('patchelf', ['--set-interpreter', `${mount}/glibc/${loader}`, '--set-rpath', `${mount}/glibc`, file]);
  }
}

/**
 * git: `git/core/git` (the binary) with its builtins as links and its scripts,
 * the templates, and `git/bin/git`, which sets git's exec path to the copy
 * (its children, such as index-pack under fetch, run from it too). Returns
 * the binary to patch.
 */
async function packGit(dir: string, mount: string): Promise<CarriedBinary> {
  const core = path.join(dir, 'git', 'core');
  await mkdir(core, { recursive: true });
  for (const name of await readdir(GIT_CORE)) {
    const from = path.join(GIT_CORE, name);
    const link = await readlink(from).catch(() => undefined);
    if (link === 'git') await symlink('git', path.join(core, name));
    else if (link === undefined && name !== 'git' && (await isScript(from)))
      await copyFile(from, path.join(core, name));
  }
  await cp(GIT_TEMPLATES, path.join(dir, 'git', 'templates'), { recursive: true }).catch(() => undefined);
  await mkdir(path.join(dir, 'git', 'bin'));
  const wrapper = path.join(dir, 'git', 'bin', 'git');
  await writeFile(
    wrapper,
    `#!/bin/sh\nGIT_EXEC_PATH=${mount}/git/core GIT_TEMPLATE_DIR=\${GIT_TEMPLATE_DIR:-${mount}/git/templates} exec ${mount}/git/core/git "$@"\n`,
  );
  await chmod(wrapper, 0o755);
  return { source: path.join(GIT_CORE, 'git'), target: 'git/core/git' };
}

/** A text file starting with #! (git's shell and perl scripts), not another ELF binary (those need more libraries). */
async function isScript(file: string): Promise<boolean> {
  if (!(await stat(file)).isFile()) return false;
  const head = await readFile(file).then((b) => b.subarray(0, 2).toString('latin1'));
  return head === '#!';
}

/** The shared libraries a binary links, and the loader: name → host file (symlinks resolved by copyFile). */
async function linkedLibraries(binary: string): Promise<Map<string, string>> {
  const { stdout } = await run('ldd', [binary]);
  const found = new Map<string, string>();
  for (const line of stdout.split('\n')) {
    const linked = /^\s*(\S+) => (\/\S+)/.exec(line);
    const loader = /^\s*(\/\S*ld-linux[^\s]*)/.exec(line);
    if (linked) found.set(linked[1], linked[2]);
    else if (loader) found.set(path.basename(loader[1]), loader[1]);
  }
  return found;
}

async function requirePatchelf(): Promise<void> {
  await run('patchelf', ['--version']).catch(() => {
    throw new Error("patchelf is not installed on the worker's host: run 'apt-get install patchelf'");
  });
}
