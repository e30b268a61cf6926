/**
 * The seam between drydock and whatever runs its sandboxes: a provider makes
 * hardened, bounded sandboxes and their companions (a browser, a service)
 * from an image or a snapshot, runs commands in them, copies files in,
 * snapshots a sandbox's /workspace as an image, lists them for the reaper
 * and removes them. The Docker engine (sandbox/docker/) and Kubernetes
 * (sandbox/kubernetes/: a sandbox is a pod) implement it; which one a
 * worker uses is its configuration (sandbox/providers.ts). A sandbox is named by an
 * opaque string (its name, or the provider's id where a method says so);
 * no engine type crosses this interface.
 *
 * Errors: SandboxError with a kind. `permanent` (SandboxNotFound: a retry
 * cannot bring it back) becomes a non-retryable activity failure;
 * `transient` and the engine's own errors are thrown as they are and
 * Temporal retries them. OutputOverCap (platform/output-cap.ts) is permanent.
 */
import type { Readable, Writable } from 'node:stream';
import type { OutputCap } from '../platform/output-cap';

/** Labels on every sandbox and companion, so orphans can be found and reaped. */
export const LABELS = {
  session: 'drydock.session',
  repo: 'drydock.repo',
  host: 'drydock.host',
  expires: 'drydock.expires',
} as const;

/** On a companion (a service, a browser): the name of the sandbox whose network namespace it shares. */
export const COMPANION_LABEL = 'drydock.companion-of';

/** Every process in a sandbox runs as this uid:gid, never root. */
export const SANDBOX_USER = '1000:1000';
export const WORKSPACE = '/workspace';
/** The sandbox user's home: git config and drydock-run's state (STATE_DIR). */
export const HOME = '/home/drydock';

/**
 * A person's shell in a sandbox (drydock attach), for `sh -c`, on every
 * provider: bash without its startup files when the image has it, else sh
 * without ENV. The agent wrote ~/.bashrc and ~/.profile (and the image may
 * set ENV): none of them runs, the prompt is drydock's (ATTACH_PROMPT).
 */
export const ATTACH_SHELL =
  'if command -v bash >/dev/null 2>&1; then exec bash --noprofile --norc; else unset ENV; PS1="$ "; export PS1; exec sh; fi';
/** The attach shell's prompt (bash's escapes: the folder, then $). */
export const ATTACH_PROMPT = '\\w\\$ ';

/**
 * What a provider can do beyond the basics; a caller checks before it asks
 * for more. Its optional parts (SandboxProvider.services, .imageStore) are
 * capabilities too: a part it has not is a part it cannot do.
 */
export interface ProviderCapabilities {
  /**
   * The transport of the worker's own folders and sockets into a sandbox:
   * it mounts host folders read-only (SandboxSpec.egressDir, where a step's
   * egress proxy puts its socket; agentsDir; mounts), so the provider runs
   * its sandboxes on the worker's own host (or node). A remote runtime has
   * none, and cannot run a session's sandboxes (container.ts refuses them).
   */
  hostFolders: boolean;
  /** Repos' own environments on the sandbox's host: drydock's layer made over an image (layerImage), builds loaded. */
  buildsImages: boolean;
  /** A companion can join a sandbox that already runs (the browser of a check); else only at its creation. */
  lateCompanions: boolean;
  /** A service's Unix socket folder shared with its sandbox (ServiceContainerSpec.sockets). */
  serviceSockets?: boolean;
  /** SandboxSpec.first: a command run as the sandbox's own first process, its result returned by create. */
  firstCommand?: boolean;
}

