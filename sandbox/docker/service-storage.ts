/**
 * A service's folders, copy-on-write like the sandbox's /workspace
 * (sandbox/docker-storage.ts): each data folder and each VOLUME of the
 * service's image is an overlay whose lower layer is a named volume Docker
 * filled once per host from an image (the service's own, or the snapshot's
 * data image holding what setup wrote), and whose upper layer lives on the
 * sandbox's own disk (its `limits.disk` counts it). A session starts with
 * setup's migrated, seeded database in the time of a mount, and changes only
 * its own copy.
 *
 * A snapshot's data image: the service's image with each data folder's
 * content after setup under /drydock-data/<n>/ (not a VOLUME of the image,
 * so `docker commit` keeps it), made while the service is stopped.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { chmod, lstat, mkdir, mkdtemp, open, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type Docker from 'dockerode';
import { serviceName } from '../../workflows/services';
import { DATA_ROOT, type FileTree } from '../provider';
import { LOWER_LABEL, type OverlayDirs, type SandboxStorageRoot } from './storage';

const run = promisify(execFile);

/** On a finished lower volume of one path: `<image id> <path>`. */
const PATH_READY_LABEL = 'drydock.lower.path-ready';

function isStatus(err: unknown, code: number): boolean {
  return typeof err === 'object' && err !== null && (err as { statusCode?: number }).statusCode === code;
}

/**
 * The host folder holding `image`'s content at `containerPath`: a named
 * volume Docker filled from the image (once per image, path and host; the
 * reaper removes it with the image, by the lower label).
 */
export async function pathLower(docker: Docker, image: string, containerPath: string): Promise<string> {
  const imageId = (await docker.getImage(image).inspect()).Id;
  const key = `${imageId} ${containerPath}`;
  const found = await readyVolume(docker, key);
  if (found) return found;
  const name = `drydock-lower-${imageId.replace(/^sha256:/, '').slice(0, 12)}-${randomBytes(4).toString('hex')}`;
  await docker.createVolume({ Name: name, Labels: { [LOWER_LABEL]: imageId } });
  // Creating a container that mounts the empty volume makes Docker copy the image's folder into it.
  const filler = await docker.createContainer({
    Image: imageId,
    Entrypoint: ['true'],
    Labels: { [LOWER_LABEL]: imageId },
    HostConfig: { NetworkMode: 'none', Mounts: [{ Type: 'volume', Source: name, Target: containerPath }] },
  });
  // `v`: the anonymous volumes of the image's other VOLUMEs go with it (the named one stays).
  await docker.getContainer(filler.id).remove({ force: true, v: true });
  // The marker: an empty volume whose labels name the finished copy. Two workers racing: the first by name wins.
  await docker.createVolume({
    Name: `${name}-ready`,
    Labels: { [LOWER_LABEL]: imageId, [PATH_READY_LABEL]: key, 'drydock.lower.volume': name },
  });
  return (await readyVolume(docker, key))!;
}

async function readyVolume(docker: Docker, key: string): Promise<string | undefined> {
  const listed = await docker.listVolumes({ filters: { label: [`${PATH_READY_LABEL}=${key}`] } });
  for (const marker of (listed.Volumes ?? []).sort((a, b) => a.Name.localeCompare(b.Name))) {
    try {
      return (await docker.getVolume(marker.Labels['drydock.lower.volume']).inspect()).Mountpoint;
    } catch (err) {
      if (!isStatus(err, 404)) throw err;
      await docker
        .getVolume(marker.Name)
        .remove()
        .catch(() => undefined);
    }
  }
  return undefined;
}

/**
 * A service folder's overlay on the sandbox's disk: its upper layer under
 * the sandbox's storage, owned like the lower's root (a PostgreSQL data
 * folder must stay its user's, mode 0700). `layer` is `<service>/<n>`; the
 * worker runs as root, so the folders are made one at a time below the
 * sandbox's services folder, never through a symlink (docs/security.md,
 * T4-M5: a service named `../workspace/upper/<link>` once reached a symlink
 * the repo committed, and any host folder was made and chowned).
 */
export async function serviceOverlay(
  storage: SandboxStorageRoot,
  sandbox: string,
  layer: string,
  lower: string,
): Promise<OverlayDirs> {
  const [service, n, ...rest] = layer.split('/');
  if (!serviceName.safeParse(service).success || !/^\d+$/.test(n ?? '') || rest.length)
    throw new Error(`a service's folder "${layer}" is not <service name>/<number>`);
  const base = await confinedDir(servicesFolder(storage, sandbox), [service, n]);
  // An upper layer there already (a checkpoint's copy put back, a retry) keeps its owner and mode:
  // PostgreSQL chmods its data folder 0700 at initdb only, and the image's (the lower's root) is 0755.
  const made = !(await lstat(path.join(base, 'upper')).catch(() => undefined));
  const upper = await confinedDir(base, ['upper']);
  const work = await confinedDir(base, ['work']);
  if (!made) return { lower, upper, work };
  const root = await stat(lower);
  const handle = await open(upper, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  try {
    await handle.chown(root.uid, root.gid);
    await handle.chmod(root.mode & 0o7777);
  } finally {
    await handle.close();
  }
  return { lower, upper, work };
}

/** The folder of a sandbox's services on its disk (the sandbox's name is drydock's, never the repo's). */
export function servicesFolder(storage: SandboxStorageRoot, sandbox: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(sandbox)) throw new Error(`"${sandbox}" is not a sandbox's name`);
  return path.join(storage.root, 'sandboxes', sandbox, 'fs', 'services');
}

