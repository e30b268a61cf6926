/**
 * A sandbox's services (docs/services.md): each a container of its own in
 * the sandbox's network namespace (the app reaches it on localhost, nothing
 * else is reachable), hardened like the sandbox (no capabilities, no new
 * privileges, read-only root, its share of the session's limits, the
 * sandbox's runtime), labelled as the sandbox's companion so every removal
 * of the sandbox removes it first (DockerSandboxes.destroy), and its folders
 * copy-on-write on the sandbox's disk (sandbox/service-storage.ts). Started
 * in dependency order; each is ready once its health check passes (its own,
 * else its image's), else once its ports listen, else once it keeps running.
 */
import type Docker from 'dockerode';
import { COMPANION_LABEL, type DockerSandboxes } from './docker';
import { dataPath, pathLower, serviceOverlay } from './service-storage';
import { startOrder, type ServiceSpec } from '../workflows/services';
import type { Share } from '../workflows/rules/service-limits';

/** A service as a sandbox runs it: its spec with the image to run, and the snapshot's data image. */
export interface RunnableService extends ServiceSpec {
  /** On the host, or pinned by digest at the snapshot's build. */
  image: string;
  /** What setup left in its data folders (sandbox/service-storage.ts captureData); absent: the image's own. */
  dataImage?: string;
}

/** On a snapshot image: its services as JSON (RunnableService[]). */
export const SERVICES_LABEL = 'drydock.snapshot.services';
/** On a service container: the service's name. */
export const SERVICE_NAME_LABEL = 'drydock.service';
/** On a service container: the data image its folders' lower layers come from (kept while it runs). */
export const SERVICE_DATA_LABEL = 'drydock.service.data';
/** A service's /tmp (counted in its memory). */
const SERVICE_TMP = '64m';
/** How long a service without a health check of its own may take to listen on its ports. */
const PORTS_TIMEOUT_MS = 60_000;

/** A service that would not start, died or failed its health check: names it, with its log's tail. */
export class ServiceFailure extends Error {
  constructor(
    readonly service: string,
    what: string,
    readonly logTail = '',
  ) {
    super(`service ${service} ${what}${logTail ? `; its log ends: ${logTail}` : ''}`);
    this.name = 'ServiceFailure';
  }
}

export function serviceContainerName(sandbox: string, service: string): string {
  return `${sandbox}-svc-${service}`;
}

/** The snapshot image's services, or none. */
export function recordedServices(labels: Record<string, string> | undefined): RunnableService[] {
  const text = labels?.[SERVICES_LABEL];
  return text ? (JSON.parse(text) as RunnableService[]) : [];
}

export interface StartOptions {
  shares: Record<string, Share>;
  /** The sandbox's own labels (session, repo, host, expiry): the reaper finds its services by them too. */
  labels: Record<string, string>;
  runtime?: string;
}

/**
 * Starts `services` in `sandbox`'s network namespace, each level of the
 * dependency order together, and waits until each is ready. Idempotent: a
 * retry finds the containers it made and starts any that stopped.
 */
export async function startServices(
  sandboxes: DockerSandboxes,
  sandbox: string,
  services: RunnableService[],
  opts: StartOptions,
): Promise<void> {
  const order = startOrder(services) ?? services;
  const started = new Set<string>();
  while (started.size < order.length) {
    const level = order.filter((s) => !started.has(s.name) && s.dependsOn.every((d) => started.has(d)));
    await Promise.all(level.map((s) => startOne(sandboxes, sandbox, s, opts)));
    await Promise.all(level.map((s) => waitReady(sandboxes, sandbox, s)));
    for (const s of level) started.add(s.name);
  }
}

async function startOne(sandboxes: DockerSandboxes, sandbox: string, s: RunnableService, opts: StartOptions) {
  const name = serviceContainerName(sandbox, s.name);
  const existing = sandboxes.docker.getContainer(name);
  const state = await existing.inspect().then(
    (info) => info.State,
    () => undefined,
  );
  if (state?.Running) return;
  if (state) return existing.start();
  const container = await sandboxes.docker.createContainer(await createOptions(sandboxes, sandbox, s, opts));
  await container.start();
}

