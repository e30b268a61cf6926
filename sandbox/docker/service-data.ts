/**
 * A service's data as a session's checkpoint keeps it (docs/services.md,
 * "Its data in the checkpoint" under "What a service is"): what the session wrote into a service's
 * data folders is the upper layer of each folder's overlay on the sandbox's
 * disk (service-storage.ts), so a copy of those upper layers, taken with the
 * service paused (a crash-consistent copy, as a power cut would leave it:
 * PostgreSQL and Redis' append-only file recover from it), over the same
 * lower layers, is the service's whole state. A replacement sandbox puts the
 * copy back before the service's first start.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { chmod, lstat, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { createGzip } from 'node:zlib';
import type Docker from 'dockerode';
import { serviceName } from '../../workflows/services';
import { SandboxError, type ServiceContainerSpec, type ServiceDataCopy } from '../provider';
import { isStatus } from './create-options';
import { confinedDir, servicesFolder } from './service-storage';
import type { SandboxStorageRoot } from './storage';

const run = promisify(execFile);

/** On a service container: what its folders' copy-on-write layers lie over (lowersOf). */
export const LOWERS_LABEL = 'drydock.service.lowers';

/** The folders' lower layers, one line each: a copy taken over other lowers (another snapshot) is not put back. */
export function lowersOf(folders: ServiceContainerSpec['folders']): string {
  return folders.map((f) => `${f.path}=${f.from.image}:${f.from.path}`).join('\n');
}

/** tar's options for an overlay's upper layer: whiteouts are devices, opaque folders an xattr, owners by number. */
const TAR_OPTIONS = ['--xattrs', '--xattrs-include=trusted.overlay.*', '--numeric-owner'];

/**
 * The copy of a service's data folders' upper layers (a gzipped tar of
 * `<n>/upper`), its files copied with the service paused and compressed
 * after; undefined when it has no data folder or nothing changed since the
 * copy whose fingerprint is `since` (then it is not paused at all). A
 * service left paused by a copy cut off (its worker died) is resumed here.
 * Throws when the copy is over `maxBytes` compressed, or RAW_BYTES before.
 */
export async function saveServiceData(
  docker: Docker,
  storage: SandboxStorageRoot,
  at: { sandbox: string; service: string; container: string },
  opts: { since?: string; maxBytes: number },
): Promise<ServiceDataCopy | undefined> {
  if (!serviceName.safeParse(at.service).success) throw new Error(`"${at.service}" is not a service's name`);
  const container = docker.getContainer(at.container);
  const info = await container.inspect().catch((err: unknown) => {
    if (isStatus(err, 404)) return undefined;
    throw err;
  });
  const lowers = info?.Config.Labels?.[LOWERS_LABEL];
  if (!info || !lowers) return undefined;
  // Left paused by a copy cut off (its worker died): resumed first.
  if (info.State.Paused) await container.unpause().catch(() => undefined);
  const base = path.join(servicesFolder(storage, at.sandbox), at.service);
  const layers = (await readdir(base).catch(() => [] as string[])).filter((n) => /^\d+$/.test(n)).sort();
  if (!layers.length) return undefined;
  // Nothing written since the kept copy: no pause at all.
  const before = await fingerprintOf(base, layers);
  if (before.hash === opts.since) return undefined;
  if (before.bytes > RAW_BYTES)
    throw new Error(`service ${at.service}'s data since the snapshot is over ${RAW_BYTES} bytes (${before.bytes})`);
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-service-data-'));
  try {
    const raw = path.join(dir, 'data.tar');
    // Paused only while the files are copied; compressed after, with the service running.
    const pause = info.State.Running;
    if (pause) await pauseOf(container);
    let fingerprint: string;
    try {
      fingerprint = (await fingerprintOf(base, layers)).hash;
      if (fingerprint === opts.since) return undefined;
      await run('tar', ['-c', '-f', raw, ...TAR_OPTIONS, '-C', base, ...layers.map((n) => `${n}/upper`)]);
    } finally {
      if (pause) await container.unpause().catch(() => undefined);
    }
    const tar = await gzipAtMost(raw, opts.maxBytes).catch((err: Error) => {
      throw new Error(`service ${at.service}'s data since the snapshot: ${err.message}`);
    });
    return { lowers, fingerprint, tar };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The most a copy may hold before it is compressed (a copy is made on the worker's disk first). */
const RAW_BYTES = 2 * 1024 ** 3;

/** A file gzipped (fast level: the copy is made at every checkpoint), at most `maxBytes` of it. */
function gzipAtMost(file: string, maxBytes: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const gzip = createGzip({ level: 1 });
    const input = createReadStream(file).on('error', reject);
    gzip
      .on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > maxBytes) {
          input.destroy();
          gzip.destroy();
          reject(new Error(`over ${maxBytes} bytes compressed`));
        } else chunks.push(chunk);
      })
      .on('error', reject)
      .on('end', () => resolve(Buffer.concat(chunks)));
    input.pipe(gzip);
  });
}