export interface SandboxSpec {
  /** The sandbox's name: the idempotency key, derived from the session id (an opaque id to the provider). */
  name: string;
  image: string;
  labels: Record<string, string>;
  /** CPU cores (fractions allowed). */
  cpus: number;
  memoryBytes: number;
  pids: number;
  /** Size of the tmpfs at /tmp (it counts against the memory limit too). */
  tmpBytes: number;
  /** Room for what the sandbox writes to /workspace and its home (its own filesystem; ENOSPC beyond). */
  diskBytes: number;
  /** Host folder mounted read-only at /run/drydock: the egress proxy's socket appears there. */
  egressDir: string;
  /** Host folder of the agent CLIs, mounted read-only at /opt/drydock-agents (models/agent-clis.ts). */
  agentsDir?: string;
  /** Environment of every process in the sandbox ("NAME=value"), e.g. where its CA bundle is. */
  env?: string[];
  /** Host folders mounted read-only (drydock's helpers, a Node.js build: sandbox/toolchains.ts). */
  mounts?: { source: string; target: string }[];
  /**
   * A companion of this sandbox (a browser, a service): it shares the
   * sandbox's network namespace (its loopback only) instead of having one of
   * its own, and carries the sandbox's owner labels so teardown and the
   * reaper find it.
   */
  companionOf?: string;
  /**
   * With companionOf: a companion that runs `command` on the sandbox's own
   * files (its /workspace and home, not copies), in the sandbox's image and
   * environment, as the sandbox user, in a process namespace of its own
   * (so a step's end, which ends every process of the sandbox's, leaves it
   * running): the app kept for the agent (sandbox/activities/agent-app.ts).
   * `image` is ignored. Needs capabilities.lateCompanions.
   */
  sharingFiles?: { command: string[] };
  /** Container runtime, e.g. "runsc" (gVisor); default: the engine's (runc). */
  runtime?: string;
  /**
   * The sandbox's services (sandbox/services.ts), known before it is made.
   * A provider that cannot add containers to a running sandbox
   * (capabilities.lateCompanions false: a pod's containers are fixed when it
   * is created) makes them with it; the others ignore this and make each at
   * ServiceRuntime.start. Either way the caller then starts each with
   * ServiceRuntime.start and waits until it is ready.
   */
  services?: ServiceContainerSpec[];
  /**
   * Names that resolve to 127.0.0.1 in the sandbox (and in its services,
   * which share its network namespace): the dev container's compose service
   * name and aliases. Every service's name and hostNames resolve too.
   */
  hostNames?: string[];
  /**
   * false: the root filesystem stays writable (by root only: the sandbox user
   * still cannot write system folders). /workspace and the home folder are
   * copy-on-write overlays either way. @default true
   */
  readonlyRoot?: boolean;
  /**
   * A command the sandbox's first process runs (as the sandbox user, in
   * /workspace, as an exec would) before it keeps the sandbox up: the
   * workspace's preparation, with no exec after the start. Its exit code and
   * output come back from create as `first` (a non-zero exit leaves the
   * sandbox running). Needs capabilities.firstCommand; a sandbox found again
   * (created false) returns none, and the caller runs what it needs as an exec.
   */
  first?: FirstCommand;
}

/** SandboxSpec.first: the command, and files put in before it runs. */
export interface FirstCommand {
  argv: string[];
  /**
   * A tar extracted into `dest` (ownership from its headers) after the
   * sandbox is made and before its first process starts: the cold path's
   * working tree, whose making on the worker overlaps the sandbox's.
   */
  files?: { tar: Promise<Readable>; dest: string };
}

export interface ExecOptions {
  /** Bytes written to the command's stdin, then closed. */
  stdin?: Buffer | string;
  /** Stops waiting (the command goes on until the sandbox is destroyed). */
  signal?: AbortSignal;
  /** Extra environment of this command only ("NAME=value"). */
  env?: string[];
  /** What of stdout the worker accepts; more throws OutputOverCap. @default STDOUT_CAP */
  stdoutCap?: OutputCap;
}

