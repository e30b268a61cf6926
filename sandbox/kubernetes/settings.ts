/**
 * What the Kubernetes provider reads from the worker's settings, as a zod
 * schema for the registry of sandbox/host-provider.ts. Apart from the client
 * (loaded only when this provider is the one: ./start.ts), so a Docker
 * worker never pays for loading it.
 */
import { z } from 'zod';
import { BUILD_REGISTRY } from './builds';

/** Parsed from the worker's configuration (platform/config.ts documents each variable) and environment. */
export const kubernetesSettingsSchema = z.object({
  /** Unset: $KUBECONFIG, ~/.kube/config, or the pod's service account. */
  DRYDOCK_K8S_KUBECONFIG: z.string().min(1).optional(),
  /** Named when the kubeconfig is the default one and it fails. */
  KUBECONFIG: z.string().min(1).optional(),
  DRYDOCK_K8S_NAMESPACE: z.string().min(1),
  DRYDOCK_K8S_NODE: z.string().min(1).optional(),
  DRYDOCK_K8S_IMAGE_PULL_POLICY: z.enum(['Always', 'IfNotPresent', 'Never']),
  DRYDOCK_K8S_START_TIMEOUT: z.number().int().positive(),
  DRYDOCK_HOST_ID: z.string().min(1),
  /** Snapshots live under `<data dir>/snapshots` on the worker's node. */
  DRYDOCK_DATA_DIR: z.string().min(1),
  /** Where repos' environments built on the worker's Docker engine go for the nodes to pull (./builds.ts); unset: refused. */
  DRYDOCK_K8S_BUILD_REGISTRY: z.string().regex(BUILD_REGISTRY, 'host[:port][/path], lower case').optional(),
  /** The engine that builds, with DRYDOCK_K8S_BUILD_REGISTRY; unset: the local socket. */
  DOCKER_HOST: z.string().min(1).optional(),
});

export type KubernetesProviderSettings = z.infer<typeof kubernetesSettingsSchema>;

/** The variable that says which kubeconfig is used, for messages about it. */
export function kubeconfigSetting(settings: KubernetesProviderSettings): string {
  if (settings.DRYDOCK_K8S_KUBECONFIG) return 'DRYDOCK_K8S_KUBECONFIG';
  return settings.KUBECONFIG ? 'KUBECONFIG' : 'DRYDOCK_K8S_KUBECONFIG (unset: ~/.kube/config or the service account)';
}
