/**
 * A sandbox's services as containers of its pod, as pure functions of their
 * specs (unit-tested). A pod's containers are fixed when it is created, so the
 * services come with the pod's spec (SandboxSpec.services) rather than
 * joining a running sandbox as Docker's do; they share its network namespace
 * (loopback alone) as `--network container:` does on Docker, and they die with
 * the pod (restartPolicy Never: a service that exits stays exited, and the
 * session names it). Each is hardened like the sandbox's container: no
 * capabilities, no privilege escalation, a read-only root, seccomp
 * RuntimeDefault (the pod's), its own CPU and memory limits. It runs as its
 * image's user, as on Docker, or as a declared numeric uid[:gid] (the kubelet
 * then checks it is not root; it cannot verify a user named by the image).
 * Its writable folders (its data folders, and /run for its sockets and lock
 * files) are folders of the pod's disk emptyDir, counted in the session's
 * disk like the sandbox's /workspace, filled from its image's content at that
 * path (as a Docker volume is) by an init container running as the service's
 * user, so they are the service's own (PostgreSQL requires its data folder to
 * be); /tmp is a memory emptyDir of its size.
 */
import { createHash } from 'node:crypto';
import type { V1Container, V1ContainerStatus, V1Probe, V1SecurityContext, V1Volume } from '@kubernetes/client-node';
import { SandboxError, type ServiceContainerSpec, type ServiceState } from '../provider';

/** The pod's emptyDir that holds /workspace and home, and the services' folders. */
export const DISK_VOLUME = 'disk';
/** Where an init container sees the whole disk volume. */
const DISK_MOUNT = '/drydock-disk';
/** A service's /tmp (memory, counted in the pod's), as on Docker. */
export const SERVICE_TMP_BYTES = 64 * 1024 ** 2;
/** Written by a service at run time and empty but for what the image puts there: its sockets and lock files. */
const RUNTIME_FOLDERS = ['/run'];

/** A service's container: `svc-<name>`; a name with "_" (no DNS label has one) gets a hash of the original too. */
export function serviceContainerName(service: string): string {
  if (!service.includes('_')) return `svc-${service}`;
  return `svc-${service.replace(/_/g, '-')}-${createHash('sha256').update(service).digest('hex').slice(0, 6)}`;
}

/** A Kubernetes quantity of CPU from cores: millicores. */
export function cpuQuantity(cores: number): string {
  return `${Math.max(1, Math.round(cores * 1000))}m`;
}

/** What the services add to their sandbox's pod. */
export interface ServicePodParts {
  containers: V1Container[];
  /** The fillers of the services' folders: they run (in order) before any container starts. */
  initContainers: V1Container[];
  volumes: V1Volume[];
}

export function servicePodParts(
  services: ServiceContainerSpec[],
  imagePullPolicy: 'Always' | 'IfNotPresent' | 'Never',
): ServicePodParts {
  const parts: ServicePodParts = { containers: [], initContainers: [], volumes: [] };
  for (const s of services) {
    if (s.files?.length)
      throw new SandboxError(
        `service ${s.service}: ${s.files[0].source}: the kubernetes provider copies no files of the repository into a service yet; run it on a Docker host`,
        'permanent',
      );
    const name = serviceContainerName(s.service);
    const folders = foldersOf(s, name);
    const common = {
      imagePullPolicy,
      securityContext: securityOf(s),
      resources: {
        limits: { cpu: cpuQuantity(s.cpus), memory: String(s.memoryBytes) },
        requests: { cpu: cpuQuantity(s.cpus / 10), memory: String(s.memoryBytes) },
      },
      // A failing one's end of log becomes its termination message: the session's error shows it.
      terminationMessagePolicy: 'FallbackToLogsOnError',
    };
    parts.initContainers.push(...fillersOf(s, name, folders, common));
    parts.containers.push({
      name,
      image: s.image,
      ...common,
      ...(s.entrypoint ? { command: s.entrypoint } : {}),
      ...(s.command ? { args: s.command } : {}),
      ...(s.workingDir ? { workingDir: s.workingDir } : {}),
      env: s.env.map((e) => ({ name: e.slice(0, e.indexOf('=')), value: e.slice(e.indexOf('=') + 1) })),
      ...(s.healthcheck ? { readinessProbe: probeOf(s.healthcheck) } : {}),
      volumeMounts: [
        { name: `${name}-tmp`, mountPath: '/tmp' },
        ...folders.map((f) => ({ name: DISK_VOLUME, mountPath: f.path, subPath: f.subPath })),
      ],
    });
    parts.volumes.push({ name: `${name}-tmp`, emptyDir: { medium: 'Memory', sizeLimit: String(SERVICE_TMP_BYTES) } });
  }
  return parts;
}