/** Docker's create options of one service. */
async function createOptions(
  sandboxes: DockerSandboxes,
  sandbox: string,
  s: RunnableService,
  opts: StartOptions,
): Promise<Docker.ContainerCreateOptions> {
  const share = opts.shares[s.name];
  const info = await sandboxes.docker.getImage(s.image).inspect();
  const test = s.healthcheck?.test ?? imageHealthcheck(info);
  const labels = {
    ...opts.labels,
    [COMPANION_LABEL]: sandbox,
    [SERVICE_NAME_LABEL]: s.name,
    ...(s.dataImage ? { [SERVICE_DATA_LABEL]: s.dataImage } : {}),
  };
  return {
    name: serviceContainerName(sandbox, s.name),
    Image: s.image,
    Labels: labels,
    Env: Object.entries(s.environment).map(([k, v]) => `${k}=${v}`),
    ...(s.command ? { Cmd: s.command } : {}),
    ...(s.entrypoint ? { Entrypoint: s.entrypoint } : {}),
    ...(s.user ? { User: s.user } : {}),
    ...(s.workingDir ? { WorkingDir: s.workingDir } : {}),
    // Docker keeps checking while the session runs (an unhealthy service is named after a step);
    // readiness at the start is polled faster than Docker's first check (waitReady).
    Healthcheck: test
      ? {
          Test: ['CMD', ...test],
          Interval: Math.max(s.healthcheck?.intervalMs ?? 5_000, 1_000) * 1e6,
          Timeout: (s.healthcheck?.timeoutMs ?? 10_000) * 1e6,
          Retries: s.healthcheck?.retries ?? 3,
        }
      : { Test: ['NONE'] },
    HostConfig: {
      NetworkMode: `container:${sandbox}`,
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      Privileged: false,
      IpcMode: 'private',
      ReadonlyRootfs: true,
      Tmpfs: { '/tmp': `rw,nosuid,nodev,size=${SERVICE_TMP},mode=1777` },
      Mounts: await folderMounts(sandboxes, sandbox, s, Object.keys(info.Config?.Volumes ?? {}), labels),
      Init: true,
      NanoCpus: Math.round(share.cpus * 1e9),
      Memory: share.memoryBytes,
      MemorySwap: share.memoryBytes,
      PidsLimit: share.pids,
      ...(opts.runtime ? { Runtime: opts.runtime } : {}),
    },
  };
}

/** The image's own HEALTHCHECK as argv, or undefined. */
function imageHealthcheck(info: Docker.ImageInspectInfo): string[] | undefined {
  const test = (info.Config as { Healthcheck?: { Test?: string[] } } | undefined)?.Healthcheck?.Test;
  if (!test?.length || test[0] === 'NONE') return undefined;
  if (test[0] === 'CMD-SHELL') return ['sh', '-c', test.slice(1).join(' ')];
  return test[0] === 'CMD' ? test.slice(1) : test;
}

/**
 * Each data folder and each VOLUME of the image as a copy-on-write overlay:
 * data folders over the snapshot's data (or the image's content at first),
 * the image's other volumes over the image's content, fresh every time.
 */
async function folderMounts(
  sandboxes: DockerSandboxes,
  sandbox: string,
  s: RunnableService,
  imageVolumes: string[],
  labels: Record<string, string>,
): Promise<Docker.MountSettings[]> {
  const folders = [...new Set([...s.data, ...imageVolumes.map((v) => v.replace(/\/+$/, ''))])];
  const mounts: Docker.MountSettings[] = [];
  for (const [i, folder] of folders.entries()) {
    const n = s.data.indexOf(folder);
    const lower =
      n >= 0 && s.dataImage
        ? await pathLower(sandboxes.docker, s.dataImage, dataPath(n, folder))
        : await pathLower(sandboxes.docker, s.image, folder);
    const dirs = await serviceOverlay(sandboxes.storage, sandbox, `${s.name}/${i}`, lower);
    mounts.push({
      Type: 'volume',
      Source: '',
      Target: folder,
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
    } as Docker.MountSettings);
  }
  return mounts;
}