const MiB = 1024 ** 2;
/** Any exec's stdout, unless it names its own cap: it is held in the worker's memory. */
export const STDOUT_CAP: OutputCap = { bytes: 64 * MiB, what: "a sandbox command's output" };
/** Any exec's stderr past this is dropped (a marker says so): it is only ever an error message. */
export const STDERR_KEPT = MiB;

export interface ExecResult {
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
}

/** Where a started command's output goes as it comes. */
export interface CommandOutput {
  stdout: Writable;
  /** Ignored with a TTY (which merges stderr into stdout). */
  stderr?: Writable;
}

export interface StartOptions {
  /** Keep the command's stdin open (StartedCommand.stdin); else it has none. */
  stdin?: boolean;
  /** A TTY (the attach shell), of this size. */
  tty?: TtySize;
  /**
   * Extra environment of this command ("NAME=value"): it may hold secrets,
   * so the provider never puts it where its engine logs requests (Kubernetes:
   * through stdin). With a TTY only the attach shell's TERM, HOME and PS1.
   */
  env?: string[];
}

/** A command started in a sandbox: the streaming exec primitive. */
export interface StartedCommand {
  /** Its stdin (with StartOptions.stdin): ending it closes the command's stdin. */
  stdin?: Writable;
  /** Its exit code once it ended (-1 when the engine has none); rejects when the connection to it was cut off. */
  exit: Promise<number>;
  resize(size: TtySize): Promise<void>;
  /** Drops the connection (the command goes on until its stdin or the sandbox ends). */
  close(): void;
  /** Whether the connection keeps the worker's event loop alive. */
  ref(busy: boolean): void;
}

/** A process started by attach: its stdin, its demultiplexed output, and a way to let go of it. */
export interface AttachedProcess {
  stdin: NodeJS.WritableStream;
  stdout: Readable;
  stderr: Readable;
  /** Closes the connection: the process sees its stdin end. */
  close(): void;
  /** Whether the connection keeps the worker's process alive (only while an answer is awaited). */
  busy(busy: boolean): void;
}

export interface TtySize {
  cols: number;
  rows: number;
}

/** A shell on a TTY (see SandboxProvider.shell): one raw stream both ways. */
export interface SandboxShell {
  stream: NodeJS.ReadWriteStream;
  resize(size: TtySize): Promise<void>;
  /** Once the stream ended: the shell's exit code (-1 when the provider has none). */
  exitCode(): Promise<number>;
}

/** A sandbox or companion as the provider lists it (for the reaper, and for a companion's labels). */
export interface SandboxInfo {
  /** The provider's own id; destroy takes it as well as the name. */
  id: string;
  name: string;
  labels: Record<string, string>;
  /** Creation time, ms since the epoch. */
  createdMs: number;
}

/** What a host has for sandboxes, as its engine tells. */
export interface HostResources {
  /** The engine's memory. */
  memoryBytes: number;
  /** Free space where the sandboxes' disks live. */
  diskFreeBytes: number;
}

/** An image on the provider's host. */
export interface ImageInfo {
  id: string;
  sizeBytes: number;
  labels: Record<string, string>;
  /** The image's own environment ("NAME=value"), e.g. its PATH. */
  env: string[];
  /** Folders the image declares as volumes (a service's writable state). */
  volumes?: string[];
  /** The image's own health check as argv, when it has one. */
  healthcheck?: string[];
  /** Its ONBUILD triggers (Config.OnBuild): instructions a build FROM it runs first. */
  onBuild?: string[];
  /**
   * Not on the host: a registry's, which the cluster's node pulls when a pod
   * is made of it (Kubernetes, whose provider cannot see its node's images).
   * The allowed-registries rule decides whether it may be used.
   */
  fromRegistry?: boolean;
}

/** An image as a listing shows it. */
export interface ImageSummary {
  id: string;
  /** Its names ("repo:tag"). */
  tags: string[];
  /** Creation time, ms since the epoch. */
  createdMs: number;
}

