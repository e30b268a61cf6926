/**
 * A compose service's `build:` (docs/services.md): its image built from the
 * repo's context and Dockerfile (or `dockerfile_inline`) at the snapshot's
 * commit, whole, by drydock's isolated builder (sandbox/builder.ts), never by
 * the host's daemon, with the same base image rules as an environment's
 * Dockerfile (on the host and made by no repository, or pulled from an
 * allowed registry; pinned by id). It is named by repo and content hash
 * (`drydock-svc-<slug>:<service>-<hash>`), so a changed context or Dockerfile
 * builds again and the same content never does, and labelled as a
 * repository's build: no repository may start FROM it or name it as its own
 * service's image, but the repo that built it runs it as that service
 * (ownServiceBuild), exactly as an image service runs.
 */
import { git } from '../repos/git';
import type { ServiceBuild, ServiceSpec } from '../workflows/services';
import { dockerfileBases } from './dockerfile-bases';
import { imageStoreOf, type SandboxProvider } from './provider';
import {
  allowedImage,
  buildIn,
  EnvironmentError,
  hashOf,
  untar,
  withContext,
  type EnvironmentBuild,
  type ImageFetcher,
} from './repo-image';
import { repoSlug } from './snapshots';

/** The labels of a service's built image: what made it, and for which repo and service. */
export const SERVICE_BUILD_LABELS = {
  image: 'drydock.image',
  repo: 'drydock.service.repo',
  name: 'drydock.service.name',
} as const;
/** The `drydock.image` of a service's built image (workflows/rules/images.ts counts it a repository's; drydock's own service images are `service`). */
export const SERVICE_BUILD_KIND = 'service-build';

/** The image name of a repo's built services (tagged `<service>-<hash>`). */
export const serviceImageName = (slug: string) => `drydock-svc-${slug}`;

/**
 * Whether the host's image with these labels is one of `repo`'s own service
 * builds: the only image made from a repository a service may run, and only
 * in that repo's sandboxes.
 */
export function ownServiceBuild(labels: Record<string, string>, repo: string | undefined): boolean {
  return (
    repo !== undefined &&
    labels[SERVICE_BUILD_LABELS.image] === SERVICE_BUILD_KIND &&
    labels[SERVICE_BUILD_LABELS.repo] === repoSlug(repo)
  );
}

/**
 * The services with each `build:` built (or found, by its content hash) and
 * named by the image it made; the others as they are.
 */
export async function builtServices(
  provider: SandboxProvider,
  at: { mirror: string; commit: string },
  services: ServiceSpec[],
  repo: string,
  fetchImage: ImageFetcher,
  settings: EnvironmentBuild,
): Promise<ServiceSpec[]> {
  const out: ServiceSpec[] = [];
  for (const service of services) {
    if (!service.build) {
      out.push(service);
      continue;
    }
    const { build, ...rest } = service;
    const image = await ensureServiceBuild(provider, at, { ...rest, build }, repo, fetchImage, settings);
    out.push({ ...rest, image });
  }
  return out;
}

/** One service's image: built in the isolated builder unless this content's is on the host already. */
async function ensureServiceBuild(
  provider: SandboxProvider,
  at: { mirror: string; commit: string },
  service: ServiceSpec & { build: ServiceBuild },
  repo: string,
  fetchImage: ImageFetcher,
  settings: EnvironmentBuild,
): Promise<string> {
  const field = `${service.source}.build`;
  const { build } = service;
  const { text, tree } = await buildSources(at, build, field);
  const where = `${field}.${build.inline !== undefined ? 'dockerfile_inline' : `dockerfile (${build.dockerfile})`}`;
  const refs = dockerfileBases(text, build.args);
  if ('problem' in refs) throw new EnvironmentError(`${where}: ${refs.problem}`);
  const bases: { ref: string; id: string }[] = [];
  for (const base of refs) {
    const baseField = `${where}: ${base.instruction}`;
    await fetchImage(base.ref, baseField);
    bases.push({ ref: base.ref, id: (await allowedImage(provider, base.ref, baseField)).id });
  }
  // The repo's result as it is (no layer of drydock's: the builder tags it directly): a service
  // runs its image's own user, entrypoint and command.
  const hash = hashOf([
    ...bases.map((b) => `${b.ref}@${b.id}`),
    text,
    tree,
    JSON.stringify(build.args),
    build.target ?? '',
  ]);
  const slug = repoSlug(repo);
  const tag = `${serviceImageName(slug)}:${service.name}-${hash.slice(0, 12)}`;
  if (await imageStoreOf(provider).image(tag)) return tag;
  await withContext(async (context) => {
    await untar(at.mirror, `${at.commit}:${build.context}`, context);
    await buildIn(settings, field, {
      builderImage: await settings.builderImage(),
      tag,
      labels: {
        [SERVICE_BUILD_LABELS.image]: SERVICE_BUILD_KIND,
        [SERVICE_BUILD_LABELS.repo]: slug,
        [SERVICE_BUILD_LABELS.name]: service.name,
      },
      repo: { dockerfile: text, context, args: build.args, ...(build.target ? { target: build.target } : {}) },
      bases,
      egress: settings.egress,
      ...(settings.extraCaCerts ? { extraCaCerts: settings.extraCaCerts } : {}),
      ...(settings.limits ? { limits: settings.limits } : {}),
      ...(settings.cacheDir ? { cacheDir: settings.cacheDir } : {}),
      owner: `${settings.owner} service ${service.name}`,
      log: settings.log,
    });
  });
  return tag;
}

/** The build's Dockerfile text (the repo's file, or inline) and its context's tree at the commit. */
async function buildSources(
  { mirror, commit }: { mirror: string; commit: string },
  build: ServiceBuild,
  field: string,
): Promise<{ text: string; tree: string }> {
  const tree = await git(['rev-parse', `${commit}:${build.context}`], mirror).catch(() => {
    throw new EnvironmentError(`${field}.context: ${build.context || '.'} is not a folder of the repository`);
  });
  if (build.inline !== undefined) return { text: build.inline, tree: tree.trim() };
  const blob = await git(['rev-parse', `${commit}:${build.dockerfile}`], mirror).catch(() => {
    throw new EnvironmentError(`${field}.dockerfile: ${build.dockerfile} is not in the repository`);
  });
  return { text: await git(['cat-file', 'blob', blob.trim()], mirror), tree: tree.trim() };
}