/** Waits until a service is ready (see the module's header); one that exits or never gets there fails, named. */
async function waitReady(sandboxes: DockerSandboxes, sandbox: string, s: RunnableService): Promise<void> {
  const name = serviceContainerName(sandbox, s.name);
  const container = sandboxes.docker.getContainer(name);
  const info = await sandboxes.docker.getImage(s.image).inspect();
  const test = s.healthcheck?.test ?? imageHealthcheck(info);
  const hc = s.healthcheck;
  const budget = test
    ? Math.max((hc?.startPeriodMs ?? 0) + (hc?.retries ?? 60) * (hc?.intervalMs ?? 1_000), 10_000)
    : PORTS_TIMEOUT_MS;
  const deadline = Date.now() + budget;
  const poll = Math.min(hc?.intervalMs ?? 1_000, 100);
  for (;;) {
    const state = (await container.inspect()).State;
    if (!state.Running)
      throw new ServiceFailure(
        s.name,
        `exited with code ${state.ExitCode} before it was ready`,
        await logTail(sandboxes, name),
      );
    if (await isReady(sandboxes, sandbox, name, s, test)) return;
    if (Date.now() > deadline) {
      const how = test
        ? `did not pass its health check (${test.join(' ')})`
        : `did not listen on ${s.ports.join(', ')}`;
      throw new ServiceFailure(s.name, `${how} within ${Math.round(budget / 1000)}s`, await logTail(sandboxes, name));
    }
    await new Promise((r) => setTimeout(r, poll));
  }
}

async function isReady(
  sandboxes: DockerSandboxes,
  sandbox: string,
  container: string,
  s: RunnableService,
  test: string[] | undefined,
): Promise<boolean> {
  if (test) return (await execIn(sandboxes.docker, container, test)) === 0;
  if (!s.ports.length) return true;
  // The sandbox shares the service's network namespace: its /proc/net lists the service's sockets.
  const hex = s.ports.map((p) => `:${p.toString(16).toUpperCase().padStart(4, '0')} `);
  const listening = await sandboxes.exec(sandbox, ['sh', '-c', 'cat /proc/net/tcp /proc/net/tcp6 2>/dev/null']);
  const lines = listening.stdout
    .toString()
    .split('\n')
    .filter((l) => / 0A /.test(l));
  return hex.every((h) => lines.some((l) => l.split(/\s+/)[2]?.endsWith(h.trim())));
}

/** Runs argv in a service container as its own user; its exit code (-1 when Docker has none). */
async function execIn(docker: Docker, container: string, argv: string[]): Promise<number> {
  try {
    const exec = await docker.getContainer(container).exec({ Cmd: argv, AttachStdout: true, AttachStderr: true });
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

/** The last `bytes` of a container's log (stdout and stderr, as they came). */
export async function logTail(sandboxes: DockerSandboxes, container: string, bytes = 1_500): Promise<string> {
  const text = await containerLog(sandboxes.docker, container, 200).catch(() => '');
  return text.slice(-bytes).trim();
}

/** A container's log, the last `lines` lines (all when undefined), stdout and stderr together. */
export async function containerLog(docker: Docker, container: string, lines?: number): Promise<string> {
  const raw = (await docker
    .getContainer(container)
    .logs({ stdout: true, stderr: true, follow: false, ...(lines ? { tail: lines } : {}) })) as unknown as Buffer;
  return demux(raw);
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

/** A sandbox's service containers: name → container name. */
export async function servicesOf(sandboxes: DockerSandboxes, sandbox: string): Promise<Docker.ContainerInfo[]> {
  const all = await sandboxes.docker.listContainers({
    all: true,
    filters: { label: [`${COMPANION_LABEL}=${sandbox}`] },
  });
  return all.filter((c) => c.Labels[SERVICE_NAME_LABEL]);
}

/** What is wrong with a sandbox's services now: one that exited or that Docker finds unhealthy, named. */
export async function serviceProblems(sandboxes: DockerSandboxes, sandbox: string): Promise<ServiceFailure[]> {
  const problems: ServiceFailure[] = [];
  for (const c of await servicesOf(sandboxes, sandbox)) {
    const service = c.Labels[SERVICE_NAME_LABEL];
    const info = await sandboxes.docker.getContainer(c.Id).inspect();
    const tail = () => logTail(sandboxes, c.Id, 800);
    if (!info.State.Running) {
      const oom = info.State.OOMKilled ? ', out of memory' : '';
      problems.push(new ServiceFailure(service, `exited (code ${info.State.ExitCode}${oom})`, await tail()));
    } else if (info.State.Health?.Status === 'unhealthy') {
      const last = info.State.Health.Log?.at(-1)?.Output?.trim().slice(-300) ?? '';
      problems.push(new ServiceFailure(service, `failed its health check${last ? ` (${last})` : ''}`, await tail()));
    }
  }
  return problems;
}