/**
 * drydock's layer over an image, made on the sandbox's host without a build
 * (nothing of the image runs): empty folders owned by the sandbox user, and
 * the image's configuration set as data (no Dockerfile is read).
 */
export interface ImageLayer {
  tag: string;
  /** The image it goes on, by id. */
  from: string;
  /** Labels of the result, over the image's own. */
  labels: Record<string, string>;
  /** Absolute paths of the empty folders made, owned by `owner`:`owner`. */
  folders: string[];
  owner: number;
  /** Folders declared VOLUMEs of the result (a dev container's named volumes): each sandbox gets them writable, empty. */
  volumes?: string[];
  /** "NAME=value", over the image's own variables of the same names. */
  env: string[];
  user: string;
  workdir: string;
  cmd: string[];
}

/** Transient: a retry may succeed (Temporal retries it). Permanent: it cannot, the caller must act. */
export type SandboxErrorKind = 'transient' | 'permanent';

/** An error of a provider, with its kind. */
export class SandboxError extends Error {
  constructor(
    message: string,
    readonly kind: SandboxErrorKind,
  ) {
    super(message);
    this.name = 'SandboxError';
  }
}

/**
 * The sandbox is gone (killed, destroyed, reaped or never created): permanent
 * for the step. The session replaces it from its last checkpoint.
 */
export class SandboxNotFound extends SandboxError {
  constructor(
    readonly sandbox: string,
    how = 'does not exist',
  ) {
    super(`sandbox ${sandbox} ${how}`, 'permanent');
    this.name = 'SandboxNotFound';
  }
}

/**
 * The sandbox was made but never ran within the provider's start time (a pod
 * the cluster could not schedule or start): permanent, since a retry would
 * wait as long on the same cluster. The message says why and where to look.
 */
export class SandboxDidNotStart extends SandboxError {
  constructor(message: string) {
    super(message, 'permanent');
    this.name = 'SandboxDidNotStart';
  }
}

/**
 * A provider's settings or engine are not fit to run sandboxes, found when
 * the worker starts (sandbox/host-provider.ts): one line naming the setting
 * and what to do, so the worker stops before it takes any work.
 */
export class ProviderCheckFailed extends SandboxError {
  constructor(
    /** The variable to change (DOCKER_HOST, DRYDOCK_K8S_NAMESPACE, ...). */
    readonly setting: string,
    problem: string,
  ) {
    super(`${setting}: ${problem}`, 'permanent');
    this.name = 'ProviderCheckFailed';
  }
}

/** A command exited non-zero where success was required: transient unless the caller knows better. */
export class CommandExitError extends SandboxError {
  constructor(
    readonly command: string,
    readonly exitCode: number,
    readonly stdout: string,
    readonly stderr: string,
  ) {
    super(`'${command}' exited with ${exitCode}: ${(stderr || stdout).trim().slice(-500)}`, 'transient');
    this.name = 'CommandExitError';
  }
}

/** A service beside a sandbox (sandbox/services.ts): its image's own process, in the sandbox's network namespace. */
export interface ServiceContainerSpec {
  /** The sandbox it belongs to: it shares its network namespace, disk and owner labels. */
  sandbox: string;
  /** Its name, unique within the sandbox. */
  service: string;
  image: string;
  labels: Record<string, string>;
  env: string[];
  command?: string[];
  entrypoint?: string[];
  /** Default: the image's user. */
  user?: string;
  workingDir?: string;
  /** Checked by the provider while the service runs (ServiceState.health). */
  healthcheck?: { test: string[]; intervalMs: number; timeoutMs: number; retries: number };
  /** Writable folders, copy-on-write on the sandbox's disk over an image's content at a path. */
  folders: { path: string; from: { image: string; path: string } }[];
  /**
   * Its Unix socket folders (`/var/run/postgresql`), shared with its sandbox
   * (capabilities.serviceSockets): one empty folder on the sandbox's disk, at
   * the same path in both, so a client in the sandbox reaches the socket as on a developer's machine.
   */
  sockets?: string[];
  /** Files and folders it sees read-only (the repo's, its secrets and configs: sandbox/repo-files.ts). */
  files?: { target: string; tree: FileTree; source: string }[];
  /** Other names it is reached by: each resolves to 127.0.0.1 in the sandbox and its services, like its name. */
  hostNames?: string[];
  cpus: number;
  memoryBytes: number;
  pids: number;
  runtime?: string;
}

