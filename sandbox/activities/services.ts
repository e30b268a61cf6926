/**
 * A repo's services and app as the sandbox's activities see them
 * (docs/services.md): read from its dev container's compose file and its
 * .drydock/config.yaml, their images resolved (the host's own, or pulled from
 * an allowed registry at a snapshot build only, and pinned by digest), and
 * checked after each step, a dead or unhealthy service failing the step with
 * its name so the session replaces the sandbox with its services.
 */
import { ApplicationFailure } from '@temporalio/common';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { ErrorType } from '../../workflows/api';
import type { RepoConfig } from '../../workflows/repo-config';
import { imageSource, parseImageReference, pinnedReference, repoMadeImage } from '../../workflows/rules/images';
import { shareLimits, type Share } from '../../workflows/rules/service-limits';
import {
  dependencyProblems,
  repoApp,
  servicesOfConfig,
  type AppSpec,
  type ServiceFile,
  type ServiceSpec,
} from '../../workflows/services';
import { ComposeError, readCompose } from '../compose';
import { parseEnvFile } from '../compose-variables';
import { RepoFileError, RepoTree } from '../repo-files';
import { imageStoreOf, type ImageInfo, type SandboxProvider, type ServiceContainerSpec } from '../provider';
import { EnvironmentError, volumesOf, type ImageFetcher, type RepoEnvironment } from '../repo-image';
import {
  recordedServices,
  RecordedServicesInvalid,
  ServiceFailure,
  serviceProblems,
  serviceContainers,
  serviceRuntime,
  startServices,
  type RunnableService,
} from '../services';
import { egressDirOf } from '../egress';
import { SNAPSHOT_ENV_LABEL, SNAPSHOT_LABELS } from '../snapshots';
import { ownServiceBuild } from '../service-build';
import type { SandboxDeps } from './deps';
import { ensureServiceImage, namedServiceImage } from '../../sandbox-images/service-images';

/** What resolving and starting services needs. */
export type ServiceDeps = Pick<SandboxDeps, 'sandboxes' | 'log'>;

/** What a repo declares beside its sandbox. */
export interface DeclaredStack {
  services: ServiceSpec[];
  app?: AppSpec;
  /** The dev container's compose service name and aliases: they resolve to 127.0.0.1 (SandboxSpec.hostNames). */
  hostNames?: string[];
}

/**
 * The sandbox environment of a compose dev container (its own service's
 * image or build) and every service declared: the compose files' and the
 * config file's (one name, one service). Each file of the repo a service
 * mounts is resolved in `tree` (pinned by its git object). Problems name the
 * file and field.
 */
export async function declaredStack(
  read: (file: string) => Promise<string | undefined>,
  file: RepoEnvironment | undefined,
  config: RepoConfig | undefined,
  tree?: Pick<RepoTree, 'resolve' | 'commit'>,
): Promise<{ environment?: RepoEnvironment; stack: DeclaredStack; notes: string[] }> {
  const services = config?.services ? servicesOfConfig(config.services) : [];
  // The dev container's notes are said by the caller with the compose files' (never kept in the environment).
  const { notes: fileNotes, ...rest } = file ?? { notes: undefined };
  const notes: string[] = [...(fileNotes ?? [])];
  const declared = file && (await withEnvFiles(rest as RepoEnvironment, read));
  let environment = declared;
  let hostNames: string[] | undefined;
  if (declared?.compose) {
    const { files, service, runServices } = declared.compose;
    try {
      const parsed = await readCompose(files, read, { devService: service, ...(runServices ? { runServices } : {}) });
      // The operator's image (or the base image) replaces the dev service's own image or build.
      const own: Partial<typeof parsed.dev> = declared.compose.servicesOnly ? {} : parsed.dev;
      environment = {
        ...declared,
        ...(own.image ? { image: own.image } : {}),
        ...(own.dockerfile !== undefined ? { dockerfile: own.dockerfile, context: own.context } : {}),
        args: own.args ?? {},
        ...(own.target ? { target: own.target } : {}),
        containerEnv: { ...parsed.dev.environment, ...declared.containerEnv },
        ...volumesOf([...(parsed.dev.volumes ?? []), ...(declared.volumes ?? [])]),
        ...(parsed.dev.links || declared.links
          ? { links: [...(parsed.dev.links ?? []), ...(declared.links ?? [])] }
          : {}),
        // postStartCommand wins; else the dev service's own command is the app.
        ...(declared.app || parsed.dev.app
          ? {
              app: declared.app ?? {
                ...parsed.dev.app!,
                from: `(${files.join(' + ')}) services.${service}.${parsed.dev.app!.from}`,
              },
            }
          : {}),
      };
      hostNames = parsed.dev.hostNames;
      notes.push(...parsed.notes);
      const clash = parsed.services.find((s) => services.some((c) => c.name === s.name));
      if (clash)
        throw new EnvironmentError(
          `${clash.source}: also declared as services.${clash.name} in .drydock/config.yaml: keep one`,
        );
      services.unshift(...(await withRepoObjects(parsed.services, tree, notes)));
    } catch (err) {
      if (err instanceof ComposeError || err instanceof RepoFileError) throw new EnvironmentError(err.message);
      throw err;
    }
  }
  const cycle = services.length ? dependencyProblems(services) : [];
  if (cycle.length) throw new EnvironmentError(cycle.join('; '));
  const app = repoApp(config?.app, environment);
  const stack = { services, ...(app ? { app } : {}), ...(hostNames ? { hostNames } : {}) };
  return { ...(environment ? { environment } : {}), stack, notes };
}

