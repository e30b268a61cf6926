/**
 * Docker's create options of a sandbox, as one pure function of its spec
 * (unit-tested): what makes a container a drydock sandbox on this engine.
 */
import path from 'node:path';
import type Docker from 'dockerode';
import { SANDBOX_AGENTS_DIR } from '../../workflows/rules/agent-clis';
import { redactUrl } from '../../workflows/rules/repo-url';
import { COMPANION_LABEL, HOME, loopbackHosts, SANDBOX_USER, WORKSPACE, type SandboxSpec } from '../provider';
import type { OverlayDirs, SandboxStorage } from './storage';

export function isStatus(err: unknown, code: number): boolean {
  return typeof err === 'object' && err !== null && (err as { statusCode?: number }).statusCode === code;
}

/** Labels as Docker stores them: anyone who can list containers reads them, so no URL credentials. */
export function shownLabels(labels: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(labels).map(([k, v]) => [k, redactUrl(v)]));
}

/** A copy-on-write folder: a local volume mounting an overlay of `dirs` at `target` (a sandbox's or a service's). */
export function overlayVolume(target: string, dirs: OverlayDirs, labels: Record<string, string>): Docker.MountSettings {
  return {
    Type: 'volume',
    Source: '',
    Target: target,
    // NoCopy: the overlay's lower layer already is the image's content; nothing is copied.
    VolumeOptions: {
      NoCopy: true,
      Labels: labels,
      DriverConfig: {
        Name: 'local',
        Options: {
          type: 'overlay',
          device: 'overlay',
          o: `lowerdir=${dirs.lower},upperdir=${dirs.upper},workdir=${dirs.work},nosuid,nodev`,
        },
      },
    },
  } as Docker.MountSettings;
}

/**
 * Docker's create options of a sandbox: no network, non-root, no capabilities,
 * no privilege escalation, read-only root, bounded memory, CPU, pids and /tmp.
 * /workspace and the home folder are anonymous volumes of type overlay over
 * the image's copy (sandbox/docker/storage.ts), removed with the container.
 * `imageVolumes`: the image's VOLUMEs (ImageInfo.volumes), each covered by a tmpfs as large as /tmp.
 */
export function sandboxCreateOptions(
  spec: SandboxSpec,
  storage: SandboxStorage,
  imageVolumes: string[] = [],
  /** Its services' socket folders (sandbox/docker/services.ts socketMounts), read-write. */
  sockets: Docker.MountSettings[] = [],
): Docker.ContainerCreateOptions {
  const labels = shownLabels({ ...spec.labels, ...(spec.companionOf ? { [COMPANION_LABEL]: spec.companionOf } : {}) });
  const readonlyRoot = spec.readonlyRoot ?? true;
  const volume = (target: string, dirs: OverlayDirs) => overlayVolume(target, dirs, labels);
  return {
    name: spec.name,
    Image: spec.image,
    // drydock's keeper, never the image's ENTRYPOINT (which would outlive every step, read later
    // steps' environments and answer for their runners) nor its HEALTHCHECK (a command run between steps).
    Entrypoint: [],
    Cmd: ['sleep', 'infinity'],
    Healthcheck: { Test: ['NONE'] },
    User: SANDBOX_USER,
    WorkingDir: WORKSPACE,
    Labels: labels,
    ...(spec.env?.length ? { Env: spec.env } : {}),
    HostConfig: {
      // Only a loopback interface. (Not NetworkDisabled as well: it leaves /etc/hosts
      // empty, so "localhost" would not resolve for an app and its browser check.)
      NetworkMode: spec.companionOf ? `container:${spec.companionOf}` : 'none',
      // A companion shares the sandbox's /etc/hosts (Docker refuses extra hosts with container: networking).
      ...(spec.companionOf ? {} : { ExtraHosts: loopbackHosts(spec).map((name) => `${name}:127.0.0.1`) }),
      CapDrop: ['ALL'],
      // Docker's default seccomp profile applies (nothing here turns it off).
      SecurityOpt: ['no-new-privileges'],
      Privileged: false,
      IpcMode: 'private',
      ReadonlyRootfs: readonlyRoot,
      // `exec`: Docker's tmpfs is noexec unless told, and toolchains run what they build in /tmp
      // (`go test` its test binaries: "fork/exec /tmp/go-build…: permission denied"), as a pod's /tmp allows.
      Tmpfs: Object.fromEntries(
        ['/tmp', ...volumeCovers(spec, imageVolumes)].map((t) => [
          t,
          `rw,exec,nosuid,nodev,size=${spec.tmpBytes},mode=1777`,
        ]),
      ),
      Mounts: [
        volume(WORKSPACE, storage.workspace),
        volume(HOME, storage.home),
        { Type: 'bind', Source: spec.egressDir, Target: '/run/drydock', ReadOnly: true },
        ...(spec.agentsDir
          ? [{ Type: 'bind' as const, Source: spec.agentsDir, Target: SANDBOX_AGENTS_DIR, ReadOnly: true }]
          : []),
        ...(spec.mounts ?? []).map((m) => ({
          Type: 'bind' as const,
          Source: m.source,
          Target: m.target,
          ReadOnly: true,
        })),
        ...sockets,
      ],
      Init: true,
      NanoCpus: Math.round(spec.cpus * 1e9),
      Memory: spec.memoryBytes,
      MemorySwap: spec.memoryBytes,
      ...pidsLimit(spec),
      ...(spec.runtime ? { Runtime: spec.runtime } : {}),
    },
  };
}

