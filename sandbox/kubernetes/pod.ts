/**
 * A sandbox's pod, as one pure function of its spec (unit-tested): what
 * makes a pod a drydock sandbox on Kubernetes, with its services as
 * containers of the pod (./service-containers.ts). The hardening of the Docker
 * provider, said in the pod spec's words: no service account token,
 * non-root, a read-only root, every capability dropped, no privilege
 * escalation, seccomp RuntimeDefault, CPU and memory limits, /tmp a
 * memory-backed emptyDir of its size, /workspace and home on one emptyDir
 * of the disk size, drydock's host folders mounted read-only, pinned to the
 * worker's node. What has no pod equivalent is in docs/kubernetes.md.
 */
import { createHash } from 'node:crypto';
import type { V1Container, V1EnvVar, V1Pod, V1Volume, V1VolumeMount } from '@kubernetes/client-node';
import { SANDBOX_AGENTS_DIR } from '../../workflows/rules/agent-clis';
import { redactUrl } from '../../workflows/rules/repo-url';
import { SANDBOX_EGRESS_DIR } from '../egress';
import { HOME, loopbackHosts, WORKSPACE, type SandboxSpec } from '../provider';
import { cpuQuantity, DISK_VOLUME, servicePodParts } from './service-containers';

/** On every sandbox pod: how the provider finds its pods, and which snapshot a pod was made from. */
export const POD_LABELS = {
  sandbox: 'drydock.dev/sandbox',
  snapshot: 'drydock.dev/snapshot',
} as const;
/** The sandbox's own name (a pod's name is a DNS label) and drydock's labels (session, repo, expiry: any text) as JSON. */
export const POD_ANNOTATIONS = {
  name: 'drydock.dev/name',
  labels: 'drydock.dev/labels',
  /** The names of its services (JSON), each a container of the pod (./service-containers.ts). */
  services: 'drydock.dev/services',
} as const;
/** The sandbox's container in its pod. */
export const SANDBOX_CONTAINER = 'sandbox';
/** Where a snapshot's folder (its workspace archive) is mounted, read-only, in a pod made from it. */
export const SNAPSHOT_MOUNT = '/run/drydock-snapshot';
const SANDBOX_UID = 1000;

/**
 * The pod's main process: a shell that keeps a sleep running and waits, so
 * that it reaps the processes orphaned to it (pid 1 of the container, as
 * Docker's init is) and ends at once on SIGTERM.
 */
export const KEEPER = "trap 'exit 0' TERM; while :; do sleep 2147483647 & wait; done";

/**
 * /workspace is the root of an emptyDir, owned by root (mode 0777): git
 * refuses a repository its user does not own unless told it is safe, and
 * this must hold before drydock's own git config is written.
 */
const SAFE_WORKSPACE: V1EnvVar[] = [
  { name: 'GIT_CONFIG_COUNT', value: '1' },
  { name: 'GIT_CONFIG_KEY_0', value: 'safe.directory' },
  { name: 'GIT_CONFIG_VALUE_0', value: WORKSPACE },
];

/** Where the pod runs and how its image is had. */
export interface PodPlacement {
  namespace: string;
  /** The node of the worker that made it (its host folders are that node's). */
  node: string;
  imagePullPolicy: 'Always' | 'IfNotPresent' | 'Never';
  /** The sandbox container's own, when it differs (an environment built for the cluster, pinned by digest: ./builds.ts). */
  sandboxPullPolicy?: 'Always' | 'IfNotPresent';
  /** The snapshot the pod starts from: its id and its folder on the node. */
  snapshot?: { id: string; dir: string };
}

/** A pod name for a sandbox name: the name itself when it is a DNS label, else a DNS label with its hash. */
export function podName(name: string): string {
  if (/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(name)) return name;
  const hash = createHash('sha256').update(name).digest('hex').slice(0, 8);
  const readable = name
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+/, '')
    .slice(0, 54)
    .replace(/-+$/, '');
  return `${readable || 'sandbox'}-${hash}`;
}

/**
 * The pod of a sandbox and its services (./service-containers.ts), not of a
 * later companion: a pod's containers are fixed at its creation.
 */
