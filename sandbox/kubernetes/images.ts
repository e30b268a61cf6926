/**
 * Where an image comes from on Kubernetes, as pure functions (unit-tested).
 * The worker cannot see its node's images through the API, so an image is
 * "on the host" only when drydock knows it as its own: a snapshot in the
 * node's store (./snapshot-store.ts, answered by the provider), or one of
 * drydock's service images (sandbox-images/service-images.ts), which the
 * operator loads onto the node. Any other image is a registry's: it goes
 * through the allowed-registries rule (workflows/rules/images.ts) like
 * Docker's, and is run only pinned by a digest the repo wrote (the node
 * pulls it, so drydock cannot pin a tag to what it got, as a Docker pull
 * does). A service container whose image is not pinned by digest is never
 * pulled (`imagePullPolicy: Never`): the node runs only what it was given.
 */
import { parseImageReference } from '../../workflows/rules/images';
import { SandboxError, type ImageInfo } from '../provider';

/**
 * drydock's own service images and the uid:gid their image's USER (a name)
 * has: the kubelet verifies runAsNonRoot only for a numeric user, so a
 * service of one runs as these. Debian's packages give them these ids in
 * the images built from the recipes (infra/images/postgresql.Dockerfile,
 * sandbox-images/services/redis.Dockerfile).
 */
export const OWN_SERVICE_USERS: Record<string, { uid: number; gid: number }> = {
  postgres: { uid: 100, gid: 102 },
  redis: { uid: 100, gid: 101 },
};

/**
 * The service image of drydock's that `ref` names, by either of its names
 * (`drydock-service-postgres:17-<hash>`, `drydock/postgres:17`), never with a
 * registry or a digest; else undefined.
 */
export function ownServiceImage(ref: string): string | undefined {
  const match = /^(?:drydock-service-|drydock\/)([a-z]+)(?::[\w][\w.-]{0,127})?$/.exec(ref);
  return match && match[1] in OWN_SERVICE_USERS ? match[1] : undefined;
}

/** The digest `ref` is pinned by ("sha256:…"), or undefined. */
export function pinnedDigest(ref: string): string | undefined {
  const parsed = parseImageReference(ref);
  return 'problem' in parsed ? undefined : parsed.digest;
}

/**
 * What the provider says of an image that is no stored snapshot: drydock's
 * own service images are on the host; any other is a registry's, whose node
 * pulls it (`fromRegistry`: the allowed-registries rule decides).
 */
export function imageInfoOf(ref: string): ImageInfo {
  const own = ownServiceImage(ref) !== undefined;
  return { id: ref, sizeBytes: 0, labels: {}, env: [], ...(own ? {} : { fromRegistry: true }) };
}

/**
 * A service container's pull policy: the operator's for an image pinned by
 * digest (an allowed registry's, checked at the snapshot build), else Never
 * (drydock's own images, loaded onto the node): no tag is ever pulled.
 */
export function serviceImagePullPolicy(
  image: string,
  configured: 'Always' | 'IfNotPresent' | 'Never',
): 'Always' | 'IfNotPresent' | 'Never' {
  return pinnedDigest(image) ? configured : 'Never';
}

/**
 * The digest a snapshot build records for a registry's image: the one the
 * repo wrote. The node pulls the image itself, so a tag alone is refused.
 */
export function digestToRecord(ref: string): string {
  const digest = pinnedDigest(ref);
  if (digest) return digest;
  throw new SandboxError(
    `image ${ref}: on Kubernetes the cluster's node pulls a registry's image itself, so drydock cannot pin a tag ` +
      `to what it got: name the image by digest (${ref.split('@')[0]}@sha256:<64 hex digits>)`,
    'permanent',
  );
}