/** A file (its bytes and permission bits) or a folder of them, copied read-only into a service. */
export type FileTree =
  { kind: 'file'; mode: number; data: Buffer } | { kind: 'folder'; entries: Record<string, FileTree> };

export interface ServiceState {
  running: boolean;
  exitCode: number;
  oomKilled: boolean;
  /** The provider's own checks (ServiceContainerSpec.healthcheck); absent without one. */
  health?: 'starting' | 'healthy' | 'unhealthy';
  /** The last check's output. */
  healthOutput?: string;
}

/** A repo's services beside its sandboxes, on the sandboxes' host. Every method is idempotent. */
export interface ServiceRuntime {
  /**
   * Creates and starts a service (one stopped is started again). Where
   * services are made with their sandbox (SandboxSpec.services), finds it
   * there, and fails (permanent) if the sandbox was made without it.
   */
  start(spec: ServiceContainerSpec): Promise<void>;
  /** The service's state; undefined when there is none of that name. */
  state(sandbox: string, service: string): Promise<ServiceState | undefined>;
  /** The sandbox's services, by name. */
  list(sandbox: string): Promise<string[]>;
  /** Runs argv in the service as its own user; the exit code (-1 when it could not run). */
  exec(sandbox: string, service: string, argv: string[]): Promise<number>;
  /** The service's log (stdout and stderr as they came), its last `lines` lines when given. */
  log(sandbox: string, service: string, lines?: number): Promise<string>;
  /** Stops it cleanly (its image's stop signal), killing it after `graceSeconds`. */
  stop(sandbox: string, service: string, graceSeconds: number): Promise<void>;
  /**
   * An image of the stopped service's image holding `folders` as they are
   * now, folder n under DATA_ROOT/<n>/ (dataPath); an existing `tag` is kept.
   * Absent: a snapshot build of a repo whose services keep data is refused.
   */
  captureData?(
    sandbox: string,
    service: string,
    opts: { image: string; folders: string[]; tag: string; labels: Record<string, string> },
  ): Promise<string>;
  /**
   * A crash-consistent copy of what the service wrote into its data folders
   * since it was made in this sandbox (taken with it paused), for a session's
   * checkpoint; undefined when it has no data folder, or nothing changed since
   * the copy whose fingerprint is `since`. Throws when the copy is over
   * `maxBytes`. Absent: a replacement's services start from the snapshot's data.
   */
  saveData?(
    sandbox: string,
    service: string,
    opts: { since?: string; maxBytes: number },
  ): Promise<ServiceDataCopy | undefined>;
  /**
   * Puts a copy back before the service is first started in a sandbox (so
   * `start(spec)` runs it over the copy); false, and nothing done, when the
   * service was made already (a retry) or the copy lies over other lower
   * layers than `spec`'s folders (another snapshot's data).
   */
  restoreData?(spec: ServiceContainerSpec, copy: Pick<ServiceDataCopy, 'lowers' | 'tar'>): Promise<boolean>;
  /** Readies the copy-on-write lower layer of an image's folder on this host now rather than at a start. */
  prepareFolder(image: string, path: string): Promise<void>;
  /** Pulls an image from its registry (a snapshot build only); returns the digest it got. */
  pull(ref: string): Promise<string>;
}

