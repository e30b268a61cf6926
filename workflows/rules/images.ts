/**
 * Image references and where an image may come from (docs/services.md,
 * "Images"): an image already on the worker's host is used as it is (the
 * operator put it there); any other is pulled only from a registry the
 * operator allows (`repo add --allow-registry`, DRYDOCK_ALLOWED_REGISTRIES),
 * once, at a snapshot build, and pinned by digest in the snapshot's record;
 * a session never pulls. And never an image drydock made from a repository
 * (repoMadeImage). Pure: the caller says whether the image is on the host.
 */

/** A parsed image reference, normalized the way Docker does (docker.io, library/). */
export interface ImageReference {
  /** "docker.io", "ghcr.io", "127.0.0.1:5000"… */
  registry: string;
  /** "library/postgres", "org/app". */
  repository: string;
  tag?: string;
  /** "sha256:<64 hex>". */
  digest?: string;
}

const DOCKER_HUB = 'docker.io';
const HUB_ALIASES = new Set(['docker.io', 'index.docker.io', 'registry-1.docker.io']);
const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const DOMAIN =
  /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const DIGEST = /^sha256:[0-9a-f]{64}$/;

/** Parses `ref`; a malformed one is a message saying what is wrong with it. */
export function parseImageReference(ref: string): ImageReference | { problem: string } {
  const bad = (why: string) => ({ problem: `"${ref.slice(0, 300)}" is not an image reference: ${why}` });
  if (!ref || ref.length > 512 || /\s/.test(ref)) return bad('empty, too long or with spaces');
  const [rest, digest] = ref.split('@', 2) as [string, string | undefined];
  if (digest !== undefined && !DIGEST.test(digest)) return bad('its digest must be sha256:<64 hex digits>');
  const lastSlash = rest.lastIndexOf('/');
  const colon = rest.lastIndexOf(':');
  const tag = colon > lastSlash ? rest.slice(colon + 1) : undefined;
  const name = tag === undefined ? rest : rest.slice(0, colon);
  if (tag !== undefined && !TAG.test(tag)) return bad(`tag "${tag}" has characters a tag cannot have`);
  const parts = name.split('/');
  const first = parts[0];
  const hasDomain = parts.length > 1 && (first.includes('.') || first.includes(':') || first === 'localhost');
  const registry = hasDomain ? first.toLowerCase() : DOCKER_HUB;
  if (hasDomain && !DOMAIN.test(first)) return bad(`registry "${first}" is not a host name`);
  const path = hasDomain ? parts.slice(1) : parts;
  if (!path.length || !path.every((c) => COMPONENT.test(c))) {
    return bad('a name is lowercase letters, digits and separators (. _ -), in parts split by /');
  }
  const hub = HUB_ALIASES.has(registry);
  const repository = hub && path.length === 1 ? `library/${path[0]}` : path.join('/');
  return {
    registry: hub ? DOCKER_HUB : registry,
    repository,
    ...(tag !== undefined ? { tag } : {}),
    ...(digest ? { digest } : {}),
  };
}

/** The reference written back in full: `registry/repository[:tag][@digest]`. */
export function formatImageReference(ref: ImageReference): string {
  return `${ref.registry}/${ref.repository}${ref.tag ? `:${ref.tag}` : ''}${ref.digest ? `@${ref.digest}` : ''}`;
}

/** The reference pinned to the digest a pull found: what the snapshot records and sessions use. */
export function pinnedReference(ref: ImageReference, digest: string): string {
  return `${ref.registry}/${ref.repository}@${digest}`;
}

/** A registry as the operator writes it: "host" or "host:port", lowercase, Docker Hub's aliases as docker.io. */
export function normalizeRegistry(registry: string): string {
  const r = registry.trim().toLowerCase().replace(/\/+$/, '');
  return HUB_ALIASES.has(r) ? DOCKER_HUB : r;
}

/** Whether `value` is a registry name the operator may list (host or host:port, no scheme, no path). */
export function isRegistryName(value: string): boolean {
  return DOMAIN.test(value.trim()) && !value.includes('/');
}

/**
 * Whether Docker would take `ref` for an image id: 64 hex digits, "sha256:" and hex, or any
 * shorter run of hex digits (a prefix of an id, which Docker resolves when no name matches).
 */
export function isImageId(ref: string): boolean {
  return /^(sha256:)?[0-9a-f]{1,64}$/i.test(ref);
}

/** Where an image comes from, or why it may not. */
export type ImageSource =
  | { from: 'host'; ref: string }
  | { from: 'registry'; ref: string; registry: string }
  | { from: 'refused'; problem: string };

/**
 * Decides where an image named at `field` comes from: the host when it is
 * there, else its registry when the operator allows that registry; anything
 * else is refused naming the image and the setting that would allow it.
 */
export function imageSource(args: {
  image: string;
  field: string;
  onHost: boolean;
  allowed: string[];
  repo: string;
}): ImageSource {
  const { image, field, onHost, allowed, repo } = args;
  const parsed = parseImageReference(image);
  if ('problem' in parsed) return { from: 'refused', problem: `${field}: ${parsed.problem}` };
  if (isImageId(image)) {
    return {
      from: 'refused',
      problem:
        `${field}: ${image} reads as an image id (or the start of one), which Docker resolves to any image on the ` +
        "worker's host, another repository's snapshot included: name the image by repository and tag, or by digest",
    };
  }
  if (onHost) return { from: 'host', ref: image };
  const registries = allowed.map(normalizeRegistry);
  if (registries.includes(parsed.registry)) return { from: 'registry', ref: image, registry: parsed.registry };
  return {
    from: 'refused',
    problem:
      `${field}: image ${image} is not on the worker's host and its registry ${parsed.registry} is not allowed for ${repo} ` +
      `(allowed: ${registries.join(', ') || 'none'}): allow it with 'drydock repo add ${repo} --allow-registry ${parsed.registry}' ` +
      `or DRYDOCK_ALLOWED_REGISTRIES, or load the image onto the worker's host`,
  };
}

/** Images drydock makes from a repository's content, by their `drydock.image` label (the snapshots': sandbox/snapshots.ts). */
const REPO_MADE: Record<string, string> = {
  snapshot: 'a snapshot',
  repo: "a repository's Dockerfile build",
  environment: "a repository's environment",
  'service-build': "a repository's compose service build",
};

/**
 * Why a repo may not start from the host's image with these labels, if it
 * may not: drydock made it from a repository (a snapshot, a repo's Dockerfile
 * build, an environment), so it holds that repository's source, history and
 * whatever its setup wrote. Labels are inherited: an image built on one carries them.
 */
export function repoMadeImage(image: string, labels: Record<string, string>): string | undefined {
  const snapshot = Object.keys(labels).some((l) => l.startsWith('drydock.snapshot.'));
  const kind = labels['drydock.image'] ?? '';
  const made = snapshot ? REPO_MADE.snapshot : Object.hasOwn(REPO_MADE, kind) ? REPO_MADE[kind] : undefined;
  if (!made) return undefined;
  return (
    `image ${image} was made by drydock from a repository (${made}): it holds that repository's source and setup, ` +
    'so no repository may start from it; name an image the operator put on the host'
  );
}
