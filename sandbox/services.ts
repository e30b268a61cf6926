/**
 * A sandbox's services (docs/services.md), on any provider with a
 * ServiceRuntime (sandbox/provider.ts; the Docker engine's is
 * sandbox/docker/services.ts): started in dependency order, each in the
 * sandbox's network namespace, with its data folders copy-on-write over the
 * snapshot's data (or its image's content) and its image's other volumes
 * fresh. Each is ready once its health check passes (its own, else its
 * image's), else once its ports listen, else once it keeps running; one that
 * exits or never gets there fails, named, with its log's tail.
 */
import {
  imageStoreOf,
  dataPath,
  type FileTree,
  type ImageInfo,
  type SandboxProvider,
  type ServiceContainerSpec,
  type ServiceRuntime,
  type ServiceState,
  SandboxNotFound,
} from './provider';
import { z } from 'zod';
import {
  imageRef,
  MAX_SERVICES,
  serviceDeclaration,
  serviceName,
  startOrder,
  type ServiceFile,
  type ServiceSpec,
} from '../workflows/services';
import { isImageId } from '../workflows/rules/images';
import type { Share } from '../workflows/rules/service-limits';
import { sandboxOf, type ShellScript } from './handle';

/** A service as a sandbox runs it: its spec with the image to run, and the snapshot's data image. */
export interface RunnableService extends ServiceSpec {
  /** On the host, or pinned by digest at the snapshot's build. */
  image: string;
  /** What setup left in its data folders (ServiceRuntime.captureData); absent: the image's own. */
  dataImage?: string;
}

/** On a snapshot image: its services as JSON (RunnableService[]). */
export const SERVICES_LABEL = 'drydock.snapshot.services';
/** On a service: the data image its folders' lower layers come from (kept while it runs). */
export const SERVICE_DATA_LABEL = 'drydock.service.data';
/** How long a service without a health check may take to listen on its ports. */
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

/** A RunnableService as a snapshot records it (SERVICES_LABEL): what drydock wrote, and nothing else. */
const namedImage = imageRef.refine((ref) => !isImageId(ref), 'an image id, not a name');
const inside = z
  .string()
  .startsWith('/')
  .refine((p) => !p.split('/').includes('..'), 'no ".."');
const gitObject = z.string().regex(/^(?:[0-9a-f]{40}|[0-9a-f]{64})$/);
/** A service's file (ServiceSpec.files) as recorded: read again from the repo at `at`, or its content. */
const recordedFile = z.strictObject({
  target: inside,
  source: z.string().max(4096),
  content: z
    .string()
    .max(1 << 20)
    .optional(),
  mode: z.number().int().min(0).max(0o777).optional(),
  object: gitObject.optional(),
  at: gitObject.optional(),
  kind: z.enum(['file', 'folder']).optional(),
});
const recordedService = z.strictObject({
  name: serviceName,
  image: namedImage,
  dataImage: namedImage.optional(),
  environment: z.record(z.string(), z.string()),
  command: z.array(z.string()).optional(),
  entrypoint: z.array(z.string()).optional(),
  user: serviceDeclaration.shape.user,
  workingDir: serviceDeclaration.shape.workingDir,
  healthcheck: z
    .strictObject({
      test: z.array(z.string()).min(1),
      intervalMs: z.number().nonnegative(),
      timeoutMs: z.number().nonnegative(),
      retries: z.number().int().min(1),
      startPeriodMs: z.number().nonnegative(),
    })
    .optional(),
  ports: z.array(z.number().int().min(1).max(65535)),
  data: z.array(inside),
  dependsOn: z.array(serviceName),
  hostNames: z
    .array(z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/))
    .max(64)
    .optional(),
  files: z.array(recordedFile).max(64).optional(),
  limits: z.strictObject({
    cpus: z.number().positive().optional(),
    memoryBytes: z.number().positive().optional(),
    pids: z.number().int().positive().optional(),
  }),
  source: z.string(),
});
const recordedServicesSchema = z.array(recordedService).max(MAX_SERVICES);

/** A snapshot's services label that is not drydock's record (written by hand, or a repo Dockerfile's LABEL). */
export class RecordedServicesInvalid extends Error {
  constructor(image: string, why: string) {
    super(
      `snapshot ${image}: its ${SERVICES_LABEL} label is not a record drydock wrote (${why}): ` +
        "build a new snapshot ('drydock snapshot build')",
    );
    this.name = 'RecordedServicesInvalid';
  }
}

