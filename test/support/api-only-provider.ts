/**
 * A third sandbox provider, for the tests only: sandboxes on a Docker engine
 * reached over its API alone, as a remote runtime is (no host folder and no
 * socket of the worker's mounted: capabilities.hostFolders false; no image
 * store, no services). It writes only the lifecycle and the one streaming
 * exec primitive; exec, execToFile, attach, shell and the tar copy are
 * sandbox/commands.ts's, as for the Docker and Kubernetes providers. It
 * passes the provider contract (test/support/provider-contract.ts) that they
 * pass; it is not a product feature.
 */
import type { Readable } from 'node:stream';
import Docker from 'dockerode';
import { ExecOverStream } from '../../sandbox/commands';
import { DockerProvider } from '../../sandbox/docker/provider';
import {
  LABELS,
  SANDBOX_USER,
  SandboxError,
  WORKSPACE,
  type CommandOutput,
  type ProviderCapabilities,
  type SandboxInfo,
  type SandboxProvider,
  type SandboxSpec,
  type StartedCommand,
  type StartOptions,
} from '../../sandbox/provider';

const isStatus = (err: unknown, code: number) => (err as { statusCode?: number } | null)?.statusCode === code;
const unsupported = (what: string) => new SandboxError(`the api-only test provider ${what}`, 'permanent');

export class ApiOnlyProvider extends ExecOverStream implements SandboxProvider {
  readonly name = 'api-only';
  readonly capabilities: ProviderCapabilities = {
    hostFolders: false,
    buildsImages: false,
    lateCompanions: false,
  };
  /** The engine's exec over its API: the Docker provider's streaming primitive, nothing of its host storage. */
  private readonly engine: DockerProvider;

  constructor(readonly docker: Docker = new Docker()) {
    super();
    this.engine = new DockerProvider(docker);
  }

  /** A container with no network, as the sandbox user, bounded; no host folder mounted (it refuses a spec that asks). */
  async create(spec: SandboxSpec): Promise<{ id: string; created: boolean }> {
    if (spec.mounts?.length || spec.agentsDir || spec.companionOf || spec.services?.length) {
      throw unsupported('mounts no host folder and makes no companion');
    }
    const found = await this.info(spec.name);
    if (found) return { id: found.id, created: false };
    const container = await this.docker.createContainer({
      name: spec.name,
      Image: spec.image,
      Entrypoint: ['sleep'],
      Cmd: ['infinity'],
      User: SANDBOX_USER,
      WorkingDir: WORKSPACE,
      Labels: spec.labels,
      Env: spec.env,
      HostConfig: {
        NetworkMode: 'none',
        CapDrop: ['ALL'],
        SecurityOpt: ['no-new-privileges'],
        Memory: spec.memoryBytes,
        NanoCpus: Math.round(spec.cpus * 1e9),
        PidsLimit: spec.pids,
        Tmpfs: { '/tmp': `size=${spec.tmpBytes}` },
      },
    });
    await container.start();
    // /workspace belongs to the sandbox user: made by root once, over the API.
    const mkdir = await container.exec({
      Cmd: ['sh', '-c', `mkdir -p ${WORKSPACE} && chown 1000:1000 ${WORKSPACE}`],
      User: '0',
    });
    await new Promise((resolve, reject) =>
      mkdir.start({}).then((s) => s.on('end', resolve).on('error', reject).resume(), reject),
    );
    return { id: container.id, created: true };
  }

  async exists(name: string): Promise<boolean> {
    return (await this.info(name)) !== undefined;
  }

  async info(name: string): Promise<SandboxInfo | undefined> {
    try {
      const info = await this.docker.getContainer(name).inspect();
      const labels = info.Config.Labels ?? {};
      return { id: info.Id, name: info.Name.replace(/^\//, ''), labels, createdMs: Date.parse(info.Created) };
    } catch (err) {
      if (isStatus(err, 404)) return undefined;
      throw err;
    }
  }

  async list(hostId?: string): Promise<SandboxInfo[]> {
    const label = hostId ? [`${LABELS.host}=${hostId}`] : [LABELS.session];
    const found = await this.docker.listContainers({ all: true, filters: { label } });
    return found
      .filter((c) => c.Labels[LABELS.session])
      .map((c) => ({ id: c.Id, name: c.Names[0].replace(/^\//, ''), labels: c.Labels, createdMs: c.Created * 1000 }));
  }

  async destroy(nameOrId: string): Promise<boolean> {
    try {
      await this.docker.getContainer(nameOrId).remove({ force: true });
      return true;
    } catch (err) {
      if (isStatus(err, 404)) return false;
      if (isStatus(err, 409)) return true; // its removal already runs
      throw err;
    }
  }

  start(name: string, argv: string[], output: CommandOutput, opts?: StartOptions): Promise<StartedCommand> {
    return this.engine.start(name, argv, output, opts);
  }

  protected mayBeGone(): boolean {
    return true;
  }

  protected async isRunning(name: string, settleMs = 0): Promise<boolean> {
    const deadline = Date.now() + settleMs;
    for (;;) {
      const info = await this.docker
        .getContainer(name)
        .inspect()
        .catch((err: unknown) => {
          if (isStatus(err, 404)) return undefined;
          throw err;
        });
      if (!info?.State.Running) return false;
      if (Date.now() >= deadline) return true;
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /** With the sandbox's own tar, over the exec primitive (no engine copy). */
  copyIn(name: string, tar: Readable, dest: string): Promise<void> {
    return this.copyInByTar(name, tar, dest, ['--no-same-owner']);
  }

  /** No image store (SandboxProvider.imageStore): what needs one is refused where it is asked (imageStoreOf). */
  async reapStorage(): Promise<string[]> {
    return [];
  }
}
