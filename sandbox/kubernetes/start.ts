/**
 * Starting the Kubernetes provider on a worker: the client made from the
 * kubeconfig, then the checks the worker runs before it takes work (the API
 * answers, the namespace exists, the worker may make and run pods there, the
 * snapshot folder is writable), each failure one line naming the setting to
 * change. Without them a missing namespace showed only at the first
 * session, as the client's dump of a 404.
 */
import { constants } from 'node:fs';
import { access, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { AuthorizationV1Api, CoreV1Api, KubeConfig, VersionApi } from '@kubernetes/client-node';
import { ProviderCheckFailed } from '../provider';
import { kubeErrorLine, withOneLineErrors } from './api-errors';
import { KubernetesProvider } from './provider';
import { RegistryBuilds } from './builds';
import { createDockerProvider } from '../docker/settings';
import { BUILDER_RUNTIME } from '../builder';
import { kubeconfigSetting, type KubernetesProviderSettings } from './settings';

/** The provider on the cluster the kubeconfig names, its pods on this worker's node. */
export function createKubernetesProvider(settings: KubernetesProviderSettings): KubernetesProvider {
  const kubeconfig = new KubeConfig();
  try {
    if (settings.DRYDOCK_K8S_KUBECONFIG) kubeconfig.loadFromFile(settings.DRYDOCK_K8S_KUBECONFIG);
    else kubeconfig.loadFromDefault();
  } catch (err) {
    const why = kubeErrorLine(err);
    throw new ProviderCheckFailed(
      kubeconfigSetting(settings),
      `cannot load the kubeconfig (${why}); name a readable one`,
    );
  }
  return new KubernetesProvider({
    kubeconfig,
    namespace: settings.DRYDOCK_K8S_NAMESPACE,
    node: settings.DRYDOCK_K8S_NODE ?? settings.DRYDOCK_HOST_ID,
    imagePullPolicy: settings.DRYDOCK_K8S_IMAGE_PULL_POLICY,
    snapshotRoot: path.join(settings.DRYDOCK_DATA_DIR, 'snapshots'),
    startTimeoutMs: settings.DRYDOCK_K8S_START_TIMEOUT,
    ...(settings.DRYDOCK_K8S_BUILD_REGISTRY
      ? {
          builds: new RegistryBuilds(
            createDockerProvider({
              ...(settings.DOCKER_HOST ? { DOCKER_HOST: settings.DOCKER_HOST } : {}),
              DRYDOCK_DATA_DIR: settings.DRYDOCK_DATA_DIR,
            }),
            settings.DRYDOCK_K8S_BUILD_REGISTRY,
          ),
        }
      : {}),
  });
}

/** What the worker does to the sandboxes' pods, each asked of the API for this worker's identity. */
const POD_ACCESS = [
  { verb: 'create', resource: 'pods' },
  { verb: 'get', resource: 'pods' },
  { verb: 'list', resource: 'pods' },
  { verb: 'delete', resource: 'pods' },
  { verb: 'create', resource: 'pods', subresource: 'exec' },
];

/** Throws ProviderCheckFailed naming the first thing that keeps this worker from running sandboxes. */
export async function checkKubernetes(
  provider: KubernetesProvider,
  settings: KubernetesProviderSettings,
): Promise<void> {
  const { kubeconfig, namespace } = provider.settings;
  await apiAnswers(kubeconfig, settings);
  const exists = await namespaceExists(kubeconfig, namespace);
  const authorization = withOneLineErrors(kubeconfig.makeApiClient(AuthorizationV1Api));
  for (const access of POD_ACCESS) {
    const review = await authorization.createSelfSubjectAccessReview({
      body: { spec: { resourceAttributes: { namespace, ...access } } },
    });
    if (review.status?.allowed) continue;
    const what = `${access.verb} ${access.resource}${access.subresource ? `/${access.subresource}` : ''}`;
    const unseen = exists === undefined ? ` (or the namespace does not exist: kubectl get namespace ${namespace})` : '';
    throw new ProviderCheckFailed(
      'DRYDOCK_K8S_NAMESPACE',
      `this worker may not ${what} in namespace "${namespace}"${unseen}; bind it to a Role that may (infra/k8s/pods/sandboxes.yaml)`,
    );
  }
  await snapshotFolderWritable(provider.store.root);
  if (provider.settings.builds) await buildEngineReady(provider.settings.builds);
}

/** A worker that builds for its pods needs a Docker engine that runs the isolated builder (its gVisor runtime). */
async function buildEngineReady(builds: RegistryBuilds): Promise<void> {
  let runtimes: string[];
  try {
    runtimes = Object.keys((await builds.engine.docker.info()).Runtimes ?? {});
  } catch (err) {
    const why = ((err as Error).message ?? String(err)).split('\n')[0];
    throw new ProviderCheckFailed(
      'DRYDOCK_K8S_BUILD_REGISTRY',
      `builds for the cluster run on this worker's Docker engine, which does not answer (${why}); start dockerd or set DOCKER_HOST, or unset DRYDOCK_K8S_BUILD_REGISTRY (repos that need a build are then refused)`,
    );
  }
  if (!runtimes.includes(BUILDER_RUNTIME)) {
    throw new ProviderCheckFailed(
      'DRYDOCK_K8S_BUILD_REGISTRY',
      `builds for the cluster run in the isolated builder, and this worker's Docker engine has no runtime "${BUILDER_RUNTIME}"; run infra/builder-runtime.sh, or unset DRYDOCK_K8S_BUILD_REGISTRY`,
    );
  }
}

async function apiAnswers(kubeconfig: KubeConfig, settings: KubernetesProviderSettings): Promise<void> {
  try {
    await withOneLineErrors(kubeconfig.makeApiClient(VersionApi)).getCode();
  } catch (err) {
    const server = kubeconfig.getCurrentCluster()?.server ?? 'the cluster';
    throw new ProviderCheckFailed(
      kubeconfigSetting(settings),
      `the Kubernetes API at ${server} does not answer (${kubeErrorLine(err)}); start the cluster or name one that runs`,
    );
  }
}

/** true or false as the API says; undefined when this worker may not read namespaces (the checks of access say more). */
async function namespaceExists(kubeconfig: KubeConfig, namespace: string): Promise<boolean | undefined> {
  try {
    await withOneLineErrors(kubeconfig.makeApiClient(CoreV1Api)).readNamespace({ name: namespace });
    return true;
  } catch (err) {
    const code = (err as { code?: number }).code;
    if (code === 403) return undefined;
    if (code !== 404) throw err;
  }
  throw new ProviderCheckFailed(
    'DRYDOCK_K8S_NAMESPACE',
    `namespace "${namespace}" does not exist; create it (kubectl apply -f infra/k8s/pods/sandboxes.yaml makes drydock-sandboxes) or name one that does`,
  );
}

/** Snapshots are archives in this folder (a hostPath of the worker's pod): it must take files. */
async function snapshotFolderWritable(root: string): Promise<void> {
  try {
    await mkdir(root, { recursive: true });
    await access(root, constants.W_OK);
  } catch (err) {
    throw new ProviderCheckFailed(
      'DRYDOCK_DATA_DIR',
      `the snapshot folder ${root} is not writable (${(err as Error).message}); mount a writable folder there`,
    );
  }
}
