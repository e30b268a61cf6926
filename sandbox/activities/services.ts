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
import { imageSource, parseImageReference, pinnedReference } from '../../workflows/rules/images';
import { shareLimits, type Share } from '../../workflows/rules/service-limits';
import {
  dependencyProblems,
  repoApp,
  servicesOfConfig,
  type AppSpec,
  type ServiceSpec,
} from '../../workflows/services';
import { ComposeError, parseCompose } from '../compose';
import type { SandboxProvider, ServiceContainerSpec } from '../provider';
import { EnvironmentError, type ImageFetcher, type RepoEnvironment } from '../repo-image';
import {
  recordedServices,
  ServiceFailure,
  serviceProblems,
  serviceContainers,
  serviceRuntime,
  startServices,
  type RunnableService,
} from '../services';
import { egressDirOf } from '../egress';
import { SNAPSHOT_ENV_LABEL } from '../snapshots';
import type { SandboxDeps } from './deps';
import { ensureServiceImage, namedServiceImage } from '../../sandbox-images/service-images';

/** What resolving and starting services needs. */
export type ServiceDeps = Pick<SandboxDeps, 'sandboxes' | 'log'>;

/** What a repo declares beside its sandbox. */
export interface DeclaredStack {
  services: ServiceSpec[];
  app?: AppSpec;
}

/**
 * The sandbox environment of a compose dev container (its own service's
 * image or build) and every service declared: the compose file's and the
 * config file's (one name, one service). Problems name the file and field.
 */
export async function declaredStack(
  read: (file: string) => Promise<string | undefined>,
  declared: RepoEnvironment | undefined,
  config: RepoConfig | undefined,
): Promise<{ environment?: RepoEnvironment; stack: DeclaredStack }> {
  const services = config?.services ? servicesOfConfig(config.services) : [];
  let environment = declared;
  if (declared?.compose) {
    const { files, service, runServices } = declared.compose;
    if (files.length > 1) throw new EnvironmentError(`${declared.source}: dockerComposeFile: give one compose file`);
    const text = await read(files[0]);
    if (text === undefined)
      throw new EnvironmentError(`${declared.source}: dockerComposeFile: ${files[0]} is not in the repository`);
    try {
      const parsed = parseCompose(text, files[0], { devService: service, ...(runServices ? { runServices } : {}) });
      environment = {
        ...declared,
        ...(parsed.dev.image ? { image: parsed.dev.image } : {}),
        ...(parsed.dev.dockerfile !== undefined
          ? { dockerfile: parsed.dev.dockerfile, context: parsed.dev.context }
          : {}),
        args: parsed.dev.args,
        containerEnv: { ...parsed.dev.environment, ...declared.containerEnv },
      };
      const clash = parsed.services.find((s) => services.some((c) => c.name === s.name));
      if (clash)
        throw new EnvironmentError(
          `${clash.source}: also declared as services.${clash.name} in .drydock/config.yaml: keep one`,
        );
      services.unshift(...parsed.services);
    } catch (err) {
      if (err instanceof ComposeError) throw new EnvironmentError(err.message);
      throw err;
    }
  }
  const cycle = services.length ? dependencyProblems(services) : [];
  if (cycle.length) throw new EnvironmentError(cycle.join('; '));
  const app = repoApp(config?.app, declared);
  return { ...(environment ? { environment } : {}), stack: { services, ...(app ? { app } : {}) } };
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
    const source = imageSource({
      image: s.image,
      field: `${s.source}.image`,
      onHost,
      allowed: opts.allowed,
      repo: opts.repo,
    });
    if (source.from === 'refused') throw new EnvironmentError(source.problem);
    if (source.from === 'host') {
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
  return (await sandboxes.image(ref)) !== undefined;
}

/**
 * Whether a service's image is on the host: drydock's own service images
 * (`drydock/postgres:17`, sandbox-images/service-images.ts) are built on first
 * use on a Docker host, and with `fresh` (a snapshot build) again when their
 * recipe changed since.
 */
async function serviceImageOnHost(deps: ServiceDeps, ref: string, { fresh }: { fresh: boolean }): Promise<boolean> {
  const named = namedServiceImage(ref);
  const onHost = await hasImage(deps.sandboxes, ref);
  if (!named || (onHost && !fresh) || deps.sandboxes.name !== 'docker') return onHost;
  const progress = (line: string) => deps.log.info({ image: ref }, line);
  await ensureServiceImage(named, progress).catch((err: Error) => {
    throw new EnvironmentError(`service image ${ref} could not be built here: ${err.message}`);
  });
  return true;
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
  if (snapshotImage) return recordedServices((await deps.sandboxes.image(snapshotImage))?.labels);
  if (!declared.length) return [];
  try {
    return await resolveServiceImages(deps, declared, { repo, allowed: [], pull: false });
  } catch (err) {
    if (err instanceof EnvironmentError)
      throw ApplicationFailure.nonRetryable(err.message, ErrorType.EnvironmentUnusable);
    throw err;
  }
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
): Promise<ServiceContainerSpec[]> {
  if (!services.length) return [];
  return unusableOnFailure(() =>
    serviceContainers(deps.sandboxes, sandbox, services, { shares, labels, runtime: deps.runtime }),
  );
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
  const label = snapshotImage && (await deps.sandboxes.image(snapshotImage))?.labels[SNAPSHOT_ENV_LABEL];
  if (!label) return env;
  const extra = JSON.parse(label) as Record<string, string>;
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
 * for agent CLIs and steps to read (every few seconds while a step runs).
 */
export async function syncServiceLogs(
  deps: Pick<SandboxDeps, 'sandboxes' | 'egressRoot'>,
  sandbox: string,
): Promise<void> {
  const runtime = deps.sandboxes.services;
  const services = runtime ? await runtime.list(sandbox) : [];
  if (!runtime || !services.length) return;
  const dir = path.join(egressDirOf(deps.egressRoot, sandbox), 'services');
  await mkdir(dir, { recursive: true, mode: 0o755 });
  for (const service of services) {
    const text = await runtime.log(sandbox, service, 5_000).catch(() => '');
    const file = path.join(dir, `${service}.log`);
    await writeFile(`${file}.tmp`, text.slice(-SERVICE_LOG_BYTES), { mode: 0o644 });
    await rename(`${file}.tmp`, file);
  }
}