/**
 * The snapshot image's services (its SERVICES_LABEL), checked against the
 * shape drydock writes: labels are inherited, so a label drydock did not
 * write (an older snapshot's from a repo Dockerfile's LABEL) is refused, not run.
 */
export function recordedServices(image: string, labels: Record<string, string> | undefined): RunnableService[] {
  const text = labels?.[SERVICES_LABEL];
  if (text === undefined) return [];
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    throw new RecordedServicesInvalid(image, 'not JSON');
  }
  const parsed = recordedServicesSchema.safeParse(data);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new RecordedServicesInvalid(image, `${issue.path.join('.') || 'the list'}: ${issue.message}`);
  }
  return parsed.data;
}

/** The provider's services, or why it has none. */
export function serviceRuntime(provider: SandboxProvider): ServiceRuntime {
  if (!provider.services) throw new Error(`the ${provider.name} provider runs no services`);
  return provider.services;
}

export interface StartOptions {
  shares: Record<string, Share>;
  /** The sandbox's own labels (session, repo, host, expiry): the reaper finds its services by them too. */
  labels: Record<string, string>;
  runtime?: string;
  /** Reads what a service's file (ServiceSpec.files) holds: from the repo's mirror (sandbox/repo-files.ts). */
  files?: (file: ServiceFile) => Promise<FileTree>;
}

/**
 * The containers of `services` beside `sandbox`, known before the sandbox is
 * made: a provider whose sandbox is a pod makes them with it
 * (SandboxSpec.services), since a pod's containers are fixed at its creation.
 */
export async function serviceContainers(
  provider: SandboxProvider,
  sandbox: string,
  services: RunnableService[],
  opts: StartOptions,
): Promise<ServiceContainerSpec[]> {
  return Promise.all(services.map((s) => containerOf(provider, sandbox, s, opts)));
}

/**
 * Starts `services` (as `containers` has them: serviceContainers) beside
 * `sandbox`, each level of the dependency order together, and waits until
 * each is ready. Idempotent: a retry finds what it made and starts any that
 * stopped.
 */
export async function startServices(
  provider: SandboxProvider,
  sandbox: string,
  services: RunnableService[],
  containers: ServiceContainerSpec[],
): Promise<void> {
  const order = startOrder(services) ?? services;
  const containerOf = (s: RunnableService) => containers.find((c) => c.service === s.name)!;
  const started = new Set<string>();
  while (started.size < order.length) {
    const level = order.filter((s) => !started.has(s.name) && s.dependsOn.every((d) => started.has(d)));
    await Promise.all(level.map((s) => serviceRuntime(provider).start(containerOf(s))));
    await Promise.all(level.map((s) => waitReady(provider, sandbox, s, containerOf(s).healthcheck?.test)));
    for (const s of level) started.add(s.name);
  }
  await linkPostgresSockets(provider, sandbox, services, containers);
}

const LINK_SOCKETS: ShellScript = { name: 'link-sockets', text: 'for s; do ln -sf "$s" "/tmp/${s##*/}"; done' };

/**
 * A shared PostgreSQL socket folder's sockets also where PostgreSQL's own default puts them,
 * `/tmp/.s.PGSQL.<port>` (a client library built without Debian's default looks there):
 * links in the sandbox's /tmp to each declared port's socket (5432 without one).
 */
async function linkPostgresSockets(
  provider: SandboxProvider,
  sandbox: string,
  services: RunnableService[],
  containers: ServiceContainerSpec[],
): Promise<void> {
  const sockets: string[] = [];
  for (const c of containers) {
    const folder = c.sockets?.find((p) => p.endsWith('/postgresql'));
    const ports = services.find((s) => s.name === c.service)?.ports ?? [];
    if (folder) sockets.push(...(ports.length ? ports : [5432]).map((port) => `${folder}/.s.PGSQL.${port}`));
  }
  if (sockets.length) await sandboxOf(provider, sandbox).commands.runScript(LINK_SOCKETS, sockets);
}

/**
 * Readies what starting `services` reads on this host (their images' volumes,
 * the copy-on-write lower layers of their folders), so that it can overlap
 * with the sandbox's own creation.
 */
