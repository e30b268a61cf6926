/**
 * Images of common services (PostgreSQL 17, Redis 8), built on this host from
 * Debian trixie's packages, since no image registry is reachable: what tests,
 * benchmarks and a repo's services name where no registry serves the official
 * images. Each keeps its official image's contract (entrypoint, arguments,
 * environment, init scripts: docs/services.md) under a stable name a repo can
 * write, `drydock/<name>:<version>` (and `drydock/<name>:latest`); a label holds
 * the hash of its recipe, so it is built once per machine and again only when
 * the recipe changes. Built by `drydock images build`, or on first use (a
 * snapshot build or session whose service names it). The PostgreSQL recipe is
 * the deployment's own (infra/images).
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFile, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { ensureDebian, run, toStderr, type Progress } from './base-image';

const ROOT = path.join(__dirname, '..');

/** On a service image: the sha256 of the recipe it was built from. */
export const SERVICE_RECIPE_LABEL = 'drydock.recipe';

/** A service image's recipe: its Dockerfile and the files it copies, relative to the repo's root. */
interface Recipe {
  dockerfile: string;
  files: string[];
  /** The major version it holds: its stable name's tag. */
  version: string;
}

export const SERVICE_RECIPES = {
  postgres: {
    dockerfile: 'infra/images/postgresql.Dockerfile',
    files: ['infra/images/postgres-entrypoint.sh'],
    version: '17',
  },
  redis: {
    dockerfile: 'sandbox-images/services/redis.Dockerfile',
    files: ['sandbox-images/services/redis-entrypoint.sh'],
    version: '8',
  },
} satisfies Record<string, Recipe>;

export type ServiceImageName = keyof typeof SERVICE_RECIPES;

/** The stable name a repo writes for a service image: `drydock/postgres:17`. */
export function serviceImageName(name: ServiceImageName): string {
  return `drydock/${name}:${SERVICE_RECIPES[name].version}`;
}

/**
 * The service image an image reference names (`drydock/postgres:17`,
 * `drydock/redis:latest`, `drydock/redis`), or undefined for any other image.
 */
export function namedServiceImage(ref: string): ServiceImageName | undefined {
  const match = /^drydock\/([a-z]+)(?::([\w.-]+))?$/.exec(ref);
  if (!match || !(match[1] in SERVICE_RECIPES)) return undefined;
  const name = match[1] as ServiceImageName;
  const tag = match[2] ?? 'latest';
  return tag === 'latest' || tag === SERVICE_RECIPES[name].version ? name : undefined;
}

/** The sha256 of a recipe: its Dockerfile and the files it copies, with their names. */
async function recipeHash(name: ServiceImageName): Promise<string> {
  const recipe: Recipe = SERVICE_RECIPES[name];
  const hash = createHash('sha256');
  for (const file of [recipe.dockerfile, ...recipe.files]) {
    hash
      .update(file)
      .update('\0')
      .update(await readFile(path.join(ROOT, file)));
  }
  return hash.digest('hex');
}

/** The recipe hash of the image `ref` on this host ('' without the label), or undefined when it is missing. */
async function builtRecipe(ref: string): Promise<string | undefined> {
  const format = `{{index .Config.Labels "${SERVICE_RECIPE_LABEL}"}}`;
  return promisify(execFile)('docker', ['image', 'inspect', '--format', format, ref]).then(
    ({ stdout }) => stdout.trim().replace(/^<no value>$/, ''),
    () => undefined,
  );
}

/**
 * Returns the stable name of a service image, building it when this host
 * lacks it or holds one of another recipe (progress on stderr).
 */
export async function ensureServiceImage(name: ServiceImageName, progress: Progress = toStderr): Promise<string> {
  const tag = serviceImageName(name);
  const hash = await recipeHash(name);
  if ((await builtRecipe(tag)) === hash) return tag;
  await ensureDebian(progress);
  progress(`building service image ${tag} from Debian's packages (first use only; about a minute)`);
  const recipe: Recipe = SERVICE_RECIPES[name];
  const context = await mkdtemp(path.join(tmpdir(), 'drydock-service-image-'));
  try {
    for (const file of recipe.files) await copyFile(path.join(ROOT, file), path.join(context, path.basename(file)));
    const labels = ['--label', 'drydock.image=service', '--label', `drydock.service=${name}`];
    labels.push('--label', `${SERVICE_RECIPE_LABEL}=${hash}`);
    const tags = ['-t', tag, '-t', `drydock/${name}:latest`];
    // --network host: the trusted recipe's apt-get only; containers of the image run without a network.
    const dockerfile = path.join(ROOT, recipe.dockerfile);
    await run('docker', ['build', '--network', 'host', ...labels, ...tags, '-f', dockerfile, context], true);
  } finally {
    await rm(context, { recursive: true, force: true });
  }
  return tag;
}

/** Builds the service images `names` (all without any) on this host; returns their stable names. */
export async function buildServiceImages(names: string[], progress: Progress = toStderr): Promise<string[]> {
  const known = Object.keys(SERVICE_RECIPES);
  const unknown = names.filter((n) => !known.includes(n));
  if (unknown.length)
    throw new Error(`unknown service image ${unknown.join(', ')}: drydock builds ${known.join(', ')}`);
  const built: string[] = [];
  for (const name of names.length ? names : known)
    built.push(await ensureServiceImage(name as ServiceImageName, progress));
  return built;
}

// Run as a script (bin/bundled.js: in a bundle every source has the entry's module).
if (process.argv[1] === __filename) {
  buildServiceImages(process.argv.slice(2)).then(
    (tags) => tags.forEach((tag) => console.log(tag)),
    (err: Error) => {
      console.error(`drydock: ${err.message}`);
      process.exit(1);
    },
  );
}
