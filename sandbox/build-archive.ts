/**
 * What the isolated builder hands back (sandbox/builder.ts): an image
 * archive written by root inside the builder. `docker load` applies every
 * name the archive gives, from any of the three places Docker reads names
 * (manifest.json's RepoTags, the legacy `repositories` file, an OCI
 * index.json's annotations): an archive naming `postgres:16` or drydock's
 * base image would replace that image for every repo. So before the load the
 * worker reads those names and accepts only the build's own tag (and
 * buildah's `localhost/` spelling of it), and exactly one image.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createReadStream } from 'node:fs';
import path from 'node:path';
import { finished } from 'node:stream/promises';
import { promisify } from 'node:util';
import { createGunzip, type Gunzip } from 'node:zlib';
import { extract } from 'tar-stream';

const run = promisify(execFile);
/** manifest.json, repositories and index.json are a few KiB; a listing of many layers stays far below this. */
const MAX_READ = 4 * 1024 * 1024;

/** The naming files of an archive, as text, when it has them. */
export interface ArchiveNames {
  manifest?: string;
  repositories?: string;
  index?: string;
}

/** Why the archive may not be loaded as `tag`, or undefined when it names only `tag`. */
export function archiveNamesProblem(files: ArchiveNames, tag: string): string | undefined {
  const allowed = new Set([tag, `localhost/${tag}`, `docker.io/library/${tag}`]);
  const named = (name: unknown) => typeof name === 'string' && allowed.has(name);
  let manifest: unknown;
  try {
    manifest = JSON.parse(files.manifest ?? 'null');
  } catch {
    return 'its manifest.json is not JSON';
  }
  if (!Array.isArray(manifest) || manifest.length !== 1) return 'it does not hold exactly one image (manifest.json)';
  const tags: unknown = (manifest[0] as { RepoTags?: unknown }).RepoTags ?? [];
  if (!Array.isArray(tags) || !tags.every(named)) return `it names ${JSON.stringify(tags)} (manifest.json)`;
  if (files.repositories !== undefined) {
    const problem = repositoriesProblem(files.repositories, named);
    if (problem) return problem;
  }
  if (files.index !== undefined) {
    const problem = indexProblem(files.index, named);
    if (problem) return problem;
  }
  return undefined;
}

/** The legacy `repositories` file: `{ "name": { "tag": "<id>" } }`. */
function repositoriesProblem(text: string, named: (name: unknown) => boolean): string | undefined {
  let repos: unknown;
  try {
    repos = JSON.parse(text);
  } catch {
    return 'its repositories file is not JSON';
  }
  if (typeof repos !== 'object' || repos === null) return 'its repositories file is not an object';
  for (const [name, tags] of Object.entries(repos)) {
    const refs = typeof tags === 'object' && tags !== null ? Object.keys(tags).map((t) => `${name}:${t}`) : [name];
    const other = refs.find((ref) => !named(ref));
    if (other) return `it names ${other} (repositories)`;
  }
  return undefined;
}

/** An OCI index.json: names are its manifests' annotations. */
function indexProblem(text: string, named: (name: unknown) => boolean): string | undefined {
  let index: { manifests?: { annotations?: Record<string, unknown> }[] };
  try {
    index = JSON.parse(text);
  } catch {
    return 'its index.json is not JSON';
  }
  for (const m of index.manifests ?? []) {
    for (const key of ['io.containerd.image.name', 'org.opencontainers.image.ref.name']) {
      const name = m.annotations?.[key];
      // Strict: a bare ref.name ("latest") is refused too; buildah's docker-archive has no index.json.
      if (name !== undefined && !named(name)) return `it names ${String(name)} (index.json)`;
    }
  }
  return undefined;
}

