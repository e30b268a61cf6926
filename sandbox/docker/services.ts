/**
 * The Docker engine's services (ServiceRuntime, sandbox/provider.ts): each a
 * container joined to its sandbox's network namespace, hardened like the
 * sandbox (no capabilities, no new privileges, read-only root, its own
 * limits, the sandbox's runtime), labelled as the sandbox's companion so the
 * sandbox's removal removes it first, with its writable folders as overlays
 * on the sandbox's disk (sandbox/docker/service-storage.ts).
 */
import type Docker from 'dockerode';
import {
  COMPANION_LABEL,
  type ServiceContainerSpec,
  type ServiceDataCopy,
  type ServiceRuntime,
  type ServiceState,
} from '../provider';
import { isStatus, overlayVolume, shownLabels } from './create-options';
import { captureData, pathLower, serviceFiles, serviceOverlay } from './service-storage';
import { LOWERS_LABEL, lowersOf, restoreServiceData, saveServiceData } from './service-data';
import type { SandboxStorageRoot } from './storage';

/** On a service container: the service's name. */
export const SERVICE_NAME_LABEL = 'drydock.service';
/** A service's /tmp (counted in its memory). */
const SERVICE_TMP = '64m';

/** A service's container: `<sandbox>-svc-<service>`. */
export function serviceContainerName(sandbox: string, service: string): string {
  return `${sandbox}-svc-${service}`;
}

/** A service's socket folders (ServiceContainerSpec.sockets), bound at the same path in it and in its sandbox. */
export async function socketMounts(
  storage: SandboxStorageRoot,
  spec: Pick<ServiceContainerSpec, 'sandbox' | 'service' | 'sockets'>,
): Promise<Docker.MountSettings[]> {
  const mounts: Docker.MountSettings[] = [];
  for (const [n, target] of (spec.sockets ?? []).entries()) {
    const source = await storage.socketFolder(spec.sandbox, spec.service, n);
    mounts.push({ Type: 'bind', Source: source, Target: target, ReadOnly: false });
  }
  return mounts;
}

export class DockerServices implements ServiceRuntime {
  constructor(
    private readonly docker: Docker,
    private readonly storage: SandboxStorageRoot,
  ) {}

  async start(spec: ServiceContainerSpec): Promise<void> {
    const container = this.docker.getContainer(serviceContainerName(spec.sandbox, spec.service));
    const state = await container.inspect().then(
      (info) => info.State,
      () => undefined,
    );
    if (state?.Running) return;
    if (state) return void (await container.start());
    await (await this.docker.createContainer(await this.createOptions(spec))).start();
  }