/**
 * As on Docker: the image's user (runAsNonRoot off: the kubelet verifies only
 * a numeric user, and refuses an image whose USER is a name), or the declared
 * uid[:gid], never root (the declaration refuses root). A user by name cannot
 * be given to the kubelet: refused, naming the service.
 */
function securityOf(s: ServiceContainerSpec): V1SecurityContext {
  const base = {
    allowPrivilegeEscalation: false,
    privileged: false,
    readOnlyRootFilesystem: true,
    capabilities: { drop: ['ALL'] },
  };
  if (!s.user) return { ...base, runAsNonRoot: false };
  const numeric = /^(\d+)(?::(\d+))?$/.exec(s.user);
  if (!numeric || Number(numeric[1]) === 0) {
    throw new SandboxError(
      `service ${s.service}: user ${s.user}: on Kubernetes a service's user is a non-root uid or uid:gid ` +
        "(the kubelet runs no user by name), or none for its image's own",
      'permanent',
    );
  }
  return {
    ...base,
    runAsNonRoot: true,
    runAsUser: Number(numeric[1]),
    ...(numeric[2] ? { runAsGroup: Number(numeric[2]) } : {}),
  };
}

interface Folder {
  path: string;
  /** Its folder in the disk volume. */
  subPath: string;
  /** The image and path its content comes from. */
  from: { image: string; path: string };
}

/** The service's writable folders (its own, then /run unless one of its own covers it), on the disk volume. */
function foldersOf(s: ServiceContainerSpec, name: string): Folder[] {
  const own = s.folders.map((f) => ({ path: f.path, from: f.from }));
  const covered = (p: string) => own.some((f) => f.path === p || p.startsWith(`${f.path}/`));
  const runtime = RUNTIME_FOLDERS.filter((p) => !covered(p)).map((p) => ({
    path: p,
    from: { image: s.image, path: p },
  }));
  // At the volume's root (mode 0777), where any service's user may make its own.
  return [...own, ...runtime].map((f, i) => ({ ...f, subPath: `${name}-${i}` }));
}

/**
 * Copies each folder's content from its image into its folder of the disk
 * (once: a folder already there is kept), as the service's user, so the
 * service owns it; a path the image lacks becomes an empty folder.
 */
const FILL = [
  'set -e',
  'while [ $# -gt 0 ]; do',
  '  if [ ! -e "$2" ]; then if [ -d "$1" ]; then cp -a "$1" "$2"; else mkdir "$2"; fi; fi',
  '  shift 2',
  'done',
].join('\n');

/** One init container per image the service's folders come from (its own; a data image's). */
function fillersOf(s: ServiceContainerSpec, name: string, folders: Folder[], common: Partial<V1Container>) {
  const images = [...new Set(folders.map((f) => f.from.image))];
  return images.map((image, k): V1Container => ({
    name: `${name}-fill${k ? `-${k}` : ''}`,
    image,
    ...common,
    command: ['sh', '-c', FILL, 'fill'],
    args: folders.filter((f) => f.from.image === image).flatMap((f) => [f.from.path, `${DISK_MOUNT}/${f.subPath}`]),
    volumeMounts: [{ name: DISK_VOLUME, mountPath: DISK_MOUNT }],
  }));
}

/** The service's health check as the kubelet runs it: it marks the container not ready after `retries` failures in a row. */
function probeOf(hc: NonNullable<ServiceContainerSpec['healthcheck']>): V1Probe {
  return {
    exec: { command: hc.test },
    periodSeconds: Math.max(1, Math.round(hc.intervalMs / 1000)),
    timeoutSeconds: Math.max(1, Math.ceil(hc.timeoutMs / 1000)),
    failureThreshold: hc.retries,
    successThreshold: 1,
  };
}

/**
 * A service container's state as the pod's status says it. Its health, where
 * it has a check: healthy once the kubelet's probe passed; unhealthy when it
 * has not been ready for longer than the probe's failures in a row take
 * (the kubelet says "not ready" before its first pass too, so the caller
 * confirms with a check of its own); else starting.
 */
export function serviceStateOf(
  status: V1ContainerStatus | undefined,
  probe: V1Probe | undefined,
  now: number,
): ServiceState {
  const state = status?.state;
  const ended = state?.terminated;
  const running = Boolean(state?.running);
  const base = {
    running,
    exitCode: ended?.exitCode ?? (running ? 0 : -1),
    oomKilled: ended?.reason === 'OOMKilled',
  };
  if (!probe || !running) return base;
  if (status?.ready) return { ...base, health: 'healthy' };
  const windowMs = ((probe.periodSeconds ?? 10) * (probe.failureThreshold ?? 3) + (probe.timeoutSeconds ?? 1)) * 1000;
  const started = state?.running?.startedAt ? new Date(state.running.startedAt).getTime() : now;
  return { ...base, health: now - started > windowMs ? 'unhealthy' : 'starting' };
}
