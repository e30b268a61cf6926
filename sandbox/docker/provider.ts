/**
 * The Docker engine as drydock's sandbox provider: one hardened container
 * per sandbox (create options: ./create-options.ts) with copy-on-write
 * /workspace and home (./storage.ts), exec through the engine's API with
 * stdout and stderr demultiplexed and the exit code from the exec's inspect,
 * images built with the docker CLI, snapshots committed from /workspace.
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, statfs } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough, Writable, type Duplex, type Readable } from 'node:stream';
import Docker from 'dockerode';
import {
  COMPANION_LABEL,
  HOME,
  LABELS,
  SANDBOX_USER,
  SandboxNotFound,
  WORKSPACE,
  type HostResources,
  type ImageLayer,
  type CommandOutput,
  type ExecResult,
  type ImageInfo,
  type ImageStore,
  type ImageSummary,
  type ProviderCapabilities,
  type SandboxInfo,
  type SandboxProvider,
  type SandboxSpec,
  type StartedCommand,
  type StartOptions,
} from '../provider';
import { MCP_STDIO_LABELS } from '../../mcp/stdio';
import { messageOf, saysContainerGone } from '../container-gone';
import { ExecOverStream } from '../commands';
import {
  filesCompanionCreateOptions,
  firstProcessCmd,
  isStatus,
  sandboxCreateOptions,
  shownLabels,
} from './create-options';
import { SandboxStorageRoot } from './storage';
import { DockerServices, socketMounts } from './services';

/** Whether the engine refused an exec or a copy because the container is not running any more (404, 409, or its words). */
const refusedAsGone = (err: unknown) => isStatus(err, 404) || isStatus(err, 409) || saysContainerGone(messageOf(err));

/** Disposable Docker containers: no network, non-root, no capabilities, bounded. */
export class DockerProvider extends ExecOverStream implements SandboxProvider, ImageStore {
  readonly name = 'docker';
  readonly capabilities: ProviderCapabilities = {
    hostFolders: true,
    buildsImages: true,
    lateCompanions: true,
    serviceSockets: true,
    firstCommand: true,
  };
  readonly storage: SandboxStorageRoot;
  readonly services: DockerServices;
  /** The engine's own images. */
  readonly imageStore: ImageStore = this;
  private memoryBytes?: number;

  constructor(
    readonly docker: Docker = new Docker(),
    /** Where sandboxes' upper layers live: the same path on the host and here. */
    storageRoot = path.join(tmpdir(), 'drydock-sandbox-storage'),
  ) {
    super();
    this.storage = new SandboxStorageRoot(docker, storageRoot);
    this.services = new DockerServices(docker, this.storage);
  }

