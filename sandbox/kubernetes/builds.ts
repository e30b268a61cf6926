/**
 * A repo's environment for sandboxes that are pods: built on the worker's
 * Docker engine by the isolated builder (sandbox/builder.ts: buildah in
 * gVisor, no Docker socket, no host network, egress only through the proxy),
 * exactly as for a Docker worker, then pushed to the registry the cluster's
 * nodes pull from (DRYDOCK_K8S_BUILD_REGISTRY). Pods run it by the digest
 * the push returned, so what a pod runs is the content that was built, not
 * whatever a tag points at later. Why this and not a builder pod:
 * docs/kubernetes.md#builds-on-the-workers-docker-engine.
 */
import { execFile } from 'node:child_process';
import type { DockerProvider } from '../docker/provider';
import type { EnvironmentBuilds } from '../provider';

/** A registry and optional path the nodes pull from: `host[:port][/path…]`, lower case as image references are. */
export const BUILD_REGISTRY = /^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:\d{1,5})?(\/[a-z0-9]+([._-][a-z0-9]+)*)*$/;

/** How long a push may take (a large environment over a slow link): then it fails and the activity retries. */
const PUSH_TIMEOUT_MS = 15 * 60_000;

/** The worker's Docker engine builds; the registry carries the result to the nodes, pinned by digest. */
export class RegistryBuilds implements EnvironmentBuilds {
  constructor(
    readonly engine: DockerProvider,
    /** `host[:port][/path]`: each image goes to `<registry>/<its name>`. */
    readonly registry: string,
  ) {
    if (!BUILD_REGISTRY.test(registry)) throw new Error(`not a registry and path: ${registry}`);
  }

  /** Whether `ref` names an image this worker pushed (the engine knows what it is). */
  owns(ref: string): boolean {
    return ref.startsWith(`${this.registry}/`);
  }

  /**
   * Pushes the engine's image `tag` (`drydock-env-<slug>:<hash>`) as
   * `<registry>/drydock-env-<slug>:<hash>` and returns
   * `<registry>/drydock-env-<slug>@sha256:…`. Pushing again what the
   * registry has sends no layer (the engine asks first) and gives the same
   * digest, so a retry, or a session after its snapshot build, is cheap.
   */
  async publish(tag: string): Promise<string> {
    const colon = tag.lastIndexOf(':');
    if (colon <= 0 || tag.includes('/') || tag.includes('@')) throw new Error(`not a local image tag: ${tag}`);
    const repository = `${this.registry}/${tag.slice(0, colon)}`;
    const remote = `${repository}:${tag.slice(colon + 1)}`;
    await docker(['tag', tag, remote], 60_000);
    const out = await docker(['push', remote], PUSH_TIMEOUT_MS);
    const digest = /digest: (sha256:[0-9a-f]{64})/.exec(out)?.[1];
    if (!digest) throw new Error(`docker push ${remote} printed no digest: ${out.slice(-500)}`);
    return `${repository}@${digest}`;
  }
}

/** The docker CLI (DOCKER_HOST as the worker has it), as sandbox/builder.ts runs it; stdout, or an error with stderr. */
function docker(args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('docker', args, { timeout: timeoutMs, maxBuffer: 4 << 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`docker ${args[0]} ${args[1]} failed: ${(stderr || err.message).trim().slice(-1000)}`));
      else resolve(stdout);
    });
  });
}
