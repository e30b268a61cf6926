/**
 * Images of common services (PostgreSQL 17, Redis), built on this host from
 * Debian trixie's packages, since no image registry is reachable: what tests,
 * benchmarks and an operator without a registry name as a repo's services.
 * Each is tagged by the hash of its recipe (`drydock-service-<name>:<hash>`),
 * so it is built once per machine and rebuilt only when the recipe changes.
 * The PostgreSQL recipe is the deployment's own (infra/images), one way to
 * build it. Run directly (`tsx sandbox-images/service-images.ts [name…]`) to
 * build and print the tags.
 */
import { createHash } from 'node:crypto';
import { copyFile, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ensureDebian, imageExists, run, toStderr, type Progress } from './base-image';

const ROOT = path.join(__dirname, '..');

/** A service image's recipe: its Dockerfile and the files it copies, relative to the repo's root. */
interface Recipe {
  dockerfile: string;
  files: string[];
  /** What it holds, for the image's version label and progress lines. */
  version: string;
}

export const SERVICE_RECIPES = {
  postgres: {
    dockerfile: 'infra/images/postgresql.Dockerfile',
    files: ['infra/images/postgres-entrypoint.sh'],
    version: '17',
  },
  redis: { dockerfile: 'sandbox-images/services/redis.Dockerfile', files: [], version: '8' },
} satisfies Record<string, Recipe>;

export type ServiceImageName = keyof typeof SERVICE_RECIPES;

/** `drydock-service-<name>:<version>-<first 12 hex of the sha256 of its recipe>`. */
export async function serviceImageTag(name: ServiceImageName): Promise<string> {
  const recipe: Recipe = SERVICE_RECIPES[name];
  const hash = createHash('sha256');
  for (const file of [recipe.dockerfile, ...recipe.files]) {
    hash
      .update(file)
      .update('\0')
      .update(await readFile(path.join(ROOT, file)));
  }
  return `drydock-service-${name}:${recipe.version}-${hash.digest('hex').slice(0, 12)}`;
}

/** Returns the tag of a service image, building it when this host lacks it (progress on stderr). */
export async function ensureServiceImage(name: ServiceImageName, progress: Progress = toStderr): Promise<string> {
  const tag = await serviceImageTag(name);
  if (await imageExists(tag)) return tag;
  await ensureDebian(progress);
  progress(`building service image ${tag} from Debian's packages (first run only; about a minute)`);
  const recipe: Recipe = SERVICE_RECIPES[name];
  const context = await mkdtemp(path.join(tmpdir(), 'drydock-service-image-'));
  try {
    for (const file of recipe.files) await copyFile(path.join(ROOT, file), path.join(context, path.basename(file)));
    const labels = ['--label', 'drydock.image=service', '--label', `drydock.service=${name}`];
    // --network host: the trusted recipe's apt-get only; containers of the image run without a network.
    const dockerfile = path.join(ROOT, recipe.dockerfile);
    await run('docker', ['build', '--network', 'host', ...labels, '-t', tag, '-f', dockerfile, context], true);
  } finally {
    await rm(context, { recursive: true, force: true });
  }
  return tag;
}

if (require.main === module) {
  const names = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(SERVICE_RECIPES);
  (async () => {
    for (const name of names) {
      if (!(name in SERVICE_RECIPES))
        throw new Error(`unknown service image ${name} (${Object.keys(SERVICE_RECIPES).join(', ')})`);
      console.log(await ensureServiceImage(name as ServiceImageName));
    }
  })().catch((err: Error) => {
    console.error(`drydock: ${err.message}`);
    process.exit(1);
  });
}