/** A service's data as a checkpoint keeps it (ServiceRuntime.saveData). */
export interface ServiceDataCopy {
  /** What the copy lies over: the service's folders and the images their content came from. */
  lowers: string;
  /** Equal for two copies of the same content: a checkpoint with nothing new copies nothing. */
  fingerprint: string;
  /** The copy itself (the provider's format: Docker's is a gzipped tar of the overlays' upper layers). */
  tar: Buffer;
}

/** Where a data image keeps data folder n: DATA_ROOT/<n>/<the folder's own name>. */
export const DATA_ROOT = '/drydock-data';
export function dataPath(n: number, folder: string): string {
  return `${DATA_ROOT}/${n}/${folder.replace(/\/+$/, '').split('/').pop()}`;
}

/**
 * What makes, runs and removes sandboxes on one host. Every method is
 * idempotent where its doc says so: a retried activity calls it again.
 */
export interface SandboxProvider {
  /** For logs: "docker". */
  readonly name: string;
  readonly capabilities: ProviderCapabilities;
  /** A repo's services beside its sandboxes; absent: it runs none (a repo that declares some is refused). */
  readonly services?: ServiceRuntime;
  /** The images its sandboxes run, on their host; absent: it keeps none (imageStoreOf says so where one is needed). */
  readonly imageStore?: ImageStore;
  /**
   * Where a provider that builds nothing on its sandboxes' host gets a repo's
   * environment built and delivered (Kubernetes: ./kubernetes/builds.ts);
   * absent with buildsImages false: a repo that declares one is refused.
   */
  readonly environmentBuilds?: EnvironmentBuilds;

  /** Creates and starts a sandbox (or a companion, with `companionOf`), or returns the one of that name: a retry. */
  create(spec: SandboxSpec): Promise<{ id: string; created: boolean; first?: ExecResult }>;
  exists(name: string): Promise<boolean>;
  /** The sandbox's id, labels and age; undefined when it is gone. */
  info(name: string): Promise<SandboxInfo | undefined>;
  /** Sandboxes and companions (running or not) carrying a drydock session label, of one host if given. */
  list(hostId?: string): Promise<SandboxInfo[]>;
  /** What the host has for sandboxes (admission); absent: the provider does not say. */
  resources?(): Promise<HostResources>;
  /** Removes a sandbox (by name or id), the companions that joined it and its storage; false when it was already gone. */
  destroy(nameOrId: string): Promise<boolean>;

  /**
   * The one streaming exec primitive a provider writes: argv started as the
   * sandbox user in /workspace, its output to sinks as it comes. exec,
   * execToFile, attach and shell are written once over it, with the output
   * caps and dead-sandbox detection (sandbox/commands.ts, ExecOverStream).
   */
  start(name: string, argv: string[], output: CommandOutput, opts?: StartOptions): Promise<StartedCommand>;
  /**
   * Runs argv as the sandbox user in /workspace; stdout and stderr apart.
   * Throws SandboxNotFound when the sandbox is gone or stopped, whenever that
   * is noticed, and OutputOverCap past `stdoutCap`.
   */
  exec(name: string, argv: string[], opts?: ExecOptions): Promise<ExecResult>;
  /** Like exec, but stdout streams to `file` on the worker's disk, at most `cap.bytes` of it. */
  execToFile(
    name: string,
    argv: string[],
    file: string,
    cap: OutputCap,
  ): Promise<{ exitCode: number; bytes: number; stderr: Buffer }>;
  /** Starts a long-lived helper with its stdin and stdout kept open (the worker talks to it in lines). */
  attach(name: string, argv: string[]): Promise<AttachedProcess>;
  /** A person's interactive shell on a TTY, with the sandbox's own environment and limits. */
  shell(name: string, tty: TtySize & { term?: string }): Promise<SandboxShell>;
  /** Extracts a tar stream into a folder of the sandbox (ownership from the tar headers). */
  copyIn(name: string, tar: Readable, dest: string): Promise<void>;