/** A dev container's runArgs `--env-file`s read into its containerEnv (which wins), in order. */
async function withEnvFiles(
  env: RepoEnvironment,
  read: (file: string) => Promise<string | undefined>,
): Promise<RepoEnvironment> {
  if (!env.envFiles?.length) return env;
  const problems: string[] = [];
  const fromFiles: Record<string, string> = {};
  for (const file of env.envFiles) {
    const text = await read(file);
    if (text === undefined) problems.push(`${env.source}: runArgs: --env-file ${file} is not in the repository`);
    else for (const [k, v] of parseEnvFile(text, file, problems)) fromFiles[k] = v;
  }
  if (problems.length) throw new EnvironmentError(problems.join('; '));
  return { ...env, containerEnv: { ...fromFiles, ...env.containerEnv } };
}

/** A service's data folders at most (workflows/services.ts serviceDeclaration's `data`). */
const MAX_DATA_FOLDERS = 8;

/**
 * Services with each repo file they mount pinned to its git object. A path
 * the repo does not hold (a gitignored `./data/db`) is what Docker makes of a
 * bind's missing source, an empty folder: here a data folder of the service
 * (captured with the snapshot, like a named volume), said in `notes`; past
 * the data folders a service may have, it is refused, naming it.
 */
async function withRepoObjects(
  services: ServiceSpec[],
  tree: Pick<RepoTree, 'resolve' | 'commit'> | undefined,
  notes: string[],
) {
  return Promise.all(
    services.map(async (s) => {
      if (!s.files?.some((f) => f.content === undefined)) return s;
      if (!tree) throw new EnvironmentError(`${s.source}: mounts files of the repository, which cannot be read here`);
      const files = [];
      const data = [...(s.data ?? [])];
      for (const f of s.files) {
        if (f.content !== undefined) {
          files.push(f);
          continue;
        }
        const field = `${s.source} ${f.target}`;
        const found = await tree.resolve(f.source, field);
        if (!found && f.source !== '.' && data.length < MAX_DATA_FOLDERS) {
          data.push(f.target);
          notes.push(
            `${field}: ${f.source} is not in the repository: an empty folder of the service's data, as Docker makes it`,
          );
          continue;
        }
        if (!found) throw new EnvironmentError(`${field}: ${f.source} is not in the repository`);
        const mode = f.mode ?? (found.kind === 'file' ? found.mode : undefined);
        files.push({
          ...f,
          object: found.object,
          kind: found.kind,
          at: tree.commit,
          ...(mode !== undefined ? { mode } : {}),
        });
      }
      return { ...s, files, ...(data.length ? { data } : {}) };
    }),
  );
}

/**
 * The images of `services`: the host's own as they are; from an allowed
 * registry pulled (only when `pull`: a snapshot build) and pinned by digest;
 * anything else refused naming the image and the setting.
 */
export async function resolveServiceImages(
  deps: ServiceDeps,
  services: ServiceSpec[],
  opts: { repo: string; allowed: string[]; pull: boolean },
): Promise<RunnableService[]> {
  const out: RunnableService[] = [];
  for (const s of services) {
    const onHost = await serviceImageOnHost(deps, s.image, { fresh: opts.pull });
    const field = `${s.source}.image`;
    const source = imageSource({ image: s.image, field, onHost: !!onHost, allowed: opts.allowed, repo: opts.repo });
    if (source.from === 'refused') throw new EnvironmentError(source.problem);
    if (onHost) {
      // A service runs the repo's command in its image, and its log is the sandbox's to read.
      const made = repoMadeImage(s.image, onHost.labels);
      if (made && !ownServiceBuild(onHost.labels, opts.repo)) throw new EnvironmentError(`${field}: ${made}`);
      out.push({ ...s });
      continue;
    }
    if (!opts.pull) {
      throw new EnvironmentError(
        `${s.source}.image: ${s.image} is pulled only by a snapshot build, never during a session: build one ('drydock snapshot build')`,
      );
    }
    out.push({ ...s, image: await pullPinned(deps, s) });
  }
  return out;
}

