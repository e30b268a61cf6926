/**
 * The desktop's image (docs/desktop.md): drydock's base image with TigerVNC's
 * Xvnc and socat from Debian (sandbox-images/desktop/Dockerfile), built on
 * this host the first time a person opens a desktop, tagged by the hash of
 * its recipe and of the base image's tag, so it is built again only when
 * either changes. drydock's own image, never a repo's: a repo's sandbox
 * image gets nothing of it.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { imageExists, run, toStderr, type Progress } from './base-image';

const CONTEXT = path.join(__dirname, 'desktop');

/** `drydock-desktop:<first 12 hex of the sha256 of the Dockerfile and the base image's tag>`. */
export async function desktopImageTag(baseImage: string): Promise<string> {
  const hash = createHash('sha256').update(await readFile(path.join(CONTEXT, 'Dockerfile')));
  return `drydock-desktop:${hash.update('\0').update(baseImage).digest('hex').slice(0, 12)}`;
}

/** Builds with a build per image at a time in this process: two people opening desktops wait for one build. */
const building = new Map<string, Promise<string>>();

/**
 * Returns the desktop image's tag over `baseImage` (which must exist: the
 * worker builds it), building it when this host lacks it (about 20 s).
 */
export async function ensureDesktopImage(baseImage: string, progress: Progress = toStderr): Promise<string> {
  const tag = await desktopImageTag(baseImage);
  if (await imageExists(tag)) return tag;
  const pending =
    building.get(tag) ??
    (async () => {
      if (!(await imageExists(baseImage))) {
        throw new Error(`the desktop is built over the sandbox base image ${baseImage}, which this host lacks`);
      }
      progress(`building the desktop image ${tag} from Debian's packages (first use only; about 20 s)`);
      // --network host: the trusted recipe's apt-get only; its containers run in a sandbox's namespace.
      await run(
        'docker',
        ['build', '--network', 'host', '--build-arg', `BASE_IMAGE=${baseImage}`, '-t', tag, CONTEXT],
        false,
      );
      return tag;
    })().finally(() => building.delete(tag));
  building.set(tag, pending);
  return pending;
}