  /** Creates and starts the sandbox, or returns the running one that already has this name. */
  async create(spec: SandboxSpec): Promise<{ id: string; created: boolean; first?: ExecResult }> {
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
      // The image's VOLUMEs get bounded mounts of drydock's, never the engine's anonymous volumes
      // (its inspect while the storage is made: neither needs the other).
      const [storage, image] = await Promise.all([
        this.storage.prepare(spec.name, spec.image, WORKSPACE, HOME, spec.diskBytes),
        this.imageStore.image(spec.image),
      ]);
      const volumes = image?.volumes ?? [];
      // Its services' socket folders, known now: a service made later binds the same folder.
      const sockets: Docker.MountSettings[] = [];
      for (const service of spec.services ?? []) sockets.push(...(await socketMounts(this.storage, service)));
      const options = sandboxCreateOptions(spec, storage, volumes, sockets);
      if (!spec.first) {
        const container = await this.docker.createContainer(options);
        await container.start();
        return { id: container.id, created: true };
      }
      const nonce = randomBytes(8).toString('hex');
      const container = await this.docker.createContainer({ ...options, Cmd: firstProcessCmd(spec.first.argv, nonce) });
      const { files } = spec.first;
      if (files) await container.putArchive(await files.tar, { path: files.dest });
      return { id: container.id, created: true, first: await this.startWithFirst(container, spec.name, nonce) };
    } catch (err) {
      if (!isStatus(err, 409)) throw err;
      // Same name: a retry of this provisioning. A running one is reused, never a second sandbox.
      const info = await this.docker.getContainer(spec.name).inspect();
      if (info.State.Running) return { id: info.Id, created: false };
      // Made but not running (its worker died between create and start, or it was killed): started
      // again, its first process would prepare the workspace a second time beside the retry's own
      // preparation, and could reset the checkpoint that one applied. Made anew instead.
      await this.destroy(spec.name);
      if (await this.exists(spec.name)) throw new Error(`${spec.name} is still being removed; provision it again`);
      return this.create(spec);
    }
  }

  /**
   * Starts a container whose first process runs a command first
   * (firstProcessCmd): its output is read through an attach opened before
   * the start, up to the line with `nonce` and the exit code, then let go
   * (the container keeps running). A first process that ends without that
   * line (the sandbox died, its image has no sleep) fails the create.
   */
  private async startWithFirst(container: Docker.Container, name: string, nonce: string): Promise<ExecResult> {
    const stream = (await container.attach({ stream: true, stdout: true, stderr: true, hijack: true })) as Duplex;
    const stdout = new BoundedSink();
    const stderr = new BoundedSink();
    const mark = Buffer.from(`\n${nonce} `);
    const errMark = Buffer.from(`\n${nonce}\n`);
    const result = new Promise<ExecResult>((resolve, reject) => {
      // The engine copies stdout and stderr apart: each is read up to its own line.
      const read = () => {
        const at = stdout.bytes.indexOf(mark);
        const end = at < 0 ? -1 : stdout.bytes.indexOf('\n', at + mark.length);
        const errAt = stderr.bytes.indexOf(errMark);
        if (end < 0 || errAt < 0) return;
        const exitCode = Number(stdout.bytes.subarray(at + mark.length, end).toString());
        resolve({ exitCode, stdout: stdout.bytes.subarray(0, at), stderr: stderr.bytes.subarray(0, errAt) });
      };
      stdout.on('chunk', read);
      stderr.on('chunk', read);
      const ended = () => {
        const said = stderr.bytes.toString().trim().slice(-500);
        reject(said ? new Error(`the sandbox's first process ended: ${said}`) : new SandboxNotFound(name, 'stopped'));
      };
      stream.on('end', ended);
      stream.on('close', ended);
      stream.on('error', reject);
    });
    result.catch(() => undefined); // awaited below, after the start
    this.docker.modem.demuxStream(stream, stdout, stderr);
    try {
      await container.start();
      return await result;
    } finally {
      stream.destroy();
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
   * The streaming exec (sandbox/commands.ts writes exec, execToFile, attach
   * and shell over it): a hijacked exec of the engine's API, stdout and
   * stderr demultiplexed into the sinks (a sink that is full pauses the
   * connection until it drains), the exit code from the exec's inspect.
   */
  async start(name: string, argv: string[], output: CommandOutput, opts: StartOptions = {}): Promise<StartedCommand> {
    let exec: Docker.Exec;
    let stream: NodeJS.ReadWriteStream & Duplex;
    try {
      exec = await this.docker.getContainer(name).exec({
        Cmd: argv,
        User: SANDBOX_USER,
        WorkingDir: WORKSPACE,
        AttachStdout: true,
        AttachStderr: true,
        AttachStdin: opts.stdin === true,
        ...(opts.tty ? { Tty: true } : {}),
        ...(opts.env ? { Env: opts.env } : {}),
      });
      stream = (await exec.start({
        hijack: true,
        stdin: opts.stdin === true,
        ...(opts.tty ? { Tty: true } : {}),
      })) as NodeJS.ReadWriteStream & Duplex;
    } catch (err) {
      // The engine refusing the exec for a dead container.
      if (refusedAsGone(err)) throw new SandboxNotFound(name, 'stopped');
      throw err;
    }
    const held = (sink: Writable) => {
      let waiting = false;
      return new Writable({
        write(chunk: Buffer, _encoding, done) {
          if (!sink.write(chunk) && !waiting) {
            waiting = true;
            stream.pause();
            sink.once('drain', () => {
              waiting = false;
              stream.resume();
            });
          }
          done();
        },
      });
    };
    if (opts.tty) stream.pipe(held(output.stdout));
    else this.docker.modem.demuxStream(stream, held(output.stdout), held(output.stderr ?? new PassThrough().resume()));
    // Under gVisor an exec's stream outlives its container (killed, or its memory limit hit): end it then.
    const stopped = new AbortController();
    this.docker
      .getContainer(name)
      .wait({ abortSignal: stopped.signal })
      .then(
        () => stream.destroy(new SandboxNotFound(name, 'stopped')),
        () => undefined,
      );
    const exit = new Promise<void>((resolve, reject) => {
      stream.on('end', resolve);
      stream.on('close', resolve);
      stream.on('error', reject);
    })
      .finally(() => stopped.abort())
      .then(async () => (await exec.inspect()).ExitCode ?? -1);
    // Its rejection is the caller's to handle when it awaits `exit`; never unhandled here.
    exit.catch(() => undefined);
    const socket = stream as { ref?: () => void; unref?: () => void };
    if (opts.tty) await exec.resize({ h: opts.tty.rows, w: opts.tty.cols }).catch(() => undefined);
    return {
      stdin: opts.stdin ? stream : undefined,
      exit,
      // A resize that races the shell's exit is of no consequence.
      resize: async (size) => void (await exec.resize({ h: size.rows, w: size.cols }).catch(() => undefined)),
      close: () => stream.destroy(),
      ref: (busy) => (busy ? socket.ref?.() : socket.unref?.()),
    };
  }

  /** Whether an error of a command may mean its container went: any, the engine is asked. */
  protected mayBeGone(): boolean {
    return true;
  }

  /** Whether the container runs, and still does after `settleMs` (polled). */
  protected async isRunning(name: string, settleMs = 0): Promise<boolean> {
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
      // With the anonymous volumes the engine made for the image's VOLUMEs: none is left on the host.
      await probe.remove({ force: true, v: true });
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
    const removed = [
      ...(await this.reapLayerStaging(graceMs)),
      ...(await this.reapMcpStdio()),
      ...(await this.storage.reapSpares(graceMs)),
    ];
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

/** What a first process wrote, its last 64 KiB kept (the end is what is read), told as it comes ('chunk'). */
class BoundedSink extends Writable {
  bytes = Buffer.alloc(0);
  override _write(chunk: Buffer, _encoding: BufferEncoding, done: () => void): void {
    this.bytes = Buffer.concat([this.bytes, chunk]).subarray(-64 * 1024);
    this.emit('chunk');
    done();
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