export async function prepareServices(provider: SandboxProvider, services: RunnableService[]): Promise<void> {
  await Promise.all(
    services.map(async (s) => {
      for (const folder of await foldersOf(provider, s))
        await serviceRuntime(provider).prepareFolder(folder.from.image, folder.from.path);
    }),
  );
}

/**
 * The Unix socket folders of services as the usual images keep them: PostgreSQL's
 * (an image that sets PGDATA, as the official one and drydock/postgres do, or
 * declares the folder a volume) and MySQL's or MariaDB's (declared a volume).
 */
const SOCKET_FOLDERS: { path: string; env?: string }[] = [
  { path: '/var/run/postgresql', env: 'PGDATA' },
  { path: '/run/postgresql' },
  { path: '/var/run/mysqld' },
  { path: '/run/mysqld' },
];

/** The socket folders a service's image keeps, shared with its sandbox where the provider can (none else). */
export function socketFoldersOf(image: Pick<ImageInfo, 'env' | 'volumes'>, s: Pick<RunnableService, 'data'>): string[] {
  const volumes = (image.volumes ?? []).map((v) => v.replace(/\/+$/, ''));
  const sets = (name: string) => image.env.some((e) => e.startsWith(`${name}=`));
  return SOCKET_FOLDERS.filter((f) => volumes.includes(f.path) || (f.env !== undefined && sets(f.env)))
    .map((f) => f.path)
    .filter((p) => !s.data.includes(p));
}

/** Its socket folders (socketFoldersOf) where the provider shares them with the sandbox. */
function socketsOf(provider: SandboxProvider, image: ImageInfo, s: RunnableService): string[] {
  return provider.capabilities.serviceSockets ? socketFoldersOf(image, s) : [];
}

/** A service's writable folders: data folders over setup's data, the image's other volumes over its own content. */
async function foldersOf(provider: SandboxProvider, s: RunnableService) {
  const image = await imageStoreOf(provider).image(s.image);
  if (!image) throw new ServiceFailure(s.name, `cannot start: its image ${s.image} is not on this host`);
  const shared = socketsOf(provider, image, s);
  const volumes = (image.volumes ?? [])
    .map((v) => v.replace(/\/+$/, ''))
    .filter((v) => !s.data.includes(v) && !shared.includes(v));
  return [
    ...s.data.map((path, n) => ({
      path,
      from: s.dataImage ? { image: s.dataImage, path: dataPath(n, path) } : { image: s.image, path },
    })),
    ...volumes.map((path) => ({ path, from: { image: s.image, path } })),
  ];
}

/** One service's container: its image's own health check when it declares none. */
async function containerOf(
  provider: SandboxProvider,
  sandbox: string,
  s: RunnableService,
  opts: StartOptions,
): Promise<ServiceContainerSpec> {
  const share = opts.shares[s.name];
  const folders = await foldersOf(provider, s);
  const image = (await imageStoreOf(provider).image(s.image))!; // foldersOf found it
  const test = s.healthcheck?.test ?? image.healthcheck;
  const sockets = socketsOf(provider, image, s);
  return {
    sandbox,
    service: s.name,
    image: s.image,
    labels: { ...opts.labels, ...(s.dataImage ? { [SERVICE_DATA_LABEL]: s.dataImage } : {}) },
    env: Object.entries(s.environment).map(([k, v]) => `${k}=${v}`),
    ...(s.command ? { command: s.command } : {}),
    ...(s.entrypoint ? { entrypoint: s.entrypoint } : {}),
    ...(s.user ? { user: s.user } : {}),
    ...(s.workingDir ? { workingDir: s.workingDir } : {}),
    // The provider keeps checking while the session runs (an unhealthy service is named after a
    // step); readiness at the start is polled faster than a provider's first check (waitReady).
    ...(test
      ? {
          healthcheck: {
            test,
            intervalMs: Math.max(s.healthcheck?.intervalMs ?? 5_000, 1_000),
            timeoutMs: s.healthcheck?.timeoutMs ?? 10_000,
            retries: s.healthcheck?.retries ?? 3,
          },
        }
      : {}),
    folders,
    ...(sockets.length ? { sockets } : {}),
    ...(s.files?.length ? { files: await filesOf(s, opts) } : {}),
    ...(s.hostNames?.length ? { hostNames: s.hostNames } : {}),
    cpus: share.cpus,
    memoryBytes: share.memoryBytes,
    pids: share.pids,
    ...(opts.runtime ? { runtime: opts.runtime } : {}),
  };
}

