/**
 * Which sandbox provider this host uses (DRYDOCK_SANDBOX_PROVIDER): the one
 * place outside sandbox/docker/ and sandbox/kubernetes/ that names them.
 * The Docker engine DOCKER_HOST names, or the Kubernetes cluster the worker
 * runs on (docs/kubernetes.md), whose client is loaded only when it is the one.
 */
import path from 'node:path';
import type { Config } from '../platform/config';
import { DockerProvider } from './docker/provider';
import type { SandboxProvider } from './provider';

export type HostProviderConfig = Pick<
  Config,
  | 'DRYDOCK_DATA_DIR'
  | 'DRYDOCK_HOST_ID'
  | 'DRYDOCK_SANDBOX_PROVIDER'
  | 'DRYDOCK_K8S_KUBECONFIG'
  | 'DRYDOCK_K8S_NAMESPACE'
  | 'DRYDOCK_K8S_NODE'
  | 'DRYDOCK_K8S_IMAGE_PULL_POLICY'
  | 'DRYDOCK_K8S_START_TIMEOUT'
>;

/**
 * docker: the engine DOCKER_HOST names (default: the local socket), its
 * sandboxes' storage under `<data dir>/sandboxes`. kubernetes: pods on this
 * worker's node, snapshots under `<data dir>/snapshots` on that node.
 */
export async function hostProvider(config: HostProviderConfig): Promise<SandboxProvider> {
  if (config.DRYDOCK_SANDBOX_PROVIDER === 'docker') {
    return new DockerProvider(undefined, path.join(config.DRYDOCK_DATA_DIR, 'sandboxes'));
  }
  // Loaded here, not at the top: the client takes over a second to load, which Docker workers need not pay.
  // require, not import(): drydock runs its sources through tsx's CommonJS hook, which import() bypasses.
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { KubeConfig } = require('@kubernetes/client-node') as typeof import('@kubernetes/client-node');
  const { KubernetesProvider } = require('./kubernetes/provider') as typeof import('./kubernetes/provider');
  /* eslint-enable @typescript-eslint/no-require-imports */
  const kubeconfig = new KubeConfig();
  if (config.DRYDOCK_K8S_KUBECONFIG) kubeconfig.loadFromFile(config.DRYDOCK_K8S_KUBECONFIG);
  else kubeconfig.loadFromDefault();
  return new KubernetesProvider({
    kubeconfig,
    namespace: config.DRYDOCK_K8S_NAMESPACE,
    node: config.DRYDOCK_K8S_NODE ?? config.DRYDOCK_HOST_ID,
    imagePullPolicy: config.DRYDOCK_K8S_IMAGE_PULL_POLICY,
    snapshotRoot: path.join(config.DRYDOCK_DATA_DIR, 'snapshots'),
    startTimeoutMs: config.DRYDOCK_K8S_START_TIMEOUT,
  });
}

/** The runtime sandboxes ask for: a Docker runtime, or a Kubernetes RuntimeClass. */
export function sandboxRuntimeOf(
  config: Pick<Config, 'DRYDOCK_SANDBOX_PROVIDER' | 'DRYDOCK_DOCKER_RUNTIME' | 'DRYDOCK_K8S_RUNTIME_CLASS'>,
): string | undefined {
  return config.DRYDOCK_SANDBOX_PROVIDER === 'docker'
    ? config.DRYDOCK_DOCKER_RUNTIME
    : config.DRYDOCK_K8S_RUNTIME_CLASS;
}