/**
 * The sandbox's first process when it runs a command first (SandboxSpec.first):
 * the command, then a line "<nonce> <its exit code>" on stdout and "<nonce>"
 * on stderr (the worker reads each up to its line through an attach opened
 * before the start), then the same
 * keeper as always (`exec`: sleep takes the shell's pid, pid 1's first child).
 * An image with no sleep says so as the engine would, and the sandbox ends.
 */
export function firstProcessCmd(argv: string[], nonce: string): string[] {
  return ['sh', '-c', FIRST_PROCESS, 'drydock-first', nonce, ...argv];
}

const FIRST_PROCESS = `n=$1; shift
command -v sleep >/dev/null 2>&1 || { echo 'exec: "sleep": executable file not found in $PATH' >&2; exit 127; }
"$@"; c=$?
printf '\n%s %s\n' "$n" "$c"; printf '\n%s\n' "$n" >&2
exec sleep infinity`;

/**
 * A tmpfs over each of the image's VOLUMEs that no mount of drydock's covers:
 * Docker would make each an anonymous volume on the host's disk, writable by
 * the sandbox and outside `limits.disk`. Each is as large as /tmp at most and,
 * like /tmp, counted in the sandbox's memory; it starts empty (what the image
 * has there is hidden), and goes with the container.
 */
function volumeCovers(spec: SandboxSpec, imageVolumes: string[]): string[] {
  const mounted = new Set(['/tmp', WORKSPACE, HOME, '/run/drydock', ...(spec.mounts ?? []).map((m) => m.target)]);
  if (spec.agentsDir) mounted.add(SANDBOX_AGENTS_DIR);
  const targets = imageVolumes.map((v) => path.posix.normalize(v).replace(/(.)\/+$/, '$1'));
  return [...new Set(targets)].filter((target) => !mounted.has(target));
}

/** Whether a runtime is gVisor: Docker's runtimes named runsc (infra/runsc.sh registers "runsc"). */
export const isGvisor = (runtime: string | undefined): boolean => runtime?.startsWith('runsc') ?? false;

/**
 * Host tasks gVisor (runsc, ptrace platform) uses: its own (about 40), and
 * up to about 12 per process of the sandbox (the process's stub and the
 * threads that trace it), all in the container's pids cgroup. Measured with
 * runsc 20221219 (docs/security.md, "gVisor"); past the cgroup's limit gVisor panics
 * and the whole sandbox is lost.
 */
export const GVISOR_TASKS = { base: 128, perProcess: 48 };

/**
 * The process limit: the cgroup's pids limit under runc; under gVisor the
 * sandbox's processes are limited inside it (RLIMIT_NPROC of the sandbox
 * user, which gVisor counts per sandbox) and the cgroup holds what gVisor
 * itself needs for that many.
 */
function pidsLimit(spec: SandboxSpec): Pick<Docker.HostConfig, 'PidsLimit' | 'Ulimits'> {
  if (!isGvisor(spec.runtime)) return { PidsLimit: spec.pids };
  return {
    PidsLimit: GVISOR_TASKS.base + GVISOR_TASKS.perProcess * spec.pids,
    Ulimits: [{ Name: 'nproc', Soft: spec.pids, Hard: spec.pids }],
  };
}

/**
 * Docker's create options of a companion that runs a command on its
 * sandbox's files (SandboxSpec.sharingFiles): the sandbox's image,
 * environment and user; its /workspace volume read-write, its home volume
 * read-only (what setup installed there is read, a step's run state is not
 * written), its read-only host folders but not /run/drydock (no egress, no
 * gateway: the companion reaches nothing outside); its network namespace,
 * a /tmp of its own; as hardened and bounded as a sandbox, in a process
 * namespace of its own, with the sandbox's owner labels.
 */
export function filesCompanionCreateOptions(
  spec: SandboxSpec & { companionOf: string; sharingFiles: { command: string[] } },
  sandbox: Pick<Docker.ContainerInspectInfo, 'Config' | 'Mounts'>,
): Docker.ContainerCreateOptions {
  const base = sandboxCreateOptions(spec, { workspace: NO_DIRS, home: NO_DIRS });
  return {
    ...base,
    Image: sandbox.Config.Image,
    Entrypoint: [],
    Cmd: spec.sharingFiles.command,
    Env: [...(sandbox.Config.Env ?? []), ...(spec.env ?? [])],
    HostConfig: {
      ...base.HostConfig!,
      Tmpfs: { '/tmp': `rw,exec,nosuid,nodev,size=${spec.tmpBytes},mode=1777` },
      Mounts: sandbox.Mounts.flatMap((m) => companionMount(m) ?? []),
    },
  };
}

/** A sandbox's mount as its files companion gets it, or undefined for one it does not get. */
function companionMount(m: Docker.ContainerInspectInfo['Mounts'][number]): Docker.MountSettings | undefined {
  if (m.Type === 'volume' && m.Name && (m.Destination === WORKSPACE || m.Destination === HOME))
    return { Type: 'volume', Source: m.Name, Target: m.Destination, ReadOnly: m.Destination === HOME };
  if (m.Type === 'bind' && m.Destination !== '/run/drydock')
    return { Type: 'bind', Source: m.Source, Target: m.Destination, ReadOnly: !m.RW };
  return undefined;
}

/** Overlay folders of a companion that has none of its own (its mounts are its sandbox's). */
const NO_DIRS: OverlayDirs = { lower: '', upper: '', work: '' };
