/**
 * The Docker engine as drydock's sandbox provider: one hardened container
 * per sandbox (create options: ./create-options.ts) with copy-on-write
 * /workspace and home (./storage.ts), exec through the engine's API with
 * stdout and stderr demultiplexed and the exit code from the exec's inspect,
 * images built with the docker CLI, snapshots committed from /workspace.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdir, mkdtemp, rm, statfs } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import Docker from 'dockerode';
import { OutputOverCap, type OutputCap } from '../../platform/output-cap';
import {
  COMPANION_LABEL,
  ATTACH_PROMPT,
  ATTACH_SHELL,
  HOME,
  LABELS,
  SANDBOX_USER,
  SandboxNotFound,
  STDERR_KEPT,
  STDOUT_CAP,
  WORKSPACE,
  type AttachedProcess,
  type ExecOptions,
  type ExecResult,
  type HostResources,
  type ImageLayer,
  type ImageInfo,
  type ImageSummary,
  type ProviderCapabilities,
  type SandboxInfo,
  type SandboxProvider,
  type SandboxShell,
  type SandboxSpec,
  type TtySize,
} from '../provider';
import { MCP_STDIO_LABELS } from '../../mcp/stdio';
import { execFoundContainerGone, messageOf, saysContainerGone } from '../container-gone';
import { filesCompanionCreateOptions, isStatus, sandboxCreateOptions, shownLabels } from './create-options';
import { SandboxStorageRoot } from './storage';
import { DockerServices, socketMounts } from './services';

/** Whether the engine refused an exec or a copy because the container is not running any more (404, 409, or its words). */
const refusedAsGone = (err: unknown) => isStatus(err, 404) || isStatus(err, 409) || saysContainerGone(messageOf(err));

/** Disposable Docker containers: no network, non-root, no capabilities, bounded. */
export class DockerProvider implements SandboxProvider {
  readonly name = 'docker';
  readonly capabilities: ProviderCapabilities = {
    snapshots: true,
    buildsImages: true,
    lateCompanions: true,
    diskLimit: true,
    services: true,
    serviceData: true,
    pidsLimit: true,
    serviceSockets: true,
  };
  readonly storage: SandboxStorageRoot;
  readonly services: DockerServices;
  private memoryBytes?: number;

  constructor(
    readonly docker: Docker = new Docker(),
    /** Where sandboxes' upper layers live: the same path on the host and here. */
    storageRoot = path.join(tmpdir(), 'drydock-sandbox-storage'),
  ) {
    this.storage = new SandboxStorageRoot(docker, storageRoot);
    this.services = new DockerServices(docker, this.storage);
  }

