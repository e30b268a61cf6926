/**
 * Copy-on-write /workspace and home of a sandbox, with a disk limit the
 * kernel enforces (docs/security.md, "Disk").
 *
 * - The lower layer: the image's /workspace and home, copied by Docker once
 *   per image per host into two named volumes (labelled with the image id; a
 *   marker volume names them). No sandbox mounts them: they
 *   are only an overlay's read-only lowerdir, so no sandbox can change them.
 * - The upper layer: a sparse ext4 image file of `diskBytes`, loop-mounted
 *   per sandbox under the storage root; a write beyond it fails with ENOSPC.
 * - The sandbox gets two anonymous volumes of type overlay (mounted by the
 *   engine, removed with the container): start time does not grow with the
 *   size of the repo (bench/workspace-volume.ts).
 *
 * The storage root must be the same path on the host and in the worker (as
 * the egress folder), and the worker must be able to mount (root on the host).
 */
import { randomBytes } from 'node:crypto';
import { chmod, chown, mkdir, readdir, readFile, rename, rm, stat, truncate, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type Docker from 'dockerode';
import { runProcess as run } from '../../platform/processes';

/** One overlay: the engine mounts it as a volume with these options. */
export interface OverlayDirs {
  lower: string;
  upper: string;
  work: string;
}

export interface SandboxStorage {
  workspace: OverlayDirs;
  home: OverlayDirs;
}

interface Lowers {
  workspace: { volume: string; path: string };
  home: { volume: string; path: string };
}

/** The label on the lower volumes: the image id they were copied from. */
export const LOWER_LABEL = 'drydock.lower';
/** On the marker volume of a finished copy: the image id, and the names of its two volumes. */
const READY_LABEL = 'drydock.lower.ready';
const WORKSPACE_LABEL = 'drydock.lower.workspace';
const HOME_LABEL = 'drydock.lower.home';

const SANDBOX_UID = 1000;
/** How long a spare disk (see makeSpare) waits for a sandbox before the reaper removes it. */
const SPARE_KEPT_MS = 24 * 3600_000;

function isStatus(err: unknown, code: number): boolean {
  return typeof err === 'object' && err !== null && (err as { statusCode?: number }).statusCode === code;
}

async function mounted(dir: string): Promise<boolean> {
  const info = await readFile('/proc/self/mountinfo', 'utf8');
  return info.split('\n').some((line) => line.split(' ')[4] === dir);
}

/**
 * A sparse file of `diskBytes` with a fresh ext4 filesystem. Lazy init and no
 * reserved blocks: a 10 GiB sparse file formats in ~30 ms and uses ~20 MB.
 */
async function formatDisk(disk: string, diskBytes: number): Promise<void> {
  await writeFile(disk, '');
  // Not `truncate(1)`: a process fewer (platform/processes.ts).
  await truncate(disk, diskBytes);
  await run('mkfs.ext4', ['-q', '-F', '-m', '0', '-E', 'nodiscard,lazy_itable_init=1,lazy_journal_init=1', disk]);
}

/** Where a sandbox's copy-on-write storage comes from and goes. */
export class SandboxStorageRoot {
  constructor(
    private readonly docker: Docker,
    /** Host folder (same path in the worker) holding the sandboxes' upper layers. */
    readonly root: string,
  ) {}

  private sandboxDir(name: string): string {
    return path.join(this.root, 'sandboxes', name);
  }

  /**
   * The overlays of a new sandbox: its upper layer on a fresh `diskBytes`
   * filesystem (idempotent: a mounted one is kept), over the image's lowers.
   */
  async prepare(
    name: string,
    image: string,
    workspace: string,
    home: string,
    diskBytes: number,
  ): Promise<SandboxStorage> {
    const dir = this.sandboxDir(name);
    const fs = path.join(dir, 'fs');
    // The image's lowers are looked up while the sandbox's disk is made: neither needs the other.
    const [lowers] = await Promise.all([this.lowers(image, workspace, home), this.mountDisk(dir, fs, diskBytes)]);
    const layer = async (which: string, mode: number, lower: string): Promise<OverlayDirs> => {
      const upper = path.join(fs, which, 'upper');
      const work = path.join(fs, which, 'work');
      await mkdir(upper, { recursive: true });
      await mkdir(work, { recursive: true });
      // The overlay's root takes the upper's owner and mode: the sandbox user's folder.
      await chown(upper, SANDBOX_UID, SANDBOX_UID);
      await chmod(upper, mode);
      return { lower, upper, work };
    };
    return {
      workspace: await layer('workspace', 0o755, lowers.workspace.path),
      home: await layer('home', 0o700, lowers.home.path),
    };
  }

  /**
   * The sandbox's upper layer's filesystem, mounted at `fs` (idempotent: a
   * mounted one is kept): a spare disk of this size formatted before (see
   * makeSpare) when there is one, else formatted now; then the next spare is
   * made in the background, off the next sandbox's path.
   */
  private async mountDisk(dir: string, fs: string, diskBytes: number): Promise<void> {
    await mkdir(fs, { recursive: true, mode: 0o700 });
    if (await mounted(fs)) return;
    const disk = path.join(dir, 'disk.img');
    await rm(disk, { force: true });
    if (!(await this.takeSpare(diskBytes, disk))) await formatDisk(disk, diskBytes);
    await run('mount', ['-o', 'loop,nosuid,nodev,noatime', disk, fs]);
    this.makeSpare(diskBytes);
  }

  private spareDir(): string {
    return path.join(this.root, 'spare');
  }

  /**
   * Moves a spare disk of `diskBytes` to `disk`; false if there is none. A
   * spare is a fresh filesystem never mounted; the rename is atomic, so two
   * sandboxes (or workers sharing the root) never get the same one.
   */
  private async takeSpare(diskBytes: number, disk: string): Promise<boolean> {
    const names = await readdir(this.spareDir()).catch(() => [] as string[]);
    for (const spare of names.filter((n) => n.startsWith(`${diskBytes}-`) && n.endsWith('.img'))) {
      try {
        await rename(path.join(this.spareDir(), spare), disk);
        return true;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
    return false;
  }

  /** Sizes whose spare this process is making now. */
  private readonly makingSpare = new Set<number>();

  /**
   * Formats one spare disk of `diskBytes` in the background (under a temporary
   * name until it is whole), unless one is there or being made; a failure only
   * means the next sandbox formats its own. The reaper removes spares with the
   * storage it reaps (reapSpares).
   */
  private makeSpare(diskBytes: number): void {
    if (this.makingSpare.has(diskBytes)) return;
    this.makingSpare.add(diskBytes);
    const dir = this.spareDir();
    const temp = path.join(dir, `.making-${diskBytes}-${randomBytes(4).toString('hex')}.img`);
    void (async () => {
      const names = await readdir(dir).catch(() => [] as string[]);
      if (names.some((n) => n.startsWith(`${diskBytes}-`) && n.endsWith('.img'))) return;
      await mkdir(dir, { recursive: true, mode: 0o700 });
      await formatDisk(temp, diskBytes);
      await rename(temp, path.join(dir, `${diskBytes}-${randomBytes(4).toString('hex')}.img`));
    })()
      .catch(() => rm(temp, { force: true }).catch(() => undefined))
      .finally(() => this.makingSpare.delete(diskBytes));
  }

  /**
   * Removes unfinished spares (a worker stopped while formatting) made more
   * than `graceMs` ago, and spares unused for a day (a size no longer asked
   * for); returns what went.
   */
  async reapSpares(graceMs: number): Promise<string[]> {
    const dir = this.spareDir();
    const removed: string[] = [];
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      const info = await stat(path.join(dir, name)).catch(() => undefined);
      const keepMs = name.startsWith('.making-') ? graceMs : Math.max(graceMs, SPARE_KEPT_MS);
      if (!info || info.mtimeMs > Date.now() - keepMs) continue;
      await rm(path.join(dir, name), { force: true });
      removed.push(`spare disk ${name}`);
    }
    return removed;
  }

  /**
   * A service's Unix socket folder shared with its sandbox (ServiceContainerSpec.sockets): an
   * empty folder on the sandbox's own disk (bounded by it, removed with it), writable by any
   * user as /tmp is (sticky), since the service's user and the sandbox's differ.
   * Only after `prepare` (the disk is mounted); idempotent.
   */
  async socketFolder(sandbox: string, service: string, index: number): Promise<string> {
    const dir = path.join(this.sandboxDir(sandbox), 'fs', 'sockets', service, String(index));
    await mkdir(dir, { recursive: true });
    await chmod(dir, 0o1777);
    return dir;
  }

  /**
   * Unmounts and deletes a sandbox's upper layer (after its container is gone); absent is fine,
   * and so is another removal of it at the same time (a teardown beside a fault's or the reaper's):
   * an unmount that fails because the other one unmounted it first is done.
   */
  async remove(name: string): Promise<void> {
    const dir = this.sandboxDir(name);
    const fs = path.join(dir, 'fs');
    if (await mounted(fs)) {
      await run('umount', [fs]).catch(async (err: unknown) => {
        if (await mounted(fs)) throw err;
      });
    }
    await rm(dir, { recursive: true, force: true });
  }

  /** Sandboxes that have storage on this host, and when it was made. */
  async list(): Promise<{ name: string; createdMs: number }[]> {
    const dir = path.join(this.root, 'sandboxes');
    const names = await readdir(dir).catch(() => [] as string[]);
    const out: { name: string; createdMs: number }[] = [];
    for (const name of names) {
      const info = await stat(path.join(dir, name)).catch(() => undefined);
      if (info) out.push({ name, createdMs: info.mtimeMs });
    }
    return out;
  }

  /**
   * The image's /workspace and home as lower layers: copied by the engine once
   * per image per host. A third, empty volume marks a finished copy (its
   * labels name the two); when two workers race, the marker first by name
   * wins and the other drops its copy. A marker whose volumes are gone goes.
   */
  async lowers(image: string, workspace: string, home: string): Promise<Lowers> {
    const imageId = (await this.docker.getImage(image).inspect()).Id;
    const found = await this.readyLowers(imageId);
    if (found) return found;
    const made = await this.copyLowers(imageId, workspace, home);
    const winner = await this.readyLowers(imageId);
    if (winner && winner.workspace.volume !== made.workspace.volume) {
      await this.removeVolumes([made.marker, made.workspace.volume, made.home.volume]);
      return winner;
    }
    return made;
  }

  private async readyLowers(imageId: string): Promise<(Lowers & { marker: string }) | undefined> {
    const listed = await this.docker.listVolumes({ filters: { label: [`${READY_LABEL}=${imageId}`] } });
    for (const marker of (listed.Volumes ?? []).sort((a, b) => a.Name.localeCompare(b.Name))) {
      try {
        const path = async (name: string) => (await this.docker.getVolume(name).inspect()).Mountpoint;
        const [ws, home] = [marker.Labels[WORKSPACE_LABEL], marker.Labels[HOME_LABEL]];
        return {
          marker: marker.Name,
          workspace: { volume: ws, path: await path(ws) },
          home: { volume: home, path: await path(home) },
        };
      } catch (err) {
        if (!isStatus(err, 404)) throw err;
        await this.removeVolumes([marker.Name]);
      }
    }
    return undefined;
  }

  /** Docker fills an empty named volume from the image when a container mounting it is created. */
  private async copyLowers(imageId: string, workspace: string, home: string): Promise<Lowers & { marker: string }> {
    const key = `${imageId.replace(/^sha256:/, '').slice(0, 12)}-${randomBytes(3).toString('hex')}`;
    const labels = { [LOWER_LABEL]: imageId };
    const volumes = { workspace: `drydock-lower-${key}-workspace`, home: `drydock-lower-${key}-home` };
    for (const name of Object.values(volumes)) await this.docker.createVolume({ Name: name, Labels: labels });
    const filler = await this.docker.createContainer({
      name: `drydock-lower-${key}`,
      Image: imageId,
      Cmd: ['true'],
      Labels: labels,
      HostConfig: {
        NetworkMode: 'none',
        Mounts: [
          { Type: 'volume', Source: volumes.workspace, Target: workspace },
          { Type: 'volume', Source: volumes.home, Target: home },
        ],
      },
    });
    // v: the anonymous volumes the engine made for the image's VOLUMEs (a dev container's named volumes are
    // VOLUMEs of drydock's layer) go with it; the named lower volumes stay.
    await this.docker.getContainer(filler.id).remove({ force: true, v: true });
    const marker = `drydock-lower-${key}-ready`;
    await this.docker.createVolume({
      Name: marker,
      Labels: { ...labels, [READY_LABEL]: imageId, [WORKSPACE_LABEL]: volumes.workspace, [HOME_LABEL]: volumes.home },
    });
    return (await this.readyLowers(imageId))!;
  }

  /**
   * Deletes an image's lower layers. Only when no sandbox of the image is
   * left (an overlay over them would lose its files): callers remove the
   * image first, which the engine refuses while a container uses it.
   */
  async removeLowers(imageId: string): Promise<void> {
    const volumes = await this.docker.listVolumes({ filters: { label: [`${LOWER_LABEL}=${imageId}`] } });
    // The markers first: a half-removed set is never handed out.
    const names = (volumes.Volumes ?? [])
      .map((v) => v.Name)
      .sort((a, b) => Number(b.endsWith('-ready')) - Number(a.endsWith('-ready')));
    await this.removeVolumes(names);
  }

  /** Images that have lower layers on this host. */
  async lowerImages(): Promise<string[]> {
    const volumes = await this.docker.listVolumes({ filters: { label: [LOWER_LABEL] } });
    return [...new Set((volumes.Volumes ?? []).map((v) => v.Labels[LOWER_LABEL]))];
  }

  private async removeVolumes(names: string[]): Promise<void> {
    for (const name of names) {
      try {
        await this.docker.getVolume(name).remove();
      } catch (err) {
        if (!isStatus(err, 404)) throw err;
      }
    }
  }
}