/**
 * The images a repo's environment names (a dev container's image, a
 * Dockerfile's FROM): on the host as they are; from an allowed registry pulled
 * when `pull` (a snapshot build; the environment image's tag hashes what was
 * pulled, so its snapshot is pinned to it); anything else refused, naming the
 * image and the setting.
 */
export function environmentImageFetcher(
  deps: ServiceDeps,
  opts: { repo: string; pull?: { allowed: string[] } },
): ImageFetcher {
  return async (image, field) => {
    const onHost = await hasImage(deps.sandboxes, image);
    if (!onHost && !opts.pull) {
      throw new EnvironmentError(
        `${field} ${image} is not on the worker's host: a snapshot build pulls it from an allowed registry ('drydock snapshot build'), or load it onto the host`,
      );
    }
    const allowed = opts.pull?.allowed ?? [];
    const source = imageSource({ image, field, onHost, allowed, repo: opts.repo });
    if (source.from === 'refused') throw new EnvironmentError(source.problem);
    if (source.from === 'host') return;
    deps.log.info({ image }, "pulling an environment's image from an allowed registry (snapshot build)");
    await serviceRuntime(deps.sandboxes)
      .pull(image)
      .catch((err: Error) => {
        throw new EnvironmentError(`${field}: pulling ${image} failed: ${err.message}`);
      });
  };
}

async function hasImage(sandboxes: SandboxProvider, ref: string): Promise<boolean> {
  return (await onHostImage(sandboxes, ref)) !== undefined;
}

/** The image when it is on the worker's host; a registry's that the cluster's node would pull is not. */
async function onHostImage(sandboxes: SandboxProvider, ref: string) {
  const image = await imageStoreOf(sandboxes).image(ref);
  return image?.fromRegistry ? undefined : image;
}

/**
 * A service's image as the host has it (undefined when not there): drydock's own service images
 * (`drydock/postgres:17`, sandbox-images/service-images.ts) are built on first
 * use on a Docker host, and with `fresh` (a snapshot build) again when their
 * recipe changed since.
 */
async function serviceImageOnHost(
  deps: ServiceDeps,
  ref: string,
  { fresh }: { fresh: boolean },
): Promise<ImageInfo | undefined> {
  const named = namedServiceImage(ref);
  const onHost = await onHostImage(deps.sandboxes, ref);
  if (!named || (onHost && !fresh) || deps.sandboxes.name !== 'docker') return onHost;
  const progress = (line: string) => deps.log.info({ image: ref }, line);
  await ensureServiceImage(named, progress).catch((err: Error) => {
    throw new EnvironmentError(`service image ${ref} could not be built here: ${err.message}`);
  });
  const built = await imageStoreOf(deps.sandboxes).image(ref);
  if (!built) throw new EnvironmentError(`service image ${ref} was built but is not on the host: build it again`);
  return built;
}

/** Pulls an allowed image and returns it pinned by the digest the registry gave. */
async function pullPinned(deps: ServiceDeps, s: ServiceSpec): Promise<string> {
  const ref = parseImageReference(s.image);
  if ('problem' in ref) throw new EnvironmentError(`${s.source}.image: ${ref.problem}`);
  deps.log.info({ image: s.image }, 'pulling a service image from an allowed registry (snapshot build)');
  try {
    return pinnedReference(ref, await serviceRuntime(deps.sandboxes).pull(s.image));
  } catch (err) {
    throw new EnvironmentError(`${s.source}.image: pulling ${s.image} failed: ${(err as Error).message}`);
  }
}

/** The session's limits shared with its services; a share that does not fit fails the session, naming the field. */
export function sharesOf(limits: Share, services: ServiceSpec[]): { sandbox: Share; services: Record<string, Share> } {
  const shared = shareLimits(limits, services);
  if (!shared.ok) throw ApplicationFailure.nonRetryable(shared.problems.join('; '), ErrorType.InvalidSessionInput);
  return shared;
}