/**
 * Pauses a container; the freezer can fail while a process of it is in the
 * kernel ("unable to freeze"), which passes: tried a few times.
 */
async function pauseOf(container: Docker.Container): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await container.pause();
    } catch (err) {
      if (attempt >= 5 || !/unable to freeze/i.test(String(err))) throw err;
      await new Promise((r) => setTimeout(r, 100 * attempt));
    }
  }
}

/** Each file's path, size and change time under the upper layers (equal when nothing was written since), and their bytes. */
async function fingerprintOf(base: string, layers: string[]): Promise<{ hash: string; bytes: number }> {
  const hash = createHash('sha256');
  let bytes = 0;
  const walk = async (dir: string, rel: string): Promise<void> => {
    const names = (await readdir(dir)).sort();
    for (const name of names) {
      const info = await lstat(path.join(dir, name), { bigint: true });
      hash.update(`${rel}/${name}\0${info.mode}\0${info.size}\0${info.ctimeNs}\0${info.mtimeNs}\n`);
      bytes += Number(info.size);
      if (info.isDirectory()) await walk(path.join(dir, name), `${rel}/${name}`);
    }
  };
  for (const n of layers) await walk(path.join(base, n, 'upper'), n);
  return { hash: hash.digest('hex'), bytes };
}

/**
 * Puts a copy back as the upper layers of a service not made yet in this
 * sandbox (each `<n>` folder replaced whole, so a retry finds the same);
 * false, and nothing done, when the copy lies over other lower layers.
 */
export async function restoreServiceData(
  storage: SandboxStorageRoot,
  spec: Pick<ServiceContainerSpec, 'sandbox' | 'service' | 'folders'>,
  copy: Pick<ServiceDataCopy, 'lowers' | 'tar'>,
): Promise<boolean> {
  if (copy.lowers !== lowersOf(spec.folders)) return false;
  const base = await confinedDir(servicesFolder(storage, spec.sandbox), [spec.service]);
  for (const n of spec.folders.keys()) await rm(path.join(base, String(n)), { recursive: true, force: true });
  // Only <n>/upper members: the copy was made by saveServiceData, from these folders.
  const members = spec.folders.map((_, n) => `${n}/upper`);
  await new Promise<void>((resolve, reject) => {
    const child = execFile(
      'tar',
      ['-x', '-z', ...TAR_OPTIONS, '--same-permissions', '-C', base, '--', ...members],
      (err) => (err ? reject(new Error(`restoring service ${spec.service}'s data: ${err.message}`)) : resolve()),
    );
    child.stdin!.end(copy.tar);
  });
  const refused = await tameRestored(base, members);
  if (refused) {
    for (const n of spec.folders.keys()) await rm(path.join(base, String(n)), { recursive: true, force: true });
    throw new SandboxError(
      `restoring service ${spec.service}'s data: ${refused} is a device and no overlay whiteout (a character ` +
        'device 0/0): refused. The copy in sandbox_service_checkpoints was not made by drydock; delete its row ' +
        "so the service starts from its snapshot's data",
      'permanent',
    );
  }
  return true;
}

/**
 * A process's pid file (a regular file named `*.pid`: PostgreSQL's
 * postmaster.pid, MySQL's `<host>.pid`) in a copy names a process of the lost
 * container, copied running (paused) or dead. The replacement's service runs
 * in a new PID namespace where that number can be another live process (its
 * init, a health check's probe), and PostgreSQL then refuses to start: 'lock
 * file "postmaster.pid" already exists'. No process of the copy runs any
 * more, so its pid files are dropped on the way back (copies kept before this
 * rule too); the lower layer has none (a snapshot's data is taken with the
 * service stopped cleanly, which removes them).
 */
const PID_FILE = /\.pid$/;

/**
 * tar as root keeps owners, modes and device nodes, as the copy has them;
 * whoever can write the copy's row could plant root's setuid files or a
 * device under the storage root. Owners stay (a service's files are its
 * uid's); setuid and setgid bits are cleared; a device other than an
 * overlay whiteout is named (the caller refuses the copy). Pid files go (PID_FILE).
 */
async function tameRestored(base: string, members: string[]): Promise<string | undefined> {
  const walk = async (at: string): Promise<string | undefined> => {
    const info = await lstat(at);
    if (info.isBlockDevice() || (info.isCharacterDevice() && info.rdev !== 0)) return path.relative(base, at);
    if (info.isSymbolicLink()) return undefined;
    if (info.isFile() && PID_FILE.test(path.basename(at))) return void (await rm(at));
    if (info.mode & 0o6000) await chmod(at, info.mode & 0o1777);
    if (!info.isDirectory()) return undefined;
    for (const name of await readdir(at)) {
      const bad = await walk(path.join(at, name));
      if (bad) return bad;
    }
    return undefined;
  };
  for (const member of members) {
    const bad = await walk(path.join(base, member)).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return undefined; // a folder the copy did not hold
      throw err;
    });
    if (bad) return bad;
  }
  return undefined;
}