export function sandboxPod(spec: SandboxSpec, where: PodPlacement): V1Pod {
  const labels = Object.fromEntries(Object.entries(spec.labels).map(([k, v]) => [k, redactUrl(v)]));
  const services = servicePodParts(spec.services ?? [], where.imagePullPolicy);
  const serviceNames = (spec.services ?? []).map((s) => s.service);
  const hosts = loopbackHosts(spec);
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: podName(spec.name),
      namespace: where.namespace,
      labels: {
        [POD_LABELS.sandbox]: 'true',
        ...(where.snapshot ? { [POD_LABELS.snapshot]: where.snapshot.id } : {}),
      },
      annotations: {
        [POD_ANNOTATIONS.name]: spec.name,
        [POD_ANNOTATIONS.labels]: JSON.stringify(labels),
        ...(serviceNames.length ? { [POD_ANNOTATIONS.services]: JSON.stringify(serviceNames) } : {}),
      },
    },
    spec: {
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 1,
      // Nothing to resolve: the pod has loopback alone.
      dnsPolicy: 'None',
      dnsConfig: { nameservers: ['127.0.0.1'] },
      // Services by name on the pod's loopback, as on Docker (/etc/hosts).
      ...(hosts.length ? { hostAliases: [{ ip: '127.0.0.1', hostnames: hosts }] } : {}),
      affinity: {
        nodeAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: {
            nodeSelectorTerms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: [where.node] }] }],
          },
        },
      },
      // The sandbox's user is its container's: a service runs as its image's (./service-containers.ts).
      securityContext: { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
      ...(spec.runtime ? { runtimeClassName: spec.runtime } : {}),
      ...(services.initContainers.length ? { initContainers: services.initContainers } : {}),
      containers: [sandboxContainer(spec, where), ...services.containers],
      volumes: [...volumesOf(spec, where), ...services.volumes],
    },
  };
}

function sandboxContainer(spec: SandboxSpec, where: PodPlacement): V1Container {
  const env = (spec.env ?? []).map((e) => ({ name: e.slice(0, e.indexOf('=')), value: e.slice(e.indexOf('=') + 1) }));
  return {
    name: SANDBOX_CONTAINER,
    image: spec.image,
    imagePullPolicy: where.sandboxPullPolicy ?? where.imagePullPolicy,
    command: ['sh', '-c', KEEPER],
    workingDir: WORKSPACE,
    env: [...SAFE_WORKSPACE, ...env],
    securityContext: {
      runAsUser: SANDBOX_UID,
      runAsGroup: SANDBOX_UID,
      allowPrivilegeEscalation: false,
      privileged: false,
      readOnlyRootFilesystem: spec.readonlyRoot ?? true,
      capabilities: { drop: ['ALL'] },
    },
    resources: {
      limits: { cpu: cpuQuantity(spec.cpus), memory: String(spec.memoryBytes) },
      // Memory cannot be taken back: the node must have it. CPU is shared as on a Docker host.
      requests: { cpu: cpuQuantity(spec.cpus / 10), memory: String(spec.memoryBytes) },
    },
    volumeMounts: mountsOf(spec, where),
  };
}

/** Host folders mounted read-only, by volume name. */
function hostFolders(spec: SandboxSpec, where: PodPlacement): { name: string; source: string; target: string }[] {
  return [
    { name: 'egress', source: spec.egressDir, target: SANDBOX_EGRESS_DIR },
    ...(spec.agentsDir ? [{ name: 'agents', source: spec.agentsDir, target: SANDBOX_AGENTS_DIR }] : []),
    ...(spec.mounts ?? []).map((m, i) => ({ name: `host-${i}`, ...m })),
    ...(where.snapshot ? [{ name: 'snapshot', source: where.snapshot.dir, target: SNAPSHOT_MOUNT }] : []),
  ];
}

function mountsOf(spec: SandboxSpec, where: PodPlacement): V1VolumeMount[] {
  return [
    { name: 'tmp', mountPath: '/tmp' },
    { name: DISK_VOLUME, mountPath: WORKSPACE, subPath: 'workspace' },
    { name: DISK_VOLUME, mountPath: HOME, subPath: 'home' },
    ...hostFolders(spec, where).map((f) => ({ name: f.name, mountPath: f.target, readOnly: true })),
  ];
}

function volumesOf(spec: SandboxSpec, where: PodPlacement): V1Volume[] {
  return [
    // tmpfs of its size, counted in the pod's memory.
    { name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: String(spec.tmpBytes) } },
    // The kubelet evicts the pod when /workspace, home and the services' folders together outgrow it.
    { name: DISK_VOLUME, emptyDir: { sizeLimit: String(spec.diskBytes) } },
    ...hostFolders(spec, where).map((f) => ({ name: f.name, hostPath: { path: f.source, type: 'Directory' } })),
  ];
}
