/**
 * Kubernetes's services (ServiceRuntime, sandbox/provider.ts): containers of
 * the sandbox's pod, made with it (./service-containers.ts) because a pod's
 * containers are fixed at its creation. "Starting" one finds it in its pod;
 * its state is its container's status, its health the kubelet's readiness
 * probe (confirmed by a check of drydock's own), its checks and readiness
 * commands run through the exec subresource in its container, its log is the
 * container's. It dies with its pod: teardown and the reaper remove the pod.
 * A service's data is not captured into a snapshot here yet, and the cluster's
 * nodes pull images themselves, a registry's only pinned by digest
 * (./images.ts, docs/kubernetes.md).
 */
import { Writable } from 'node:stream';
import type { CoreV1Api, KubeConfig, V1Pod } from '@kubernetes/client-node';
import {
  SandboxError,
  SandboxNotFound,
  type ServiceContainerSpec,
  type ServiceRuntime,
  type ServiceState,
} from '../provider';
import { openExec } from './exec';
import { digestToRecord } from './images';
import { podName, POD_ANNOTATIONS } from './pod';
import { serviceContainerName, serviceStateOf } from './service-containers';

export interface KubernetesServicesDeps {
  core: CoreV1Api;
  kubeconfig: KubeConfig;
  namespace: string;
  /** The sandbox's pod, or undefined when it is gone. */
  podOf(sandbox: string): Promise<V1Pod | undefined>;
}

export class KubernetesServices implements ServiceRuntime {
  constructor(private readonly deps: KubernetesServicesDeps) {}

  /** The service came with its pod (SandboxSpec.services): found there, or the pod was made without it. */
  async start(spec: ServiceContainerSpec): Promise<void> {
    const pod = await this.deps.podOf(spec.sandbox);
    if (!pod) throw new SandboxNotFound(spec.sandbox);
    const name = serviceContainerName(spec.service);
    if (!pod.spec?.containers.some((c) => c.name === name)) {
      throw new SandboxError(
        `the pod of ${spec.sandbox} was made without service ${spec.service}: a pod's containers are fixed when it is created`,
        'permanent',
      );
    }
  }

  async state(sandbox: string, service: string): Promise<ServiceState | undefined> {
    const pod = await this.deps.podOf(sandbox);
    const name = serviceContainerName(service);
    const declared = pod?.spec?.containers.find((c) => c.name === name);
    if (!pod || !declared) return undefined;
    const status = pod.status?.containerStatuses?.find((c) => c.name === name);
    const state = serviceStateOf(status, declared.readinessProbe, Date.now());
    // Not ready for that long: the kubelet's probe failed, or has not passed yet; a check now says which.
    if (
      state.health === 'unhealthy' &&
      (await this.exec(sandbox, service, declared.readinessProbe!.exec!.command!)) === 0
    )
      return { ...state, health: 'healthy' };
    return state;
  }

  async list(sandbox: string): Promise<string[]> {
    const pod = await this.deps.podOf(sandbox);
    return JSON.parse(pod?.metadata?.annotations?.[POD_ANNOTATIONS.services] ?? '[]') as string[];
  }

  /** Runs argv in the service's container as its user; -1 when it could not run (the pod or container gone). */
  async exec(sandbox: string, service: string, argv: string[]): Promise<number> {
    const discard = () => new Writable({ write: (_chunk, _encoding, done) => done() });
    try {
      const target = {
        namespace: this.deps.namespace,
        pod: podName(sandbox),
        container: serviceContainerName(service),
      };
      const session = await openExec(this.deps.kubeconfig, target, argv, { stdout: discard(), stderr: discard() });
      return await session.exit;
    } catch {
      return -1;
    }
  }

  async log(sandbox: string, service: string, lines?: number): Promise<string> {
    return this.deps.core.readNamespacedPodLog({
      namespace: this.deps.namespace,
      name: podName(sandbox),
      container: serviceContainerName(service),
      ...(lines ? { tailLines: lines } : {}),
    });
  }

  async stop(sandbox: string, service: string): Promise<void> {
    throw notHere(`stopping service ${service} of ${sandbox} alone (to capture its data for a snapshot)`);
  }

  /** Nothing to ready: a service's folders are filled by its pod (./service-containers.ts). */
  async prepareFolder(): Promise<void> {}

  /**
   * Pulls nothing (the cluster's node pulls when a pod is made of the image,
   * as DRYDOCK_K8S_IMAGE_PULL_POLICY says): the digest the repo pinned the
   * image by, which the snapshot records; a tag alone is refused.
   */
  async pull(ref: string): Promise<string> {
    return digestToRecord(ref);
  }
}

function notHere(what: string): SandboxError {
  return new SandboxError(
    `${what} is not supported by the kubernetes provider yet: a snapshot build of such a repo is refused, and its ` +
      'sessions start their services from their images (docs/kubernetes.md)',
    'permanent',
  );
}