/**
 * `parts` made below `root` one folder at a time (root's own parent must
 * exist), each checked with lstat: an existing symlink or file is refused,
 * so nothing outside `root` is ever made or changed.
 */
export async function confinedDir(root: string, parts: string[]): Promise<string> {
  let at = root;
  for (const part of ['', ...parts]) {
    if (part === '.' || part === '..' || part.includes('/')) throw new Error(`"${part}" is not a folder's name`);
    at = part ? path.join(at, part) : at;
    await mkdir(at).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err;
    });
    const info = await lstat(at);
    if (!info.isDirectory()) throw new Error(`${at} is not a folder (a symlink or a file is never followed)`);
  }
  return at;
}

/**
 * A service's read-only files (ServiceContainerSpec.files) on the sandbox's
 * disk (its `limits.disk` counts them), under its services folder as
 * `<service>/files/<n>`, made afresh each time (a retry finds a partial copy):
 * every file is written with O_EXCL, so nothing is written through a link.
 * Returns the host path of each, to bind-mount read-only at its target.
 */
export async function serviceFiles(
  storage: SandboxStorageRoot,
  sandbox: string,
  service: string,
  files: { target: string; tree: FileTree }[],
): Promise<{ source: string; target: string }[]> {
  if (!serviceName.safeParse(service).success) throw new Error(`"${service}" is not a service's name`);
  const base = await confinedDir(servicesFolder(storage, sandbox), [service, 'files']);
  const out: { source: string; target: string }[] = [];
  for (const [n, file] of files.entries()) {
    const dir = path.join(base, String(n));
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { mode: 0o755 });
    const source = path.join(dir, file.tree.kind === 'file' ? 'file' : 'folder');
    await writeTree(source, file.tree);
    out.push({ source, target: file.target });
  }
  return out;
}

async function writeTree(at: string, tree: FileTree): Promise<void> {
  if (tree.kind === 'file') {
    await writeFile(at, tree.data, { flag: 'wx', mode: tree.mode });
    await chmod(at, tree.mode); // the umask left out of the mode
    return;
  }
  await mkdir(at, { mode: 0o755 });
  await chmod(at, 0o755);
  for (const [name, entry] of Object.entries(tree.entries)) {
    if (!name || name === '.' || name === '..' || name.includes('/')) throw new Error(`"${name}" is not a file's name`);
    await writeTree(path.join(at, name), entry);
  }
}

/**
 * The data image of a stopped service container: the service's image with
 * each of `folders` (as the container has them now) under DATA_ROOT/<n>/.
 * An existing `tag` is kept (a retry).
 */
export async function captureData(
  docker: Docker,
  container: string,
  opts: { image: string; folders: string[]; tag: string; labels: Record<string, string> },
): Promise<string> {
  if (
    await docker
      .getImage(opts.tag)
      .inspect()
      .then(
        () => true,
        () => false,
      )
  )
    return opts.tag;
  const staging = await docker.createContainer({
    Image: opts.image,
    Labels: opts.labels,
    HostConfig: { NetworkMode: 'none' },
  });
  try {
    await staging.putArchive(await emptyFolders(opts.folders.length), { path: '/' });
    for (const [n, folder] of opts.folders.entries()) {
      const tar = await docker.getContainer(container).getArchive({ path: folder });
      await staging.putArchive(tar, { path: `${DATA_ROOT}/${n}` });
    }
    const at = opts.tag.lastIndexOf(':');
    await staging.commit({ repo: opts.tag.slice(0, at), tag: opts.tag.slice(at + 1), comment: `data of ${container}` });
  } finally {
    await staging.remove({ force: true, v: true });
  }
  return opts.tag;
}

/** A tar of DATA_ROOT/0 … DATA_ROOT/<count-1>, empty folders, for putArchive to extract into. */
async function emptyFolders(count: number): Promise<Buffer> {
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-data-'));
  try {
    for (let n = 0; n < count; n++) await mkdir(path.join(dir, DATA_ROOT, String(n)), { recursive: true });
    const { stdout } = await run('tar', ['-c', '-C', dir, '--owner=0', '--group=0', DATA_ROOT.slice(1)], {
      encoding: 'buffer',
    });
    return stdout;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
