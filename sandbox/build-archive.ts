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
import { promisify } from 'node:util';

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