/** After a step: a service that died or turned unhealthy fails it, named, so the session replaces the sandbox. */
export async function checkServices(sandboxes: SandboxProvider, sandbox: string): Promise<void> {
  const problems = await serviceProblems(sandboxes, sandbox);
  if (!problems.length) return;
  throw ApplicationFailure.nonRetryable(
    `${problems.map((p) => p.message).join('; ')} (sandbox ${sandbox})`,
    ErrorType.ServiceLost,
  );
}

/**
 * The services a sandbox runs: its snapshot's (pinned images, setup's data),
 * else the repo's declarations with images already on the host (a session
 * never pulls).
 */
export async function sandboxServices(
  deps: ServiceDeps,
  snapshotImage: string | undefined,
  declared: ServiceSpec[],
  repo: string,
): Promise<RunnableService[]> {
  try {
    if (snapshotImage) return await snapshotServices(deps.sandboxes, snapshotImage);
    if (!declared.length) return [];
    return await resolveServiceImages(deps, declared, { repo, allowed: [], pull: false });
  } catch (err) {
    if (err instanceof EnvironmentError || err instanceof RecordedServicesInvalid)
      throw ApplicationFailure.nonRetryable(err.message, ErrorType.EnvironmentUnusable);
    throw err;
  }
}

/**
 * A snapshot's recorded services, each image checked again as it is on the
 * host now: a service's own image no repository made; its data image one this
 * snapshot's build made (its labels name the same repo and build), never
 * another snapshot's or another repo's.
 */
async function snapshotServices(sandboxes: SandboxProvider, snapshotImage: string): Promise<RunnableService[]> {
  const labels = (await imageStoreOf(sandboxes).image(snapshotImage))?.labels;
  const services = recordedServices(snapshotImage, labels);
  for (const s of services) {
    const field = `snapshot ${snapshotImage}: service ${s.name}`;
    const image = await imageStoreOf(sandboxes).image(s.image);
    const made = image && repoMadeImage(s.image, image.labels);
    // The repo's own service builds are its to run (sandbox/service-build.ts); no other image a repo made is.
    if (made && !ownServiceBuild(image.labels, labels?.[SNAPSHOT_LABELS.repo]))
      throw new EnvironmentError(`${field}: ${made}`);
    if (s.dataImage === undefined) continue;
    const data = await imageStoreOf(sandboxes).image(s.dataImage);
    const own =
      data?.labels[SNAPSHOT_LABELS.image] === 'service-data' &&
      data.labels[SNAPSHOT_LABELS.repo] === labels?.[SNAPSHOT_LABELS.repo] &&
      data.labels[SNAPSHOT_LABELS.build] === labels?.[SNAPSHOT_LABELS.build];
    if (data && !own) {
      throw new EnvironmentError(
        `${field}: data image ${s.dataImage} is not one this snapshot's build made: build a new snapshot ('drydock snapshot build')`,
      );
    }
  }
  return services;
}

/**
 * The containers of a sandbox's services, with the sandbox's owner labels
 * (teardown and the reaper find them by these too): made before the sandbox,
 * since a provider whose sandbox is a pod makes them with it
 * (SandboxSpec.services). An image that is not there fails provisioning, named.
 */
export async function sandboxServiceContainers(
  deps: Pick<SandboxDeps, 'sandboxes' | 'runtime'>,
  sandbox: string,
  services: RunnableService[],
  shares: Record<string, Share>,
  labels: Record<string, string>,
  mirror: string,
): Promise<ServiceContainerSpec[]> {
  if (!services.length) return [];
  return unusableOnFailure(() =>
    serviceContainers(deps.sandboxes, sandbox, services, {
      shares,
      labels,
      runtime: deps.runtime,
      files: serviceFileReader(mirror),
    }),
  );
}

/** A sandbox's services as planned before it is made: what runs, its own share of the limits, the containers. */
export interface ServicePlan {
  services: RunnableService[];
  /** What of the session's limits is left to the sandbox itself. */
  sandboxShare: Share;
  /** The services' containers (sandboxServiceContainers), made with the sandbox or beside it. */
  containers: ServiceContainerSpec[];
}

/**
 * A session sandbox's services (sandboxServices: `from` its snapshot, else
 * the repo's declarations at `mirror`), the session's limits shared with
 * them, and their containers with the session's owner labels.
 */