  /** Creates and starts the sandbox, or returns the one that already has this name. */
  async create(spec: SandboxSpec): Promise<{ id: string; created: boolean }> {
    try {
      if (await this.exists(spec.name)) throw Object.assign(new Error('exists'), { statusCode: 409 });
      const { sharingFiles, companionOf } = spec;
      if (sharingFiles && companionOf) {
        const of = await this.docker.getContainer(companionOf).inspect();
        const options = filesCompanionCreateOptions({ ...spec, sharingFiles, companionOf }, of);
        const container = await this.docker.createContainer(options);
        await container.start();
        return { id: container.id, created: true };
      }
      const storage = await this.storage.prepare(spec.name, spec.image, WORKSPACE, HOME, spec.diskBytes);
      // Its services' socket folders, known now: a service made later binds the same folder.
      const sockets: Docker.MountSettings[] = [];
      for (const service of spec.services ?? []) sockets.push(...(await socketMounts(this.storage, service)));
      // The image's VOLUMEs get bounded mounts of drydock's, never the engine's anonymous volumes.
      const volumes = (await this.image(spec.image))?.volumes ?? [];
      const container = await this.docker.createContainer(sandboxCreateOptions(spec, storage, volumes, sockets));
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

  /** The engine's memory (asked once: it does not change) and the free space under the storage root now. */
  async resources(): Promise<HostResources> {
    this.memoryBytes ??= (await this.docker.info()).MemTotal as number;
    await mkdir(this.storage.root, { recursive: true });
    const disk = await statfs(this.storage.root);
    return { memoryBytes: this.memoryBytes, diskFreeBytes: disk.bavail * disk.bsize };
  }

  async info(name: string): Promise<SandboxInfo | undefined> {
    try {
      const info = await this.docker.getContainer(name).inspect();
      return {
        id: info.Id,
        name: info.Name.replace(/^\//, ''),
        labels: info.Config.Labels ?? {},
        createdMs: Date.parse(info.Created),
      };
    } catch (err) {
      if (isStatus(err, 404)) return undefined;
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
      // The engine refusing the exec for a dead container, or its stream cut off with the container gone.
      if (refusedAsGone(err) || !(await this.isRunning(name))) throw new SandboxNotFound(name, 'stopped');
      throw err;
    }
    // The runtime could not start the command in a container going away (whatever inspect says yet).
    if (execFoundContainerGone(result)) throw new SandboxNotFound(name, 'stopped');
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
    // Under gVisor an exec's stream outlives its container (killed, or its memory limit hit): end it then.
    const stopped = new AbortController();
    this.docker
      .getContainer(name)
      .wait({ abortSignal: stopped.signal })
      .then(
        () => stream.destroy(new SandboxNotFound(name, 'stopped')),
        () => undefined,
      );
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
      stopped.abort();
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
      if (refusedAsGone(err)) throw new SandboxNotFound(name, 'stopped');
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
        // The agent wrote ~/.bashrc and ~/.profile: no startup file runs (ENV is sh's), the prompt is drydock's.
        Cmd: ['sh', '-c', ATTACH_SHELL],
        User: SANDBOX_USER,
        WorkingDir: WORKSPACE,
        Env: [`TERM=${tty.term ?? 'xterm'}`, `HOME=${HOME}`, `PS1=${ATTACH_PROMPT}`],
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
      if (refusedAsGone(err)) throw new SandboxNotFound(name, 'stopped');
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
    const found = await this.docker.listContainers({
      all: true,
      filters: { label: [`${COMPANION_LABEL}=${sandbox}`] },
    });
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

  async image(ref: string): Promise<ImageInfo | undefined> {
    try {
      const info = await this.docker.getImage(ref).inspect();
      const config = info.Config as (typeof info.Config & { Healthcheck?: { Test?: string[] } }) | undefined;
      const healthcheck = healthcheckArgv(config?.Healthcheck?.Test);
      return {
        id: info.Id,
        sizeBytes: info.Size,
        labels: config?.Labels ?? {},
        env: config?.Env ?? [],
        volumes: Object.keys(config?.Volumes ?? {}),
        ...(healthcheck ? { healthcheck } : {}),
        ...(config?.OnBuild?.length ? { onBuild: config.OnBuild } : {}),
      };
    } catch (err) {
      if (isStatus(err, 404)) return undefined;
      throw err;
    }
  }

  async imageHasFile(ref: string, file: string): Promise<boolean> {
    const probe = await this.docker.createContainer({
      Image: ref,
      Entrypoint: ['true'],
      HostConfig: { NetworkMode: 'none' },
    });
    try {
      return await probe.getArchive({ path: file }).then(
        () => true,
        () => false,
      );
    } finally {
      await probe.remove({ force: true });
    }
  }

  async images(references: string[]): Promise<ImageSummary[]> {
    const found = await this.docker.listImages({ filters: { reference: references } });
    return found.map((i) => ({ id: i.Id, tags: i.RepoTags ?? [], createdMs: i.Created * 1000 }));
  }

  /**
   * drydock's layer over an image with no build (docs/builder.md): a
   * container of the image is created and never started, so nothing of the
   * image runs; the daemon extracts a tar of the empty folders into it; its
   * configuration (env, user, folder, command, labels) is given as data and
   * kept by the commit, the way imageFromWorkspace makes a snapshot.
   */
  async layerImage(layer: ImageLayer): Promise<void> {
    if (await this.image(layer.tag)) return;
    // The image's VOLUMEs covered by mounts that exist only while running: an anonymous volume
    // would leave its mount point in the layer, root's, which then shadows the sandbox's own cover.
    const volumes = (await this.image(layer.from))?.volumes ?? [];
    // A worker that died between create and remove left this name: a retry removes it first.
    const name = layerStagingName(layer.tag);
    await this.removeStaging(name);
    const staging = await this.docker.createContainer({
      name,
      Image: layer.from,
      Cmd: layer.cmd,
      Env: layer.env,
      User: layer.user,
      WorkingDir: layer.workdir,
      Labels: { ...layer.labels, [LAYER_STAGING_LABEL]: name },
      ...(layer.volumes?.length ? { Volumes: Object.fromEntries(layer.volumes.map((v) => [v, {}])) } : {}),
      NetworkDisabled: true,
      HostConfig: {
        NetworkMode: 'none',
        Mounts: volumes.map((target): Docker.MountSettings => ({ Type: 'tmpfs', Source: '', Target: target })),
      },
    });
    try {
      await staging.putArchive(await emptyFoldersTar(layer.folders, layer.owner), { path: '/' });
      const [repo, tag] = splitTag(layer.tag);
      // The commit keeps the container's labels: the staging label is emptied, so the image is nobody's staging.
      await staging.commit({ repo, tag, comment: "drydock's layer", changes: `LABEL ${LAYER_STAGING_LABEL}=` });
    } finally {
      await this.removeStaging(name);
    }
  }

  private async removeStaging(name: string): Promise<void> {
    await this.docker
      .getContainer(name)
      .remove({ force: true, v: true })
      .catch((err: unknown) => {
        if (!isStatus(err, 404) && !isStatus(err, 409)) throw err; // 409: its removal is under way
      });
  }

  /** layerImage's staging containers older than `graceMs` (a worker died between create and remove). */
  private async reapLayerStaging(graceMs: number): Promise<string[]> {
    const found = await this.docker.listContainers({ all: true, filters: { label: [LAYER_STAGING_LABEL] } });
    const removed: string[] = [];
    for (const c of found) {
      const name = c.Names[0]?.replace(/^\//, '');
      // Only a staging container names itself: one made from a layered image inherits the emptied label.
      if (!name || c.Labels[LAYER_STAGING_LABEL] !== name || c.Created * 1000 > Date.now() - graceMs) continue;
      await this.removeStaging(name);
      removed.push(`layer staging container ${name}`);
    }
    return removed;
  }

  /** Stdio MCP servers' containers past their expiry (a worker died before removing its own, mcp/stdio.ts). */
  async reapMcpStdio(): Promise<string[]> {
    const found = await this.docker.listContainers({ all: true, filters: { label: [MCP_STDIO_LABELS.server] } });
    const removed: string[] = [];
    for (const c of found) {
      const expires = Date.parse(c.Labels[MCP_STDIO_LABELS.expires] ?? '');
      const name = c.Names[0]?.replace(/^\//, '') ?? c.Id;
      if (!(expires < Date.now())) continue;
      await this.removeStaging(name);
      removed.push(`MCP stdio server container ${name}`);
    }
    return removed;
  }

  /** Containers (any state) created from an image. */
  private async containersOf(image: string): Promise<Docker.ContainerInfo[]> {
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
    const removed = [...(await this.reapLayerStaging(graceMs)), ...(await this.reapMcpStdio())];
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

  async list(hostId?: string): Promise<SandboxInfo[]> {
    const label = hostId ? [LABELS.session, `${LABELS.host}=${hostId}`] : [LABELS.session];
    const found = await this.docker.listContainers({ all: true, filters: { label } });
    return found.map((c) => ({
      id: c.Id,
      name: c.Names[0]?.replace(/^\//, '') ?? c.Id,
      labels: c.Labels,
      createdMs: c.Created * 1000,
    }));
  }
}

/** On layerImage's staging container: its own name (the reaper removes one a crash left, reapStorage). */
export const LAYER_STAGING_LABEL = 'drydock.layer-staging';

/** The staging container's name for a tag: the same on every try, so a retry finds what an interrupted one left. */
export function layerStagingName(tag: string): string {
  return `drydock-layer-${createHash('sha256').update(tag).digest('hex').slice(0, 16)}`;
}

function splitTag(ref: string): [string, string] {
  const i = ref.lastIndexOf(':');
  return i > ref.lastIndexOf('/') ? [ref.slice(0, i), ref.slice(i + 1)] : [ref, 'latest'];
}

/** A tar of empty folders (absolute paths; their parents are made by the daemon, root's), owned by `owner`. */
async function emptyFoldersTar(folders: string[], owner: number): Promise<Buffer> {
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-layer-'));
  try {
    const relative = folders.map((f) => path.posix.relative('/', f));
    for (const f of relative) await mkdir(path.join(dir, f), { recursive: true, mode: 0o755 });
    const tar = spawn('tar', [
      '-C',
      dir,
      `--owner=${owner}`,
      `--group=${owner}`,
      '--numeric-owner',
      '--mode=755',
      '--no-recursion',
      '-cf',
      '-',
      ...relative,
    ]);
    const chunks: Buffer[] = [];
    tar.stdout.on('data', (c: Buffer) => chunks.push(c));
    let failed = '';
    tar.stderr.on('data', (c: Buffer) => (failed += c.toString()));
    const code = await new Promise<number | null>((resolve, reject) => {
      tar.on('error', reject);
      tar.on('close', resolve);
    });
    if (code !== 0) throw new Error(`tar of ${folders.join(', ')} failed: ${failed}`);
    return Buffer.concat(chunks);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Docker's HEALTHCHECK test (["CMD", …], ["CMD-SHELL", "…"], ["NONE"]) as argv, or undefined. */
function healthcheckArgv(test: string[] | undefined): string[] | undefined {
  if (!test?.length || test[0] === 'NONE') return undefined;
  if (test[0] === 'CMD-SHELL') return ['sh', '-c', test.slice(1).join(' ')];
  return test[0] === 'CMD' ? test.slice(1) : test;
}