/** A service's files as the provider copies them in: each read (from the repo, or its content) now. */
async function filesOf(s: RunnableService, opts: StartOptions): Promise<ServiceContainerSpec['files']> {
  return Promise.all(
    (s.files ?? []).map(async (f) => {
      const where = `${f.source} at ${f.target}`;
      if (f.content !== undefined)
        return {
          target: f.target,
          source: where,
          tree: { kind: 'file', mode: f.mode ?? 0o444, data: Buffer.from(f.content) },
        };
      if (!opts.files) throw new ServiceFailure(s.name, `cannot start: ${where} cannot be read on this host`);
      return { target: f.target, source: where, tree: await opts.files(f) };
    }),
  );
}

/** Waits until a service is ready (see the module's header). */
async function waitReady(
  provider: SandboxProvider,
  sandbox: string,
  s: RunnableService,
  test: string[] | undefined,
): Promise<void> {
  const runtime = serviceRuntime(provider);
  const hc = s.healthcheck;
  const budget = test
    ? Math.max((hc?.startPeriodMs ?? 0) + (hc?.retries ?? 60) * (hc?.intervalMs ?? 1_000), 10_000)
    : PORTS_TIMEOUT_MS;
  const deadline = Date.now() + budget;
  const poll = Math.min(hc?.intervalMs ?? 1_000, 50);
  for (;;) {
    const state = await runtime.state(sandbox, s.name);
    // Gone, not exited: something removed it (a cut-off provisioning attempt's cleanup, a reaper). The
    // sandbox is lost, and provisioning makes it again, rather than blame the repo's service.
    if (!state)
      throw new SandboxNotFound(sandbox, `lost its service ${s.name} before it was ready (its container is gone)`);
    if (!state.running) {
      const how = `exited with code ${state.exitCode ?? '?'} before it was ready`;
      throw new ServiceFailure(s.name, how, await logTail(runtime, sandbox, s.name));
    }
    if (test ? (await runtime.exec(sandbox, s.name, test)) === 0 : await listening(provider, sandbox, s.ports)) return;
    if (Date.now() > deadline) {
      const how = test
        ? `did not pass its health check (${test.join(' ')})`
        : `did not listen on ${s.ports.join(', ')}`;
      throw new ServiceFailure(
        s.name,
        `${how} within ${Math.round(budget / 1000)}s`,
        await logTail(runtime, sandbox, s.name),
      );
    }
    await new Promise((r) => setTimeout(r, poll));
  }
}

/** Whether every port listens: the sandbox shares the services' network namespace, so its /proc/net lists them. */
async function listening(provider: SandboxProvider, sandbox: string, ports: number[]): Promise<boolean> {
  if (!ports.length) return true;
  const { stdout } = await sandboxOf(provider, sandbox).commands.script({
    name: 'ports',
    text: 'cat /proc/net/tcp /proc/net/tcp6 2>/dev/null',
  });
  const listen = stdout
    .toString()
    .split('\n')
    .filter((l) => l.split(/\s+/)[4] === '0A')
    .map((l) => parseInt(l.split(/\s+/)[2]?.split(':')[1] ?? '', 16));
  return ports.every((p) => listen.includes(p));
}

/** The last `bytes` of a service's log. */
export async function logTail(runtime: ServiceRuntime, sandbox: string, service: string, bytes = 1_500) {
  const text = await runtime.log(sandbox, service, 200).catch(() => '');
  return text.slice(-bytes).trim();
}

/** What is wrong with a sandbox's services now: one that exited or that its provider finds unhealthy, named. */
export async function serviceProblems(provider: SandboxProvider, sandbox: string): Promise<ServiceFailure[]> {
  if (!provider.services) return [];
  const runtime = provider.services;
  const problems: ServiceFailure[] = [];
  for (const service of await runtime.list(sandbox)) {
    const state = await runtime.state(sandbox, service);
    const why = state && problemOf(state);
    if (why) problems.push(new ServiceFailure(service, why, await logTail(runtime, sandbox, service, 800)));
  }
  return problems;
}

function problemOf(state: ServiceState): string | undefined {
  if (!state.running) return `exited (code ${state.exitCode}${state.oomKilled ? ', out of memory' : ''})`;
  if (state.health === 'unhealthy') {
    return `failed its health check${state.healthOutput ? ` (${state.healthOutput})` : ''}`;
  }
  return undefined;
}
