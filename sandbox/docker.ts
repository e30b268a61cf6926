import { createWriteStream, type WriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import Docker from 'dockerode';
import { SANDBOX_AGENTS_DIR } from '../workflows/rules/agent-clis';
import { SandboxStorageRoot, type OverlayDirs, type SandboxStorage } from './docker-storage';
import { redactUrl } from '../workflows/rules/repo-url';
import { OutputOverCap, type OutputCap } from '../platform/output-cap';

/** Labels on every sandbox container, so orphans can be found and reaped. */
export const LABELS = {
  session: 'drydock.session',
  repo: 'drydock.repo',
  host: 'drydock.host',
  expires: 'drydock.expires',
} as const;

/** On a container that lives in a sandbox's network namespace (a service, the app): the sandbox's name. */
export const COMPANION_LABEL = 'drydock.companion-of';

export const SANDBOX_USER = '1000:1000';
export const WORKSPACE = '/workspace';
/** The sandbox user's home: git config and drydock-run's state (STATE_DIR). */
export const HOME = '/home/drydock';

export interface SandboxSpec {
  /** Container name: the idempotency key, derived from the session id. */
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
  /** Join this container's network namespace (its loopback only) instead of a network of its own. */
  networkOf?: string;
  /** Docker runtime, e.g. "runsc" (gVisor); default: the engine's (runc). */
  runtime?: string;
  /**
   * false: the root filesystem stays writable (by root only: the sandbox user
   * still cannot write system folders). /workspace and the home folder are
   * copy-on-write overlays either way. @default true
   */
  readonlyRoot?: boolean;
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
export const STDERR_KEPT = 1 * MiB;

export interface ExecResult {
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
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

/** A shell on a TTY (see DockerSandboxes.shell): one raw stream both ways. */
export interface SandboxShell {
  stream: NodeJS.ReadWriteStream;
  resize(size: TtySize): Promise<void>;
  /** Once the stream ended: the shell's exit code (-1 when Docker has none). */
  exitCode(): Promise<number>;
}

/** How a step failed because the sandbox's limits stopped it, not the code's own verdict. */
export type SandboxFault = 'oom' | 'pids' | 'disk_full' | 'timeout';

/** The sandbox cgroup's counters that drydock-run records around a step. */
export interface CgroupCounters {
  /** Processes the kernel killed for want of memory (memory.oom_control / memory.events `oom_kill`). */
  oomKills: number;
  /** Forks refused at the pids limit (pids.events `max`). */
  pidsMax: number;
}

export function parseCounters(text: string): CgroupCounters {
  const count = (name: string) => Number(new RegExp(`^${name} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
  return { oomKills: count('oom_kill'), pidsMax: count('max') };
}

/**
 * Names the limit that stopped a step: an OOM kill or a refused fork during
 * the step (cgroup counters; whatever the exit code), or, for a failed step,
 * a full disk (the error message every tool prints for ENOSPC) or the step's
 * time limit (timeout's 124).
 */
export function sandboxFault(step: {
  exitCode: number;
  output: string;
  before: CgroupCounters;
  after: CgroupCounters;
}): SandboxFault | undefined {
  // A limit the cgroup enforced during the step counts even when the step exits 0
  // (a fork bomb's shell returns at once; a killed child may go unnoticed).
  if (step.after.oomKills > step.before.oomKills) return 'oom';
  if (step.after.pidsMax > step.before.pidsMax) return 'pids';
  if (step.exitCode === 0) return undefined;
  if (/fork: (retry: )?Resource temporarily unavailable|Cannot fork|EAGAIN.*spawn|spawn.*EAGAIN/i.test(step.output)) {
    return 'pids';
  }
  if (/No space left on device|ENOSPC|Disk quota exceeded/i.test(step.output)) return 'disk_full';
  if (step.exitCode === 124) return 'timeout';
  return undefined;
}

/**
 * The sandbox is gone (killed, destroyed, reaped or never created): permanent
 * for the step. The session replaces it from its last checkpoint.
 */
export class SandboxNotFound extends Error {
  constructor(
    readonly sandbox: string,
    how = 'does not exist',
  ) {
    super(`sandbox ${sandbox} ${how}`);
    this.name = 'SandboxNotFound';
  }
}

/** A command exited non-zero where success was required. */
export class CommandExitError extends Error {
  constructor(
    readonly command: string,
    readonly exitCode: number,
    readonly stdout: string,
    readonly stderr: string,
  ) {
    super(`'${command}' exited with ${exitCode}: ${(stderr || stdout).trim().slice(-500)}`);
    this.name = 'CommandExitError';
  }
}

function isStatus(err: unknown, code: number): boolean {
  return typeof err === 'object' && err !== null && (err as { statusCode?: number }).statusCode === code;
}

/** Labels as Docker stores them: anyone who can list containers reads them, so no URL credentials. */
function shownLabels(labels: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(labels).map(([k, v]) => [k, redactUrl(v)]));
}

/**
 * Docker's create options of a sandbox: no network, non-root, no capabilities,
 * no privilege escalation, read-only root, bounded memory, CPU, pids and /tmp.
 * /workspace and the home folder are anonymous volumes of type overlay over
 * the image's copy (sandbox/docker-storage.ts), removed with the container.
 */
export function sandboxCreateOptions(spec: SandboxSpec, storage: SandboxStorage): Docker.ContainerCreateOptions {
  const labels = shownLabels(spec.labels);
  const readonlyRoot = spec.readonlyRoot ?? true;
  const volume = (target: string, dirs: OverlayDirs) => ({
    Type: 'volume' as const,
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
  });
  return {
    name: spec.name,
    Image: spec.image,
    Cmd: ['sleep', 'infinity'],
    User: SANDBOX_USER,
    WorkingDir: WORKSPACE,
    Labels: labels,
    ...(spec.env?.length ? { Env: spec.env } : {}),
    HostConfig: {
      // Only a loopback interface. (Not NetworkDisabled as well: it leaves /etc/hosts
      // empty, so "localhost" would not resolve for an app and its browser check.)
      NetworkMode: spec.networkOf ? `container:${spec.networkOf}` : 'none',
      CapDrop: ['ALL'],
      // Docker's default seccomp profile applies (nothing here turns it off).
      SecurityOpt: ['no-new-privileges'],
      Privileged: false,
      IpcMode: 'private',
      ReadonlyRootfs: readonlyRoot,
      Tmpfs: { '/tmp': `rw,nosuid,nodev,size=${spec.tmpBytes},mode=1777` },
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
      ],
      Init: true,
      NanoCpus: Math.round(spec.cpus * 1e9),
      Memory: spec.memoryBytes,
      MemorySwap: spec.memoryBytes,
      PidsLimit: spec.pids,
      ...(spec.runtime ? { Runtime: spec.runtime } : {}),
    },
  };
}

/** Disposable Docker containers: no network, non-root, no capabilities, bounded. */
export class DockerSandboxes {
  readonly storage: SandboxStorageRoot;

  constructor(
    readonly docker: Docker = new Docker(),
    /** Where sandboxes' upper layers live: the same path on the host and here. */
    storageRoot = path.join(tmpdir(), 'drydock-sandbox-storage'),
  ) {
    this.storage = new SandboxStorageRoot(docker, storageRoot);
  }

  /** Creates and starts the sandbox, or returns the one that already has this name. */
  async create(spec: SandboxSpec): Promise<{ id: string; created: boolean }> {
    try {
      if (await this.exists(spec.name)) throw Object.assign(new Error('exists'), { statusCode: 409 });
      const storage = await this.storage.prepare(spec.name, spec.image, WORKSPACE, HOME, spec.diskBytes);
      const container = await this.docker.createContainer(sandboxCreateOptions(spec, storage));
      await container.start();
      return { id: container.id, created: true };
    } catch (err) {
      if (!isStatus(err, 409)) throw err;
      // Same name: a retry of this provisioning. Reuse, never a second sandbox.
      const info = await this.docker.getContainer(spec.name).inspect();
      if (!info.State.Running) await this.docker.getContainer(spec.name).start();
      return { id: info.Id, created: false };
    }
  }

  async exists(name: string): Promise<boolean> {
    try {
      await this.docker.getContainer(name).inspect();
      return true;
    } catch (err) {
      if (isStatus(err, 404)) return false;
      throw err;
    }
  }

  /**
   * Runs argv as the sandbox user; stdout and stderr demultiplexed. Throws
   * SandboxNotFound when the container is gone or stopped, whenever that is
   * noticed: before the command starts, while it runs, or as it ends.
   */
  async exec(name: string, argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    return this.checked(name, () => this.execOnce(name, argv, opts), opts.signal);
  }

  /**
   * Like exec, but stdout streams to `file` on the worker's disk (never held
   * in memory), at most `cap.bytes` of it: past that the exec is cut off,
   * the file removed and OutputOverCap thrown. Returns the exit code,
   * stdout's size and stderr.
   */
  async execToFile(
    name: string,
    argv: string[],
    file: string,
    cap: OutputCap,
  ): Promise<{ exitCode: number; bytes: number; stderr: Buffer }> {
    const out = createWriteStream(file);
    const closed = () => new Promise((resolve) => out.end(resolve));
    let result: ExecResult;
    try {
      result = await this.checked(name, () => this.execOnce(name, argv, { stdoutCap: cap }, out));
    } catch (err) {
      await closed();
      await rm(file, { force: true });
      throw err;
    }
    await closed();
    return { exitCode: result.exitCode, bytes: out.bytesWritten, stderr: result.stderr };
  }

  /** One exec, with a dead container reported as SandboxNotFound (see exec). */
  private async checked(name: string, once: () => Promise<ExecResult>, signal?: AbortSignal): Promise<ExecResult> {
    let result: ExecResult;
    try {
      result = await once();
    } catch (err) {
      if (err instanceof SandboxNotFound || err instanceof OutputOverCap || signal?.aborted) throw err;
      // 404/409 from creating, starting or inspecting the exec, or its stream cut off: a dead container.
      if (isStatus(err, 404) || isStatus(err, 409) || !(await this.isRunning(name))) {
        throw new SandboxNotFound(name, 'stopped');
      }
      throw err;
    }
    // A command cut off because its container died (docker kill, OOM of init, host trouble).
    // The exec can end a moment before the container counts as stopped: a command killed
    // by a signal (no exit code, or 137) gets two seconds to see the container go.
    const killed = result.exitCode === -1 || result.exitCode === 137;
    if (result.exitCode !== 0 && !(await this.isRunning(name, killed ? 2_000 : 0))) {
      throw new SandboxNotFound(name, 'stopped');
    }
    return result;
  }

  /**
   * One exec: its exit code (-1 when Docker has none) and demultiplexed
   * output; stdout to `toFile` instead of memory when given. Past the stdout
   * cap the stream is cut (OutputOverCap); stderr past STDERR_KEPT is dropped.
   */
  private async execOnce(name: string, argv: string[], opts: ExecOptions, toFile?: WriteStream): Promise<ExecResult> {
    const exec = await this.docker.getContainer(name).exec({
      Cmd: argv,
      User: SANDBOX_USER,
      WorkingDir: WORKSPACE,
      AttachStdout: true,
      AttachStderr: true,
      AttachStdin: opts.stdin !== undefined,
      ...(opts.env ? { Env: opts.env } : {}),
    });
    const stream = await exec.start({ hijack: true, stdin: opts.stdin !== undefined });
    const cap = opts.stdoutCap ?? STDOUT_CAP;
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    let outBytes = 0;
    let errBytes = 0;
    const outSink = new PassThrough().on('data', (c: Buffer) => {
      outBytes += c.length;
      if (outBytes > cap.bytes) return stream.destroy(new OutputOverCap(cap));
      // A copy: the chunk is a slice of demux's joined buffer, which it would keep alive.
      if (!toFile) return stdout.push(Buffer.from(c));
      // The disk is slower than the socket: hold the sandbox back rather than buffer here.
      if (!toFile.write(c)) {
        stream.pause();
        toFile.once('drain', () => stream.resume());
      }
    });
    const errSink = new PassThrough().on('data', (c: Buffer) => {
      if (errBytes < STDERR_KEPT) stderr.push(c.subarray(0, STDERR_KEPT - errBytes));
      errBytes += c.length;
    });
    this.docker.modem.demuxStream(stream, outSink, errSink);
    const onAbort = () => stream.destroy(opts.signal?.reason ?? new Error('aborted'));
    try {
      // Awaited right here, so its rejection is never left without a handler.
      await new Promise<void>((resolve, reject) => {
        stream.on('end', resolve);
        stream.on('close', resolve);
        stream.on('error', reject);
        if (opts.signal?.aborted) onAbort();
        opts.signal?.addEventListener('abort', onAbort);
        if (opts.stdin !== undefined) stream.end(opts.stdin);
      });
    } finally {
      opts.signal?.removeEventListener('abort', onAbort);
    }
    if (opts.signal?.aborted) throw opts.signal.reason ?? new Error('aborted');
    if (outBytes > cap.bytes) throw new OutputOverCap(cap);
    const info = await exec.inspect();
    if (errBytes > STDERR_KEPT) stderr.push(Buffer.from(`\n[${errBytes - STDERR_KEPT} more bytes of stderr not kept]`));
    return { exitCode: info.ExitCode ?? -1, stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr) };
  }

  /**
   * Starts argv as the sandbox user and keeps its stdin and stdout open (one
   * hijacked exec): for a long-lived helper the worker talks to in lines.
   * `stdout`/`stderr` end when the process does.
   */
  async attach(name: string, argv: string[]): Promise<AttachedProcess> {
    try {
      const exec = await this.docker.getContainer(name).exec({
        Cmd: argv,
        User: SANDBOX_USER,
        WorkingDir: WORKSPACE,
        AttachStdin: true,
        AttachStdout: true,
        AttachStderr: true,
      });
      const stream = await exec.start({ hijack: true, stdin: true });
      const stdout = new PassThrough();
      const stderr = new PassThrough();
      this.docker.modem.demuxStream(stream, stdout, stderr);
      const ended = () => {
        stdout.end();
        stderr.end();
      };
      stream.on('end', ended).on('close', ended).on('error', ended);
      const socket = stream as { ref?: () => void; unref?: () => void };
      return {
        stdin: stream,
        stdout,
        stderr,
        close: () => stream.destroy(),
        busy: (busy) => (busy ? socket.ref?.() : socket.unref?.()),
      };
    } catch (err) {
      if (isStatus(err, 404) || isStatus(err, 409)) throw new SandboxNotFound(name, 'stopped');
      throw err;
    }
  }

  /**
   * An interactive shell on a TTY as the sandbox user in /workspace, with the
   * sandbox's own environment (no secrets are in it) and its limits: a person
   * in the sandbox (drydock attach). bash when the image has it, else sh.
   */
  async shell(name: string, tty: TtySize & { term?: string }): Promise<SandboxShell> {
    try {
      const exec = await this.docker.getContainer(name).exec({
        Cmd: ['sh', '-c', 'if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi'],
        User: SANDBOX_USER,
        WorkingDir: WORKSPACE,
        Env: [`TERM=${tty.term ?? 'xterm'}`, `HOME=${HOME}`],
        Tty: true,
        AttachStdin: true,
        AttachStdout: true,
        AttachStderr: true,
      });
      const stream = await exec.start({ hijack: true, stdin: true, Tty: true });
      const resize = async (size: TtySize) => {
        // A resize that races the shell's exit is of no consequence.
        await exec.resize({ h: size.rows, w: size.cols }).catch(() => undefined);
      };
      await resize(tty);
      return { stream, resize, exitCode: async () => (await exec.inspect()).ExitCode ?? -1 };
    } catch (err) {
      if (isStatus(err, 404) || isStatus(err, 409)) throw new SandboxNotFound(name, 'stopped');
      throw err;
    }
  }

  /** Whether the container runs, and still does after `settleMs` (polled). */
  private async isRunning(name: string, settleMs = 0): Promise<boolean> {
    const deadline = Date.now() + settleMs;
    for (;;) {
      try {
        if (!(await this.docker.getContainer(name).inspect()).State.Running) return false;
      } catch (err) {
        if (isStatus(err, 404)) return false;
        throw err;
      }
      if (Date.now() >= deadline) return true;
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /** Like exec, but a non-zero exit throws CommandExitError. */
  async run(name: string, argv: string[], opts: ExecOptions = {}): Promise<string> {
    const result = await this.exec(name, argv, opts);
    if (result.exitCode !== 0) {
      throw new CommandExitError(argv.join(' '), result.exitCode, result.stdout.toString(), result.stderr.toString());
    }
    return result.stdout.toString();
  }

  /** Extracts a tar stream into a folder of the sandbox (ownership from the tar headers). */
  async copyIn(name: string, tar: Readable, dest: string): Promise<void> {
    try {
      await this.docker.getContainer(name).putArchive(tar, { path: dest });
    } catch (err) {
      if (isStatus(err, 404) || !(await this.isRunning(name))) throw new SandboxNotFound(name, 'stopped');
      throw err;
    }
  }

  /** Makes the image's copy-on-write lower layers on this host now (idempotent), instead of at its first sandbox. */
  async prepareImage(ref: string): Promise<void> {
    await this.storage.lowers(ref, WORKSPACE, HOME);
  }

  /** Removes the sandbox (by name or id) and its storage; returns false when it was already gone. */
  async destroy(nameOrId: string): Promise<boolean> {
    let name = nameOrId;
    let removed = true;
    try {
      name = (await this.docker.getContainer(nameOrId).inspect()).Name.replace(/^\//, '');
      // Its services first: they live in its network namespace and keep their data on its disk.
      await this.destroyCompanions(name);
      await this.docker.getContainer(nameOrId).remove({ force: true, v: true });
    } catch (err) {
      if (isStatus(err, 404)) removed = false;
      else if (!isStatus(err, 409)) throw err; // 409: removal already in progress
    }
    if (!removed) await this.destroyCompanions(name); // services a crash left without their sandbox
    if (await this.exists(name)) return true; // another call's removal still runs; its storage goes with it
    await this.storage.remove(name);
    return removed;
  }

  /** Removes the containers in a sandbox's network namespace (services, the app), with their volumes. */
  async destroyCompanions(sandbox: string): Promise<void> {
    const found = await this.docker.listContainers({ all: true, filters: { label: [`${COMPANION_LABEL}=${sandbox}`] } });
    for (const c of found) {
      await this.docker
        .getContainer(c.Id)
        .remove({ force: true, v: true })
        .catch((err: unknown) => {
          if (!isStatus(err, 404) && !isStatus(err, 409)) throw err;
        });
    }
  }

  /**
   * Makes an image of `source`'s /workspace alone: a stopped container of
   * `baseImage` (carrying `labels`, which the image inherits) receives the
   * folder as a tar and is committed as `tag`. Nothing else of `source`
   * (its home, /tmp, a changed root) reaches the image; and it works when
   * /workspace is a volume, which `docker commit` of `source` would miss.
   * An existing `tag` is returned as it is (a retry).
   */
  async imageFromWorkspace(
    source: string,
    opts: { baseImage: string; tag: string; labels: Record<string, string> },
  ): Promise<{ id: string; sizeBytes: number }> {
    const existing = await this.image(opts.tag);
    if (existing) return existing;
    const staging = await this.docker.createContainer({
      Image: opts.baseImage,
      Cmd: ['sleep', 'infinity'],
      User: SANDBOX_USER,
      WorkingDir: WORKSPACE,
      Labels: shownLabels(opts.labels),
      HostConfig: { NetworkMode: 'none' },
    });
    try {
      const tar = await this.docker.getContainer(source).getArchive({ path: WORKSPACE });
      await staging.putArchive(tar, { path: '/' });
      const [repo, tag] = splitTag(opts.tag);
      await staging.commit({ repo, tag, comment: `drydock snapshot of ${source}'s ${WORKSPACE}` });
    } finally {
      await staging.remove({ force: true, v: true });
    }
    return (await this.image(opts.tag))!;
  }

  /** An image's id and size, or undefined when there is none by that name. */
  async image(ref: string): Promise<{ id: string; sizeBytes: number; labels: Record<string, string> } | undefined> {
    try {
      const info = await this.docker.getImage(ref).inspect();
      return { id: info.Id, sizeBytes: info.Size, labels: info.Config?.Labels ?? {} };
    } catch (err) {
      if (isStatus(err, 404)) return undefined;
      throw err;
    }
  }

  /** Containers (any state) created from an image. */
  async containersOf(image: string): Promise<Docker.ContainerInfo[]> {
    return this.docker.listContainers({ all: true, filters: { ancestor: [image] } });
  }

  /** Removes an image no container uses: 'in_use' when one does, 'gone' when it was already gone. */
  async removeImage(ref: string): Promise<'removed' | 'in_use' | 'gone'> {
    const image = await this.image(ref);
    if (!image) return 'gone';
    if ((await this.containersOf(ref)).length > 0) return 'in_use';
    try {
      await this.docker.getImage(ref).remove();
      // No sandbox of it is left (the engine refuses while one is): its lower layers can go.
      await this.storage.removeLowers(image.id);
      return 'removed';
    } catch (err) {
      if (isStatus(err, 404)) return 'gone';
      if (isStatus(err, 409)) return 'in_use'; // a container was created meanwhile
      throw err;
    }
  }

  /**
   * Removes storage that no container uses any more: upper layers of
   * sandboxes that are gone (made more than `graceMs` ago, so a sandbox being
   * created keeps its own), and lower layers of images that are gone.
   */
  async reapStorage(graceMs = 10 * 60_000): Promise<string[]> {
    const removed: string[] = [];
    for (const { name, createdMs } of await this.storage.list()) {
      if (createdMs > Date.now() - graceMs || (await this.exists(name))) continue;
      await this.storage.remove(name);
      removed.push(name);
    }
    for (const imageId of await this.storage.lowerImages()) {
      if (await this.image(imageId)) continue;
      await this.storage.removeLowers(imageId);
      removed.push(`lower layers of ${imageId}`);
    }
    return removed;
  }

  /** Sandboxes (running or not) carrying a drydock session label, of one host if given. */
  async list(hostId?: string): Promise<Docker.ContainerInfo[]> {
    const label = hostId ? [LABELS.session, `${LABELS.host}=${hostId}`] : [LABELS.session];
    return this.docker.listContainers({ all: true, filters: { label } });
  }
}

function splitTag(ref: string): [string, string] {
  const i = ref.lastIndexOf(':');
  return i > ref.lastIndexOf('/') ? [ref.slice(0, i), ref.slice(i + 1)] : [ref, 'latest'];
}