  private async createOptions(spec: ServiceContainerSpec): Promise<Docker.ContainerCreateOptions> {
    const labels = shownLabels({ ...spec.labels, [COMPANION_LABEL]: spec.sandbox, [SERVICE_NAME_LABEL]: spec.service });
    const hc = spec.healthcheck;
    return {
      name: serviceContainerName(spec.sandbox, spec.service),
      Image: spec.image,
      Labels: { ...labels, ...(spec.folders.length ? { [LOWERS_LABEL]: lowersOf(spec.folders) } : {}) },
      Env: spec.env,
      ...(spec.command ? { Cmd: spec.command } : {}),
      ...(spec.entrypoint ? { Entrypoint: spec.entrypoint } : {}),
      ...(spec.user ? { User: spec.user } : {}),
      ...(spec.workingDir ? { WorkingDir: spec.workingDir } : {}),
      Healthcheck: hc
        ? { Test: ['CMD', ...hc.test], Interval: hc.intervalMs * 1e6, Timeout: hc.timeoutMs * 1e6, Retries: hc.retries }
        : { Test: ['NONE'] },
      HostConfig: {
        NetworkMode: `container:${spec.sandbox}`,
        CapDrop: ['ALL'],
        SecurityOpt: ['no-new-privileges'],
        Privileged: false,
        IpcMode: 'private',
        ReadonlyRootfs: true,
        Tmpfs: { '/tmp': `rw,nosuid,nodev,size=${SERVICE_TMP},mode=1777` },
        Mounts: [
          ...(await this.folderMounts(spec, labels)),
          ...(await this.fileMounts(spec)),
          ...(await socketMounts(this.storage, spec)),
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

  /** Each folder as an anonymous overlay volume, its upper layer on the sandbox's disk. */
  private async folderMounts(spec: ServiceContainerSpec, labels: Record<string, string>) {
    const mounts: Docker.MountSettings[] = [];
    for (const [i, folder] of spec.folders.entries()) {
      const lower = await pathLower(this.docker, folder.from.image, folder.from.path);
      const dirs = await serviceOverlay(this.storage, spec.sandbox, `${spec.service}/${i}`, lower);
      mounts.push(overlayVolume(folder.path, dirs, labels));
    }
    return mounts;
  }

  /** Each of its files bound read-only from its copy on the sandbox's disk. */
  private async fileMounts(spec: ServiceContainerSpec): Promise<Docker.MountSettings[]> {
    if (!spec.files?.length) return [];
    const copies = await serviceFiles(this.storage, spec.sandbox, spec.service, spec.files);
    return copies.map((c) => ({ Type: 'bind', Source: c.source, Target: c.target, ReadOnly: true }));
  }

  async state(sandbox: string, service: string): Promise<ServiceState | undefined> {
    try {
      const { State } = await this.docker.getContainer(serviceContainerName(sandbox, service)).inspect();
      const last = State.Health?.Log?.at(-1)?.Output?.trim();
      // Paused (a checkpoint's copy of its data holds it a moment: service-data.ts), the engine stops its
      // checks and says "unhealthy" with no check failed (moby's CloseMonitorChannel), and after the
      // unpause it keeps saying so until its next check passes; a step's service check meanwhile named a
      // healthy database lost and replaced the sandbox. "unhealthy" with no failing check is unknown, as
      // after a start: a check that really fails counts its streak (the engine's retries, at least 1).
      const noCheckFailed = State.Health?.Status === 'unhealthy' && !State.Health.FailingStreak;
      const health = State.Paused || noCheckFailed ? 'starting' : State.Health?.Status;
      return {
        running: State.Running,
        exitCode: State.ExitCode,
        oomKilled: State.OOMKilled,
        ...(State.Health && State.Health.Status !== 'none' ? { health: health as ServiceState['health'] } : {}),
        ...(last ? { healthOutput: last.slice(-300) } : {}),
      };
    } catch (err) {
      if (isStatus(err, 404)) return undefined;
      throw err;
    }
  }

  async list(sandbox: string): Promise<string[]> {
    const found = await this.docker.listContainers({
      all: true,
      filters: { label: [`${COMPANION_LABEL}=${sandbox}`, SERVICE_NAME_LABEL] },
    });
    return found.map((c) => c.Labels[SERVICE_NAME_LABEL]);
  }

  async exec(sandbox: string, service: string, argv: string[]): Promise<number> {
    try {
      const container = this.docker.getContainer(serviceContainerName(sandbox, service));
      const exec = await container.exec({ Cmd: argv, AttachStdout: true, AttachStderr: true });
      const stream = await exec.start({ hijack: true, stdin: false });
      await new Promise<void>((resolve) => {
        stream
          .on('end', resolve)
          .on('close', resolve)
          .on('error', () => resolve());
        stream.resume();
      });
      return (await exec.inspect()).ExitCode ?? -1;
    } catch {
      return -1;
    }
  }

  async log(sandbox: string, service: string, lines?: number): Promise<string> {
    const raw = (await this.docker
      .getContainer(serviceContainerName(sandbox, service))
      .logs({ stdout: true, stderr: true, follow: false, ...(lines ? { tail: lines } : {}) })) as unknown as Buffer;
    return demux(raw);
  }

  async stop(sandbox: string, service: string, graceSeconds: number): Promise<void> {
    await this.docker
      .getContainer(serviceContainerName(sandbox, service))
      .stop({ t: graceSeconds })
      .catch((err: unknown) => {
        if (!isStatus(err, 304)) throw err; // 304: stopped already (a retry)
      });
  }

  captureData(
    sandbox: string,
    service: string,
    opts: { image: string; folders: string[]; tag: string; labels: Record<string, string> },
  ): Promise<string> {
    return captureData(this.docker, serviceContainerName(sandbox, service), opts);
  }

  saveData(
    sandbox: string,
    service: string,
    opts: { since?: string; maxBytes: number },
  ): Promise<ServiceDataCopy | undefined> {
    const container = serviceContainerName(sandbox, service);
    return saveServiceData(this.docker, this.storage, { sandbox, service, container }, opts);
  }

  async restoreData(spec: ServiceContainerSpec, copy: Pick<ServiceDataCopy, 'lowers' | 'tar'>): Promise<boolean> {
    // Only before its first start here: a service made already (a retry) keeps what it has.
    if (await this.state(spec.sandbox, spec.service)) return false;
    return restoreServiceData(this.storage, spec, copy);
  }

  async prepareFolder(image: string, path: string): Promise<void> {
    await pathLower(this.docker, image, path);
  }

  async pull(ref: string): Promise<string> {
    const stream = await this.docker.pull(ref);
    await new Promise<void>((resolve, reject) =>
      this.docker.modem.followProgress(stream, (err: Error | null) => (err ? reject(err) : resolve())),
    );
    // The digest under this reference's own name (an image may carry others').
    const bare = ref.split('@')[0];
    const name = bare.lastIndexOf(':') > bare.lastIndexOf('/') ? bare.slice(0, bare.lastIndexOf(':')) : bare;
    const digests = (await this.docker.getImage(ref).inspect()).RepoDigests ?? [];
    const digest = digests.find((d) => d.startsWith(`${name}@`))?.split('@')[1];
    if (!digest) throw new Error(`${ref} was pulled but has no digest`);
    return digest;
  }
}

/** Docker's multiplexed log frames (8-byte headers) as text. */
function demux(buf: Buffer): string {
  const parts: Buffer[] = [];
  let i = 0;
  while (i + 8 <= buf.length) {
    const size = buf.readUInt32BE(i + 4);
    parts.push(buf.subarray(i + 8, i + 8 + size));
    i += 8 + size;
  }
  return Buffer.concat(parts).toString('utf8');
}