/** Reads the naming files of the archive at `file` (with the system's tar, extracting nothing to disk). */
export async function readArchiveNames(file: string): Promise<ArchiveNames> {
  const { stdout } = await run('tar', ['-tf', file], { maxBuffer: MAX_READ });
  const members = new Set(stdout.split('\n').map((m) => m.replace(/^\.\//, '')));
  const read = async (member: string) =>
    members.has(member) ? (await run('tar', ['-xOf', file, member], { maxBuffer: MAX_READ })).stdout : undefined;
  const [manifest, repositories, index] = await Promise.all([
    read('manifest.json'),
    read('repositories'),
    read('index.json'),
  ]);
  return {
    ...(manifest !== undefined ? { manifest } : {}),
    ...(repositories !== undefined ? { repositories } : {}),
    ...(index !== undefined ? { index } : {}),
  };
}

/** A base image the build was given: its name and its layers' diff ids as the engine holds it (RootFS.Layers). */
export interface BaseLayers {
  ref: string;
  layers: string[];
}

/** At most this many entries in an archive (buildah's holds a manifest, a config and one file a layer). */
const MAX_ENTRIES = 10_000;
/** A file kept as text to read as JSON (the config, manifest.json): at most this size, and this much in all. */
const MAX_JSON = 1024 * 1024;
const DIFF_ID = /^sha256:[0-9a-f]{64}$/;

/** A regular file of the archive: its sha256 and size, its content's when gzipped, and its text when it may be JSON. */
interface ArchiveFile {
  sha256: string;
  size: number;
  /** The sha256 of what it holds gzipped (as buildah writes a layer): a layer's diff id is of the tar inside. */
  gunzipped?: string;
  text?: string;
}

/** A gzipped layer is read out to at most this many bytes (a layer of the builder's store, 6 GiB by default, is far below). */
const MAX_GUNZIPPED = 64 * 1024 ** 3;

/** A member's name as `docker load` opens it: no `./`, no leading `/`, normalized. */
const memberName = (name: string) => path.posix.normalize(`/${name}`).slice(1).replace(/\/$/, '');

/** The sha256 of the bytes a gzip stream holds, fed chunk by chunk; undefined when they are not gzip or too many. */
function gunzipHash(): { write(chunk: Buffer): Promise<void>; digest(): Promise<string | undefined> } {
  const gunzip: Gunzip = createGunzip();
  const hash = createHash('sha256');
  let out = 0;
  let broken = false;
  gunzip.on('data', (chunk: Buffer) => {
    out += chunk.length;
    hash.update(chunk);
    if (out > MAX_GUNZIPPED) gunzip.destroy(new Error('too large'));
  });
  gunzip.on('error', () => (broken = true));
  return {
    async write(chunk) {
      if (!broken && !gunzip.write(chunk)) await once(gunzip, 'drain').catch(() => (broken = true));
    },
    async digest() {
      if (!broken) gunzip.end();
      await finished(gunzip).catch(() => (broken = true));
      return broken ? undefined : `sha256:${hash.digest('hex')}`;
    },
  };
}

/**
 * Reads the archive once, streaming: each regular file's sha256 computed on the fly (no
 * layer is held in memory), a gzipped one's content's too, the text of the small ones that
 * start as JSON kept (bounded), the names of the others (links, folders). A name given twice
 * is refused: `docker load` would take the last, this check the first.
 */
async function readMembers(file: string): Promise<Map<string, ArchiveFile | 'other'> | string> {
  const members = new Map<string, ArchiveFile | 'other'>();
  let kept = 0;
  const tar = extract();
  const input = createReadStream(file);
  input.on('error', (err) => tar.destroy(err));
  input.pipe(tar);
  try {
    for await (const entry of tar) {
      const name = memberName(entry.header.name);
      if (members.has(name)) return `it holds ${name} twice`;
      if (members.size >= MAX_ENTRIES) return `it holds more than ${MAX_ENTRIES} files`;
      if (entry.header.type !== 'file' && entry.header.type !== 'contiguous-file') {
        members.set(name, 'other');
        entry.resume();
        continue;
      }
      const hash = createHash('sha256');
      const head: Buffer[] = [];
      let gzip: ReturnType<typeof gunzipHash> | undefined;
      let size = 0;
      let json = entry.header.size <= MAX_JSON && kept + entry.header.size <= 8 * MAX_JSON;
      for await (const chunk of entry as AsyncIterable<Buffer>) {
        if (size === 0 && chunk.length && chunk[0] !== 0x7b && chunk[0] !== 0x5b) json = false;
        if (size === 0 && chunk[0] === 0x1f && chunk[1] === 0x8b) gzip = gunzipHash();
        hash.update(chunk);
        await gzip?.write(chunk);
        size += chunk.length;
        if (json) head.push(chunk);
      }
      if (json) kept += size;
      const gunzipped = await gzip?.digest();
      members.set(name, {
        sha256: `sha256:${hash.digest('hex')}`,
        size,
        ...(gunzipped ? { gunzipped } : {}),
        ...(json && size ? { text: Buffer.concat(head).toString('utf8') } : {}),
      });
    }
  } catch (err) {
    return `it is not a readable tar (${(err as Error).message})`;
  } finally {
    input.destroy();
  }
  return members;
}

/**
 * Why the image in the archive at `file` may not be loaded, or undefined. `docker load` takes
 * a layer whose chain of diff ids the engine already holds without reading its file (the
 * builder's archive carries its base's layers as empty files), so an archive could name
 * another repository's layers and get them without sending them. Its config's
 * rootfs.diff_ids must be one of `bases`' layers (all of them, in order; none is fine too),
 * then layers whose files are in the archive and hash to their diff ids (the tar as
 * stored, or inside its gzip: buildah's push writes each new layer gzipped).
 * `manifest.json` holding exactly one image is archiveNamesProblem's to check.
 */
export async function archiveLayersProblem(file: string, bases: BaseLayers[]): Promise<string | undefined> {
  const members = await readMembers(file);
  if (typeof members === 'string') return members;
  const json = (name: unknown): unknown => {
    const member = typeof name === 'string' ? members.get(memberName(name)) : undefined;
    try {
      return typeof member === 'object' && member.text !== undefined ? JSON.parse(member.text) : undefined;
    } catch {
      return undefined;
    }
  };
  const image = (json('manifest.json') as { Config?: unknown; Layers?: unknown }[] | undefined)?.[0];
  const files = image?.Layers;
  if (!Array.isArray(files) || !files.every((f) => typeof f === 'string')) return 'its manifest.json lists no layers';
  const config = json(image?.Config) as { rootfs?: { diff_ids?: unknown } } | undefined;
  if (!config) return `its config ${String(image?.Config)} is not in it as a JSON file`;
  const diffIds = config.rootfs?.diff_ids;
  if (!Array.isArray(diffIds) || !diffIds.every((d) => typeof d === 'string' && DIFF_ID.test(d)))
    return "its config's rootfs.diff_ids is not a list of sha256 digests";
  if (diffIds.length !== files.length)
    return `its config names ${diffIds.length} layers and its manifest.json ${files.length}`;
  const same = (base: BaseLayers) => base.layers.findIndex((d, i) => diffIds[i] !== d);
  const from = bases
    .filter((b) => b.layers.length <= diffIds.length && same(b) === -1)
    .sort((a, b) => b.layers.length - a.layers.length)[0];
  for (let i = from?.layers.length ?? 0; i < diffIds.length; i++) {
    const member = members.get(memberName(files[i]));
    if (typeof member === 'object' && (member.sha256 === diffIds[i] || member.gunzipped === diffIds[i])) continue;
    const held =
      member === undefined
        ? 'it holds no file'
        : member === 'other'
          ? 'it is no regular file'
          : `it holds ${member.size} bytes of ${member.sha256}${member.gunzipped ? `, gzip of ${member.gunzipped}` : ''}`;
    const near = bases.find((b) => same(b) > 0);
    const base = near
      ? `, and it is not of a base image: ${near.ref}'s layer ${same(near)} is ${near.layers[same(near)]}`
      : ', and it is not of a base image';
    return `its layer ${i} (${diffIds[i]}) is not in it (${files[i]}: ${held})${base}`;
  }
  return undefined;
}