export async function planServices(
  deps: Pick<SandboxDeps, 'sandboxes' | 'runtime' | 'log'>,
  sandbox: string,
  from: { snapshotImage: string | undefined; declared: ServiceSpec[]; mirror: string },
  session: { repo: string; limits: Share; labels: Record<string, string> },
): Promise<ServicePlan> {
  const services = await sandboxServices(deps, from.snapshotImage, from.declared, session.repo);
  const shares = sharesOf(session.limits, services);
  const containers = await sandboxServiceContainers(
    deps,
    sandbox,
    services,
    shares.services,
    session.labels,
    from.mirror,
  );
  return { services, sandboxShare: shares.sandbox, containers };
}

/** Starts the planned services of a made sandbox (startSandboxServices). */
export async function startPlannedServices(
  deps: Pick<SandboxDeps, 'sandboxes'>,
  sandbox: string,
  plan: ServicePlan,
): Promise<void> {
  await startSandboxServices(deps, sandbox, plan.services, plan.containers);
}

/** Reads a service file's content at the object the snapshot pinned (the mirror keeps every commit it fetched). */
export const serviceFileReader = (mirror: string) => (f: ServiceFile) => repoFileTree(mirror, f);

async function repoFileTree(mirror: string, f: ServiceFile) {
  if (!f.object || !f.kind || !f.at)
    throw new ServiceFailure(f.source, `cannot start: ${f.source} was never resolved in the repository`);
  try {
    return await new RepoTree(mirror, f.at).tree(f.object, f.kind, f.source, f.mode);
  } catch (err) {
    throw new ServiceFailure(f.source, `cannot start: ${f.source} cannot be read (${(err as Error).message})`);
  }
}

/** Starts a sandbox's services (`containers`: sandboxServiceContainers). One that will not start fails provisioning, named, with its log. */
export async function startSandboxServices(
  deps: Pick<SandboxDeps, 'sandboxes'>,
  sandbox: string,
  services: RunnableService[],
  containers: ServiceContainerSpec[],
): Promise<void> {
  if (!services.length) return;
  await unusableOnFailure(() => startServices(deps.sandboxes, sandbox, services, containers));
}

/** A service that cannot start is the environment's problem: permanent, named. */
async function unusableOnFailure<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof ServiceFailure)
      throw ApplicationFailure.nonRetryable(err.message, ErrorType.EnvironmentUnusable);
    throw err;
  }
}

/** The environment a snapshot's inferred setup left for sessions (its label), as "NAME=value" entries. */
export async function snapshotEnv(
  deps: Pick<SandboxDeps, 'sandboxes'>,
  snapshotImage: string | undefined,
  env: string[],
): Promise<string[]> {
  const label = snapshotImage && (await imageStoreOf(deps.sandboxes).image(snapshotImage))?.labels[SNAPSHOT_ENV_LABEL];
  return label ? withSetupEnv(env, JSON.parse(label) as Record<string, string>) : env;
}

/** A sandbox's variables with its setup's own (an inferred setup's caches, its virtualenv) after them. */
export function withSetupEnv(env: string[], extra: Record<string, string> | undefined): string[] {
  if (!extra) return env;
  // A virtualenv's bin goes first on PATH, as activating it would.
  const venv = extra.VIRTUAL_ENV;
  const withPath = env.map((e) => (venv && e.startsWith('PATH=') ? `PATH=${venv}/bin:${e.slice(5)}` : e));
  return [...withPath, ...Object.entries(extra).map(([k, v]) => `${k}=${v}`)];
}

/** Where the sandbox finds its services' logs: a folder of its /run/drydock (the host's egress folder). */
export const SERVICE_LOGS_IN_SANDBOX = '/run/drydock/services';
/** The most of a service's log kept in that file. */
const SERVICE_LOG_BYTES = 1024 * 1024;

/**
 * Copies each service's log into the sandbox's read-only /run/drydock/services/<name>.log,
 * for agent CLIs and steps to read (every few seconds while a step runs). Returns how
 * many services the sandbox has.
 */
export async function syncServiceLogs(
  deps: Pick<SandboxDeps, 'sandboxes' | 'egressRoot'>,
  sandbox: string,
): Promise<number> {
  const runtime = deps.sandboxes.services;
  const services = runtime ? await runtime.list(sandbox) : [];
  if (!runtime || !services.length) return 0;
  const dir = path.join(egressDirOf(deps.egressRoot, sandbox), 'services');
  await mkdir(dir, { recursive: true, mode: 0o755 });
  for (const service of services) {
    const text = await runtime.log(sandbox, service, 5_000).catch(() => '');
    const file = path.join(dir, `${service}.log`);
    await writeFile(`${file}.tmp`, text.slice(-SERVICE_LOG_BYTES), { mode: 0o644 });
    await rename(`${file}.tmp`, file);
  }
  return services.length;
}
