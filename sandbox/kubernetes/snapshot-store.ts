/**
 * Snapshots on a Kubernetes node: a build's /workspace as an archive in a
 * folder of the worker's data directory on its node (one folder per
 * snapshot: `workspace.tar` and `meta.json`), named like the image a Docker
 * host would have made. A pod made from it mounts the folder read-only and
 * unpacks the archive into its emptyDir before anything runs
 * (./provider.ts). Per node, as Docker's images are per host; why an archive
 * and not an image pushed to a registry is in docs/kubernetes.md.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';

const ARCHIVE = 'workspace.tar';
const META = 'meta.json';
const PARTIAL = '.partial-';

/** What a snapshot holds besides its archive. */
export interface StoredSnapshot {
  /** Its name, "repo:tag", as the snapshot registry records it. */
  tag: string;
  /** sha256 of the archive. */
  id: string;
  /** The image its pods run; the archive is unpacked into their /workspace. */
  baseImage: string;
  labels: Record<string, string>;
  sizeBytes: number;
  createdMs: number;
  /** Its folder on the node. */
  dir: string;
}

export class SnapshotStore {
  constructor(
    /** A folder on the node, at the same path in the worker (a hostPath of the worker's pod). */
    readonly root: string,
  ) {}

  /** The folder of a tag: a short hash, so any tag makes a folder name. */
  dirOf(tag: string): string {
    return path.join(this.root, createHash('sha256').update(tag).digest('hex').slice(0, 24));
  }

  async find(tag: string): Promise<StoredSnapshot | undefined> {
    const dir = this.dirOf(tag);
    try {
      return { ...(JSON.parse(await readFile(path.join(dir, META), 'utf8')) as StoredSnapshot), dir };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
  }

  /**
   * Stores a snapshot whose archive `write` produces into the file it is
   * given; one that exists already is kept (a retry, or another worker won).
   */
  async save(
    entry: Pick<StoredSnapshot, 'tag' | 'baseImage' | 'labels'>,
    write: (file: string) => Promise<void>,
  ): Promise<StoredSnapshot> {
    const found = await this.find(entry.tag);
    if (found) return found;
    await mkdir(this.root, { recursive: true });
    const partial = path.join(this.root, `${PARTIAL}${randomBytes(6).toString('hex')}`);
    await mkdir(partial, { mode: 0o755 });
    try {
      await write(path.join(partial, ARCHIVE));
      const archive = path.join(partial, ARCHIVE);
      const meta = {
        ...entry,
        id: await sha256Of(archive),
        sizeBytes: (await stat(archive)).size,
        createdMs: Date.now(),
      };
      await writeFile(path.join(partial, META), JSON.stringify(meta));
      await rename(partial, this.dirOf(entry.tag)).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST') throw err;
      });
    } finally {
      await rm(partial, { recursive: true, force: true });
    }
    return (await this.find(entry.tag))!;
  }

  async list(): Promise<StoredSnapshot[]> {
    const names = await readdir(this.root).catch(() => [] as string[]);
    const found: StoredSnapshot[] = [];
    for (const name of names.filter((n) => !n.startsWith(PARTIAL))) {
      const meta = await readFile(path.join(this.root, name, META), 'utf8').catch(() => undefined);
      if (meta) found.push({ ...(JSON.parse(meta) as StoredSnapshot), dir: path.join(this.root, name) });
    }
    return found;
  }

  /** Removes a snapshot's folder; false when there was none. */
  async remove(tag: string): Promise<boolean> {
    const found = await this.find(tag);
    if (!found) return false;
    // Renamed first: a pod being made from it never mounts a half-deleted folder.
    const doomed = path.join(this.root, `${PARTIAL}${randomBytes(6).toString('hex')}`);
    await rename(found.dir, doomed);
    await rm(doomed, { recursive: true, force: true });
    return true;
  }

  /** Removes what a crashed save or removal left (older than `graceMs`); returns their paths. */
  async reapPartial(graceMs: number): Promise<string[]> {
    const names = await readdir(this.root).catch(() => [] as string[]);
    const removed: string[] = [];
    for (const name of names.filter((n) => n.startsWith(PARTIAL))) {
      const dir = path.join(this.root, name);
      const info = await stat(dir).catch(() => undefined);
      if (!info || info.mtimeMs > Date.now() - graceMs) continue;
      await rm(dir, { recursive: true, force: true });
      removed.push(dir);
    }
    return removed;
  }
}

function sha256Of(file: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const hash = createHash('sha256');
    createReadStream(file)
      .on('data', (c) => hash.update(c))
      .on('end', () => resolve(`sha256:${hash.digest('hex')}`))
      .on('error', reject);
  });
}
