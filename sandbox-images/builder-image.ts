/**
 * Builds drydock's isolated builder image (sandbox-images/builder: Debian's
 * buildah, the egress forwarder, the entry script drydock-build) from
 * debian:trixie-slim, tagged by the hash of what it is made of, so it is
 * rebuilt only when one of those files changes. drydock's own content only:
 * the `--network host` of this build is for Debian's archive, as the base
 * image's (base-image.ts). Run directly (`tsx sandbox-images/builder-image.ts`)
 * to build and print the tag.
 */
import { createHash } from 'node:crypto';
import { cp, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ensureDebian, imageExists, run, toStderr, type Progress } from './base-image';

const CONTEXT = path.join(__dirname, 'builder');
/** The files of the image: the builder's folder, and the forwarder every sandbox uses (sandbox/egress.ts). */
const FILES = [
  path.join(CONTEXT, 'Dockerfile'),
  path.join(CONTEXT, 'drydock-build'),
  path.join(CONTEXT, 'drydock-runc'),
  path.join(__dirname, 'base', 'drydock-egress'),
];

/** `drydock-builder:<first 12 hex of the sha256 of its files>`. */
export async function builderImageTag(): Promise<string> {
  const hash = createHash('sha256');
  for (const file of FILES)
    hash
      .update(path.basename(file))
      .update('\0')
      .update(await readFile(file));
  return `drydock-builder:${hash.digest('hex').slice(0, 12)}`;
}

/** Returns the builder image's tag, building it when missing (with progress on stderr). */
export async function ensureBuilderImage(progress: Progress = toStderr): Promise<string> {
  const tag = await builderImageTag();
  if (await imageExists(tag)) return tag;
  await ensureDebian(progress);
  progress(`building the isolated builder's image ${tag} (first run only; about a minute)`);
  const context = await mkdtemp(path.join(tmpdir(), 'drydock-builder-image-'));
  try {
    for (const file of FILES) await cp(file, path.join(context, path.basename(file)));
    await run('docker', ['build', '--network', 'host', '--label', 'drydock.image=builder', '-t', tag, context], true);
  } finally {
    await rm(context, { recursive: true, force: true });
  }
  return tag;
}

// Run as a script (bin/bundled.js: in a bundle every source has the entry's module).
if (process.argv[1] === __filename) {
  ensureBuilderImage().then(
    (tag) => console.log(tag),
    (err: Error) => {
      console.error(`drydock: ${err.message}`);
      process.exit(1);
    },
  );
}
