/**
 * Files and folders of a repo at a commit that a service sees read-only (a
 * compose file's `./init.sql:/docker-entrypoint-initdb.d/init.sql`, its
 * secrets and configs): read from the worker's mirror, never from a
 * checkout, with every symlink resolved within the repo. A path that leaves
 * the repo (`..`, an absolute or climbing symlink) is refused, naming the
 * field; so is more than a service may copy. What `resolve` finds is pinned by
 * its git object id (kept with the snapshot's services), and `tree` reads
 * exactly that object when a sandbox starts the service.
 */
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import type { FileTree } from './provider';

const run = promisify(execFile);

/** At most this much is copied into one service (files and folders together). */
export const MAX_SERVICE_FILES = { entries: 2_000, bytes: 64 * 1024 ** 2 };
/** Symlinks followed while resolving one path. */
const MAX_HOPS = 40;

/** A path of the repo that cannot be copied into a service: the message names the field. */
export class RepoFileError extends Error {
  override name = 'RepoFileError';
}

/** A path of the repo resolved at a commit. */
export interface RepoObject {
  kind: 'file' | 'folder';
  /** The git object (blob or tree). */
  object: string;
  /** The path it resolved to (after symlinks). */
  path: string;
  /** A file's permission bits as git keeps them (0644 or 0755). */
  mode: number;
}

interface TreeEntry {
  mode: string;
  type: string;
  object: string;
  size: number;
  path: string;
}

async function gitBytes(mirror: string, args: string[], maxBuffer = MAX_SERVICE_FILES.bytes + 1024 ** 2) {
  const { stdout } = await run('git', args, { cwd: mirror, encoding: 'buffer', maxBuffer });
  return stdout;
}

/** The files of one commit of a repo's mirror. */
export class RepoTree {
  constructor(
    private readonly mirror: string,
    /** A commit id. */
    readonly commit: string,
  ) {}

  /** Entries of `treeish` (`-r`: all files below it), with their sizes. */
  private async list(treeish: string, pathspec: string[], recursive: boolean): Promise<TreeEntry[]> {
    const out = await gitBytes(this.mirror, [
      '--literal-pathspecs',
      'ls-tree',
      '-z',
      '-l',
      ...(recursive ? ['-r'] : []),
      treeish,
      '--',
      ...pathspec,
    ]);
    return out
      .toString('utf8')
      .split('\0')
      .filter(Boolean)
      .map((line) => {
        const tab = line.indexOf('\t');
        const [mode, type, object, size] = line.slice(0, tab).split(/\s+/);
        return { mode, type, object, size: Number(size) || 0, path: line.slice(tab + 1) };
      });
  }

  /** The text of a file of the repo (symlinks resolved within it), or undefined when it is not one. */
  async read(file: string): Promise<string | undefined> {
    const found = await this.resolve(file, file).catch(() => undefined);
    if (found?.kind !== 'file') return undefined;
    return (await gitBytes(this.mirror, ['cat-file', 'blob', found.object])).toString('utf8');
  }

  /**
   * `repoPath` at the commit, each symlink on the way followed within the
   * repo; undefined when nothing is there. A folder is checked whole: its
   * symlinks stay within the repo, and it fits MAX_SERVICE_FILES.
   */
  async resolve(repoPath: string, field: string): Promise<RepoObject | undefined> {
    let left = repoPath.split('/').filter((p) => p && p !== '.');
    let done: string[] = [];
    let found: RepoObject = { kind: 'folder', object: await this.rootTree(), path: '', mode: 0o755 };
    for (let hops = 0; left.length;) {
      if (left[0] === '..') throw new RepoFileError(`${field}: "${repoPath}" is outside the repository`);
      const here = [...done, left[0]].join('/');
      const [entry] = await this.list(this.commit, [here], false);
      if (!entry || entry.path !== here) return undefined;
      if (entry.mode === '120000') {
        if (++hops > MAX_HOPS) throw new RepoFileError(`${field}: "${repoPath}" has too many symlinks`);
        const target = (await gitBytes(this.mirror, ['cat-file', 'blob', entry.object])).toString('utf8');
        const joined = path.posix.normalize(path.posix.join(done.join('/'), target));
        if (path.posix.isAbsolute(target) || joined === '..' || joined.startsWith('../'))
          throw new RepoFileError(
            `${field}: "${repoPath}" leads outside the repository (the symlink ${here} points to ${target})`,
          );
        left = [...joined.split('/').filter((p) => p && p !== '.'), ...left.slice(1)];
        done = [];
        continue;
      }
      if (entry.type !== 'tree' && left.length > 1) return undefined;
      found = {
        kind: entry.type === 'tree' ? 'folder' : 'file',
        object: entry.object,
        path: here,
        mode: entry.mode === '100755' ? 0o755 : 0o644,
      };
      done = [...done, left[0]];
      left = left.slice(1);
    }
    if (found.kind === 'folder') await this.checkFolder(found, field);
    return found;
  }

  private rootTree(): Promise<string> {
    return gitBytes(this.mirror, ['rev-parse', `${this.commit}^{tree}`]).then((b) => b.toString('utf8').trim());
  }

  /** A folder's symlinks lead to files within the repo, and it is small enough to copy. */
  private async checkFolder(folder: RepoObject, field: string): Promise<void> {
    const entries = await this.list(folder.object, [], true);
    const bytes = entries.reduce((n, e) => n + e.size, 0);
    if (entries.length > MAX_SERVICE_FILES.entries || bytes > MAX_SERVICE_FILES.bytes)
      throw new RepoFileError(
        `${field}: ${folder.path} holds ${entries.length} files, ${bytes} bytes: a service gets at most ${MAX_SERVICE_FILES.entries} files, ${MAX_SERVICE_FILES.bytes} bytes`,
      );
    for (const e of entries.filter((e) => e.mode === '120000')) {
      const inRepo = path.posix.join(folder.path, e.path);
      const target = await this.resolve(inRepo, field);
      if (target?.kind !== 'file')
        throw new RepoFileError(`${field}: the symlink ${inRepo} does not lead to a file of the repository`);
    }
  }

  /** What a service sees of `object` (RepoObject.object of `kind`, from `repoPath`): its content, symlinks as their files. */
  async tree(object: string, kind: 'file' | 'folder', repoPath: string, mode?: number): Promise<FileTree> {
    if (kind === 'file') {
      const data = await gitBytes(this.mirror, ['cat-file', 'blob', object]);
      return { kind: 'file', mode: mode ?? 0o644, data };
    }
    const root: FileTree & { kind: 'folder' } = { kind: 'folder', entries: {} };
    for (const e of await this.list(object, [], true)) {
      const parts = e.path.split('/');
      let at = root;
      for (const dir of parts.slice(0, -1)) {
        const next = (at.entries[dir] ??= { kind: 'folder', entries: {} });
        if (next.kind !== 'folder') throw new RepoFileError(`${repoPath}/${e.path}: a file and a folder at once`);
        at = next;
      }
      const file = e.mode === '120000' ? await this.resolve(path.posix.join(repoPath, e.path), repoPath) : undefined;
      if (e.mode === '120000' && file?.kind !== 'file')
        throw new RepoFileError(`${repoPath}/${e.path}: a symlink that does not lead to a file of the repository`);
      const data = await gitBytes(this.mirror, ['cat-file', 'blob', file?.object ?? e.object]);
      const executable = (file ? file.mode : e.mode === '100755' ? 0o755 : 0o644) === 0o755;
      at.entries[parts[parts.length - 1]] = { kind: 'file', mode: executable ? 0o755 : 0o644, data };
    }
    return root;
  }
}