  /**
   * Removes storage no sandbox uses any more, and what an interrupted image
   * layering left (its staging container), made more than `graceMs` ago; returns what went.
   */
  reapStorage(graceMs?: number): Promise<string[]>;
}

/**
 * The images a provider's sandboxes run, kept on their host: inspected,
 * layered (drydock's layer over a repo's image), made of a sandbox's
 * workspace (a snapshot), readied and removed. An optional part: a remote
 * runtime may keep none.
 */
export interface ImageStore {
  /** An image's id, size, labels and environment, or undefined when there is none by that name. */
  image(ref: string): Promise<ImageInfo | undefined>;
  /** Whether an image holds a file at `path` (its C library's loader, say). */
  imageHasFile(ref: string, path: string): Promise<boolean>;
  /** Images whose names match any of these references ("name" or "name:tag"). */
  images(references: string[]): Promise<ImageSummary[]>;
  /** Makes drydock's layer over an image, without a build (an existing `tag` stays). Needs `capabilities.buildsImages`. */
  layerImage(layer: ImageLayer): Promise<void>;
  /**
   * Makes an image of `source`'s /workspace alone over `baseImage`, tagged
   * `tag` (an existing `tag` is returned as it is: a retry).
   */
  imageFromWorkspace(
    source: string,
    opts: { baseImage: string; tag: string; labels: Record<string, string> },
  ): Promise<{ id: string; sizeBytes: number }>;
  /** Readies what sandboxes of the image need on this host now (idempotent) rather than at the first one. */
  prepareImage(ref: string): Promise<void>;
  /** Removes an image no sandbox uses: 'in_use' when one does, 'gone' when it was already gone. */
  removeImage(ref: string): Promise<'removed' | 'in_use' | 'gone'>;
}

/** The provider's image store; a provider without one fails what needs it, permanently, in one line. */
/**
 * Builds for a provider whose sandboxes run images it cannot make: an
 * engine that builds them (the worker's Docker engine, with the isolated
 * builder: ./builder.ts), and a way to hand each result to where sandboxes
 * run, by a reference that pins its content.
 */
export interface EnvironmentBuilds {
  /** The provider whose image store the environment is built in (bases, the builder's result, drydock's layer). */
  readonly engine: SandboxProvider;
  /** Delivers the engine's image `tag`; returns the reference sandboxes run it by (`registry/name@sha256:…`). Idempotent. */
  publish(tag: string): Promise<string>;
}

/** Whether a repo's own environment can be made for this provider's sandboxes: by itself, or by its build engine. */
export function buildsEnvironments(provider: Pick<SandboxProvider, 'capabilities' | 'environmentBuilds'>): boolean {
  return provider.capabilities.buildsImages || provider.environmentBuilds !== undefined;
}

export function imageStoreOf(provider: Pick<SandboxProvider, 'name' | 'imageStore'>): ImageStore {
  if (!provider.imageStore)
    throw new SandboxError(`the ${provider.name} sandbox provider keeps no images`, 'permanent');
  return provider.imageStore;
}

/** A host name /etc/hosts can hold: letters, digits, ".", "_" and "-". */
const HOST_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;

/**
 * The names that resolve to 127.0.0.1 in a sandbox, as Compose resolves
 * service names on its network: every service's name and other names, and
 * the sandbox's own (the dev container's service). Its services share the
 * sandbox's network namespace, and with it this /etc/hosts.
 */
export function loopbackHosts(spec: Pick<SandboxSpec, 'hostNames' | 'services'>): string[] {
  const names = [
    ...(spec.hostNames ?? []),
    ...(spec.services ?? []).flatMap((s) => [s.service, ...(s.hostNames ?? [])]),
  ];
  const bad = names.find((n) => !HOST_NAME.test(n) || n === 'localhost');
  if (bad !== undefined) throw new Error(`"${bad}" is not a host name a service can be reached by`);
  return [...new Set(names)];
}
