/**
 * Builds the sandbox base image from sandbox-images/base, tagged by the hash
 * of that folder, so it is rebuilt only when the Dockerfile (or a file it
 * copies) changes. When `debian:trixie-slim` is missing and cannot be pulled
 * (no registry reachable), it is made locally with debootstrap + docker import.
 * Run directly (`tsx sandbox-images/base-image.ts`) to build and print the tag.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cp, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

const CONTEXT = path.join(__dirname, 'base');
const FROM_IMAGE = 'debian:trixie-slim';
const DEBIAN_MIRROR = process.env.DRYDOCK_DEBIAN_MIRROR ?? 'http://deb.debian.org/debian';

export type Progress = (line: string) => void;
export const toStderr: Progress = (line) => process.stderr.write(`==> ${line}\n`);

/** drydock's pinned playwright-core, copied into the image (see the Dockerfile). */
const PLAYWRIGHT = path.dirname(require.resolve('playwright-core/package.json'));

/** `drydock-base:<first 12 hex of the sha256 of the Dockerfile and the playwright-core version>`. */
export async function baseImageTag(): Promise<string> {
  const hash = createHash('sha256');
  // The Dockerfile alone: the helpers beside it are mounted, not copied (sandbox/toolchains.ts).
  hash.update(await readFile(path.join(CONTEXT, 'Dockerfile')));
  hash.update(await readFile(path.join(PLAYWRIGHT, 'package.json')));
  return `drydock-base:${hash.digest('hex').slice(0, 12)}`;
}

/** Returns the tag of the base image, building what is missing (with progress on stderr). */
export async function ensureBaseImage(progress: Progress = toStderr): Promise<string> {
  const tag = await baseImageTag();
  if (await imageExists(tag)) return tag;
  await ensureDebian(progress);
  progress(`building sandbox image ${tag} (first run only; a few minutes)`);
  const context = await mkdtemp(path.join(tmpdir(), 'drydock-image-'));
  try {
    await cp(path.join(CONTEXT, 'Dockerfile'), path.join(context, 'Dockerfile'));
    await cp(PLAYWRIGHT, path.join(context, 'playwright-core'), { recursive: true });
    await run('docker', ['build', '--network', 'host', '--label', 'drydock.image=base', '-t', tag, context], true);
  } finally {
    await rm(context, { recursive: true, force: true });
  }
  return tag;
}

/** Makes sure `debian:trixie-slim` is on this host: pulled when a registry answers, else made with debootstrap. */
export async function ensureDebian(progress: Progress = toStderr): Promise<void> {
  if (!(await imageExists(FROM_IMAGE))) await obtainDebian(progress);
}

async function obtainDebian(progress: Progress): Promise<void> {
  progress(`${FROM_IMAGE} is missing; trying docker pull`);
  try {
    await run('timeout', ['60', 'docker', 'pull', FROM_IMAGE], false);
    return;
  } catch {
    progress(`no registry reachable: building ${FROM_IMAGE} with debootstrap from ${DEBIAN_MIRROR} (about 2 minutes)`);
  }
  if (!(await commandExists('debootstrap'))) {
    throw new Error(
      "debootstrap is not installed: run 'apt-get install debootstrap' (or make debian:trixie-slim available)",
    );
  }
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-rootfs-'));
  try {
    await run('debootstrap', ['--variant=minbase', 'trixie', dir, DEBIAN_MIRROR], true);
    progress(`importing the root filesystem as ${FROM_IMAGE}`);
    await run('sh', ['-c', `tar -C "${dir}" -c . | docker import --change 'CMD ["bash"]' - ${FROM_IMAGE}`], true);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export async function imageExists(ref: string): Promise<boolean> {
  return run('docker', ['image', 'inspect', ref], false).then(
    () => true,
    () => false,
  );
}

async function commandExists(name: string): Promise<boolean> {
  return run('sh', ['-c', `command -v ${name}`], false).then(
    () => true,
    () => false,
  );
}

/** Runs a command; `showOutput` streams it to stderr as progress. */
export function run(cmd: string, args: string[], showOutput: boolean): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', showOutput ? 2 : 'ignore', showOutput ? 2 : 'pipe'] });
    let stderr = '';
    child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`${cmd} ${args.join(' ')} exited with ${code}: ${stderr.trim()}`)),
    );
  });
}

// Run as a script (bin/bundled.js: in a bundle every source has the entry's module).
if (process.argv[1] === __filename) {
  ensureBaseImage().then(
    (tag) => console.log(tag),
    (err: Error) => {
      console.error(`drydock: ${err.message}`);
      process.exit(1);
    },
  );
}
