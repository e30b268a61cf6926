/**
 * A repo's own environment as the sandbox image: its dev container
 * (`.devcontainer/devcontainer.json`: `image`, or `build.dockerfile` with
 * `context` and `args`; `containerEnv`; `remoteUser`; the lifecycle
 * commands as setup) or a plain Dockerfile. Images are built on the worker's
 * host and tagged by the hash of what they are made of, so each is built
 * once; the snapshot sits on top.
 *
 * Why not `@devcontainers/cli`: it pulls features and images from registries
 * (none is reachable from here), runs the lifecycle commands in a container
 * it starts with a network, and needs a Docker CLI with BuildKit; drydock
 * needs only the few fields above, read with jsonc-parser, and runs setup
 * itself behind the egress proxy.
 *
 * Images are built whole (RUN, ADD, multi-stage, COPY --from, ARG) in
 * drydock's isolated builder (sandbox/builder.ts, docs/builder.md), never by
 * the host's daemon: buildah in gVisor with no network but the egress proxy,
 * given each image the Dockerfile starts from (sandbox/dockerfile-bases.ts):
 * one on the host that no repository made, or pulled from a registry the
 * operator allows, pinned by id. drydock's layer on top runs the repo's
 * `setup.root` as root, in the builder too; sessions stay non-root. A named
 * image, or a Dockerfile's result, with no setup.root needs only drydock's
 * layer, which runs nothing: it is made on the host with no build at all (a
 * container of the image created, never started, given two empty folders and
 * committed: hostLayer).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parse as parseJsonc, printParseErrorCode, type ParseError } from 'jsonc-parser';
import { z } from 'zod';
import { git } from '../repos/git';
import type { Logger } from '../platform/log';
import { REPO_CONFIG_FILE } from '../workflows/repo-config';
import {
  buildIsolated,
  IsolatedBuildFailed,
  REPO_STAGE,
  type BuildLimits,
  type BuildProgress,
  type IsolatedBuild,
} from './builder';
import { dockerfileBases, type BaseImage } from './dockerfile-bases';
import type { EgressRule } from './egress';
import { imageStoreOf, HOME, WORKSPACE, type ImageInfo, type ImageLayer, type SandboxProvider } from './provider';
import { repoMadeImage } from '../workflows/rules/images';
import { propertyProblems, runSettingsOf, sandboxUser, sandboxVolumes, type RepoLink } from './devcontainer-run';
import { RepoTree } from './repo-files';
import { commandShell, lifecycleCommand, lifecycleOf, type Lifecycle } from './lifecycle';
import { resolveFeatures, writeFeatureTree, type FeatureSource } from './feature-registry';
import {
  FeatureError,
  featureEnvFile,
  featureRequests,
  featureSteps,
  installOrder,
  type FeatureRequest,
  type FeatureStart,
  type ResolvedFeature,
} from './features';

export const DEVCONTAINER_FILE = '.devcontainer/devcontainer.json';
/**
 * Makes sure an image the repo names (`field` says where) is on the worker's
 * host: there already, or pulled from a registry the operator allows (a
 * snapshot build only); else throws an EnvironmentError naming the image and
 * the setting (sandbox/activities/environment.ts).
 */
export type ImageFetcher = (image: string, field: string) => Promise<void>;

/** The label an environment image carries naming the image it is built FROM (the repo's own, or a named one). */
export const ENVIRONMENT_FROM_LABEL = 'drydock.environment.from';

/**
 * The names of a repo's images on a host: its Dockerfile's build
 * (`drydock-repo-<slug>`) and drydock's layer on top (`drydock-env-<slug>`),
 * each tagged by a hash of what it is made of.
 */
export function environmentImageNames(slug: string): { repo: string; env: string } {
  return { repo: `drydock-repo-${slug}`, env: `drydock-env-${slug}` };
}
/** The user every sandbox runs as; a dev container's remoteUser must be this uid. */
const SANDBOX_UID = 1000;

/** What a repo's environment file asks for. */
export interface RepoEnvironment {
  /** The file that declares it. */
  source: string;
  /** A prebuilt image (on this host), or the Dockerfile to build. */
  image?: string;
  dockerfile?: string;
  /** Build context, a folder of the repo. */
  context?: string;
  args: Record<string, string>;
  /** The Dockerfile's stage to build (a compose dev service's `build.target`, devcontainer.json's `build.target`). */
  target?: string;
  containerEnv: Record<string, string>;
  remoteUser?: string;
  /** The dev container's lifecycle commands (setup), hook by hook: its features' go before each (sandbox/lifecycle.ts). */
  lifecycle?: Lifecycle;
  /** A compose dev container: its files (repo paths), its own service, the services to run beside it. */
  compose?: {
    files: string[];
    service: string;
    runServices?: string[];
    /**
     * The operator's `--environment base|image:<ref>` replaced the dev
     * service's image: its environment, names, app and the other services of
     * the compose files are kept (declaredStack), its image or build is not.
     */
    servicesOnly?: boolean;
  };
  /** The app: `postStartCommand` started, `forwardPorts`' first port of the dev container. */
  app?: { start: string; port: number; from?: string };
  /** The dev container's remoteEnv: the environment of every step (`${containerEnv:NAME}` read in the sandbox's). */
  remoteEnv?: Record<string, string>;
  /** runArgs' `--env-file`s, paths of the repo: read into containerEnv (sandbox/activities/services.ts, declaredStack). */
  envFiles?: string[];
  /** The dev container's features (sandbox/features.ts), installed in the builder on top of its image. */
  features?: FeatureRequest[];
  /** overrideFeatureInstallOrder. */
  featureOrder?: string[];
  /** containerUser: the user features see as _CONTAINER_USER. */
  containerUser?: string;
  /** Named volumes' folders outside /workspace and home: VOLUMEs of drydock's layer (sandboxVolumes). */
  volumes?: string[];
  /** Folders and files of the repo the dev service mounts elsewhere: links in drydock's layer to /workspace/<path>. */
  links?: RepoLink[];
  /** What was read as the Dev Container CLI reads it but differs in a sandbox: said in the worker's log, never silent. */
  notes?: string[];
}

const devcontainerSchema = z.object({
  image: z.string().min(1).optional(),
  dockerFile: z.string().min(1).optional(),
  context: z.string().optional(),
  build: z
    .object({
      dockerfile: z.string().min(1).optional(),
      context: z.string().optional(),
      args: z.record(z.string(), z.string()).optional(),
      target: z.string().min(1).optional(),
      // A hint for the image cache: drydock's builder keeps its own.
      cacheFrom: z.union([z.string(), z.array(z.string())]).optional(),
    })
    .strict()
    .optional(),
  containerEnv: z
    .record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name'), z.string())
    .optional(),
  // Checked for its form only: a sandbox always runs as uid 1000.
  remoteUser: z
    .string()
    .regex(/^(?:[a-z_][a-z0-9_.-]{0,31}|\d{1,10})$/, 'a user name or uid')
    .optional(),
  features: z.record(z.string(), z.unknown()).optional(),
  overrideFeatureInstallOrder: z.array(z.string()).optional(),
  containerUser: z
    .string()
    .regex(/^(?:[a-z_][a-z0-9_.-]{0,31}|\d{1,10})$/, 'a user name or uid')
    .optional(),
  onCreateCommand: lifecycleCommand.optional(),
  updateContentCommand: lifecycleCommand.optional(),
  postCreateCommand: lifecycleCommand.optional(),
  dockerComposeFile: z.union([z.string().min(1), z.array(z.string().min(1)).min(1).max(8)]).optional(),
  service: z.string().min(1).optional(),
  runServices: z.array(z.string().min(1)).optional(),
  forwardPorts: z.array(z.union([z.number().int().min(1).max(65535), z.string()])).optional(),
  postStartCommand: lifecycleCommand.optional(),
  remoteEnv: z
    .record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name'), z.string())
    .optional(),
  mounts: z.array(z.unknown()).optional(),
  runArgs: z.array(z.string()).optional(),
});

/** A path of the repo, relative to `base` (a folder of the repo); one that leaves the repo is refused. */
function repoPath(base: string, relative: string, field: string, source: string): string {
  const joined = path.posix.normalize(path.posix.join(base, relative));
  if (joined.startsWith('../') || joined === '..' || path.posix.isAbsolute(relative)) {
    throw new EnvironmentError(`${source}: ${field} "${relative}" is outside the repository`);
  }
  return joined === '.' ? '' : joined.replace(/\/$/, '');
}

/** Reads a devcontainer.json (JSONC); every problem names the file and field. */
/**
 * The compose files and service of a dev container, read alone (the rest of
 * the file is not: the operator's image replaces it); undefined when the
 * file is no compose dev container or cannot be read.
 */
export function devcontainerCompose(text: string, source: string): RepoEnvironment['compose'] {
  const errors: ParseError[] = [];
  const data: unknown = parseJsonc(text, errors, { allowTrailingComma: true });
  const parsed = devcontainerSchema.pick({ dockerComposeFile: true, service: true, runServices: true }).safeParse(data);
  if (errors.length || !parsed.success || !parsed.data.dockerComposeFile) return undefined;
  return composeOf(parsed.data as z.infer<typeof devcontainerSchema>, source, path.posix.dirname(source));
}

export function parseDevcontainer(text: string, source: string): RepoEnvironment {
  const errors: ParseError[] = [];
  const data: unknown = parseJsonc(text, errors, { allowTrailingComma: true });
  if (errors.length) {
    throw new EnvironmentError(
      `${source}: not valid JSON with comments (${printParseErrorCode(errors[0].error)} at ${errors[0].offset})`,
    );
  }
  const parsed = devcontainerSchema.safeParse(data);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new EnvironmentError(`${source}: ${issue.path.join('.') || '(file)'}: ${issue.message}`);
  }
  const dc = parsed.data;
  const dockerfile = dc.build?.dockerfile ?? dc.dockerFile;
  const dir = path.posix.dirname(source);
  const features = asEnvironmentError(() => featureRequests(dc.features ?? {}, source, dir));
  const compose = composeOf(dc, source, dir);
  if (!compose && !dc.image === !dockerfile) {
    throw new EnvironmentError(`${source}: give image, build.dockerfile or dockerComposeFile (one of them)`);
  }
  if (compose && (dc.image || dockerfile)) {
    throw new EnvironmentError(`${source}: give image, build.dockerfile or dockerComposeFile, not more than one`);
  }
  const notes: string[] = [];
  const remoteUser = sandboxUser(dc.remoteUser, `${source}: remoteUser`, notes);
  const run = hostSettings(data as Record<string, unknown>, dc, source);
  const lifecycle = lifecycleOf(dc);
  return {
    source,
    ...(dc.image ? { image: dc.image } : {}),
    ...(dockerfile
      ? {
          dockerfile: repoPath(dir, dockerfile, 'build.dockerfile', source),
          context: repoPath(dir, dc.build?.context ?? dc.context ?? '.', 'build.context', source),
        }
      : {}),
    args: dc.build?.args ?? {},
    ...(dc.build?.target ? { target: dc.build.target } : {}),
    containerEnv: {
      ...containerEnvOf(run.env, `${source}: runArgs -e`, notes),
      ...containerEnvOf(dc.containerEnv ?? {}, `${source}: containerEnv`, notes),
    },
    ...(run.envFiles.length ? { envFiles: run.envFiles } : {}),
    ...volumesOf(run.volumes),
    ...(run.links.length ? { links: run.links } : {}),
    ...(remoteUser ? { remoteUser } : {}),
    ...(Object.keys(lifecycle).length ? { lifecycle } : {}),
    ...(compose ? { compose } : {}),
    ...appOf(dc, source, notes),
    ...(dc.remoteEnv && Object.keys(dc.remoteEnv).length
      ? { remoteEnv: remoteEnvOf(dc.remoteEnv, source, notes) }
      : {}),
    ...featuresOf(dc, features),
    ...(notes.length ? { notes } : {}),
  };
}

/** Named volumes' targets as the environment's `volumes` (none when every one is the sandbox's already). */
export function volumesOf(targets: string[]): Pick<RepoEnvironment, 'volumes'> {
  const volumes = sandboxVolumes(targets, [WORKSPACE, HOME]);
  return volumes.length ? { volumes } : {};
}

/** A FeatureError (sandbox/features.ts) as the EnvironmentError every caller knows. */
function asEnvironmentError<T>(fn: () => T): T {
  const translate = (err: unknown) => {
    throw err instanceof FeatureError ? new EnvironmentError(err.message) : err;
  };
  try {
    const result = fn();
    return (result instanceof Promise ? result.catch(translate) : result) as T;
  } catch (err) {
    return translate(err);
  }
}

/**
 * The dev container's features and their settings. A compose dev container's
 * go on its service's image or build, as the spec says (declaredStack keeps
 * them when it reads the service).
 */
function featuresOf(
  dc: z.infer<typeof devcontainerSchema>,
  features: FeatureRequest[],
): Pick<RepoEnvironment, 'features' | 'featureOrder' | 'containerUser'> {
  if (!features.length) return {};
  return {
    features,
    ...(dc.overrideFeatureInstallOrder ? { featureOrder: dc.overrideFeatureInstallOrder } : {}),
    ...(dc.containerUser ? { containerUser: dc.containerUser } : {}),
  };
}

/** remoteEnv's `${containerEnv:NAME}` read from the sandbox's environment (`env`, "NAME=value"; unset: empty). */
export function remoteEnvIn(remoteEnv: Record<string, string>, env: string[]): string[] {
  const valueOf = (name: string) =>
    [...env]
      .reverse()
      .find((e) => e.startsWith(`${name}=`))
      ?.slice(name.length + 1) ?? '';
  return Object.entries(remoteEnv).map(
    ([name, value]) =>
      `${name}=${value.replace(/\0containerEnv:([A-Za-z_][A-Za-z0-9_]*)\0/g, (_, n: string) => valueOf(n))}`,
  );
}

/**
 * `mounts`, `runArgs` and the other properties of how a developer's machine
 * runs the dev container, read against what a sandbox is
 * (sandbox/devcontainer-run.ts): `-e` and `--env-file` honoured, what drydock
 * does already harmless, anything else refused naming the field.
 */
function hostSettings(data: Record<string, unknown>, dc: z.infer<typeof devcontainerSchema>, source: string) {
  const settings = runSettingsOf(dc.runArgs, dc.mounts, source);
  const problems = [...propertyProblems(data, source), ...settings.problems];
  if (problems.length) throw new EnvironmentError(problems.join('; '));
  return settings;
}

/**
 * The developer's machine's variables as the Dev Container CLI resolves them
 * when the machine has no such variable (its variableSubstitution.ts): a
 * sandbox has no developer's machine, and the worker's own environment is
 * never read (credentials stay with the worker). `${localEnv:NAME}` is empty
 * (its default with `${localEnv:NAME:default}`), `${localWorkspaceFolder}`
 * is where the sandbox has the repository (/workspace) and
 * `${localWorkspaceFolderBasename}` its last part; an empty value is said
 * in `notes`. Anything else is left for the caller (undefined).
 */
function localVariable(inner: string, field: string, notes: string[]): string | undefined {
  if (inner === 'localWorkspaceFolder') return WORKSPACE;
  if (inner === 'localWorkspaceFolderBasename') return path.posix.basename(WORKSPACE);
  const local = /^localEnv:([A-Za-z_][A-Za-z0-9_]*)(?::(.*))?$/.exec(inner);
  if (!local) return undefined;
  if (local[2] !== undefined) return local[2];
  notes.push(
    `${field}: \${${inner}} is empty, as the Dev Container CLI makes a variable the developer's machine does not set ` +
      "(a sandbox has no developer's machine): write the value, or ${localEnv:NAME:default}",
  );
  return '';
}

/**
 * remoteEnv as the steps' environment: `${containerWorkspaceFolder}` is
 * /workspace, `${containerEnv:NAME}` is marked for remoteEnvIn to read in the
 * sandbox's environment, the developer's machine's as localVariable says;
 * anything else (`${localHomeFolder}`) is refused, naming the variable.
 */
function remoteEnvOf(env: Record<string, string>, source: string, notes: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    out[name] = value.replace(/\$\{([^}]*)\}/g, (whole, inner: string) => {
      if (inner === 'containerWorkspaceFolder') return WORKSPACE;
      if (/^containerEnv:[A-Za-z_][A-Za-z0-9_]*$/.test(inner)) return `\0${inner}\0`; // remoteEnvIn reads it
      const local = localVariable(inner, `${source}: remoteEnv.${name}`, notes);
      if (local !== undefined) return local;
      throw new EnvironmentError(
        `${source}: remoteEnv.${name}: ${whole} is of the developer's machine, which a sandbox does not have: ` +
          'write the value, or ${localEnv:NAME:default}',
      );
    });
  }
  return out;
}

/**
 * containerEnv (and runArgs' `-e`, named by `field`) with the developer's
 * machine's variables and `${containerWorkspaceFolder}` resolved as the Dev
 * Container CLI resolves them before the container exists (localVariable);
 * `$NAME` and `${NAME}` are left for the image's ENV expansion (expandedEnv).
 */
function containerEnvOf(env: Record<string, string>, field: string, notes: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    out[name] = value.replace(/\$\{([^}]*)\}/g, (whole, inner: string) =>
      inner === 'containerWorkspaceFolder' ? WORKSPACE : (localVariable(inner, `${field}.${name}`, notes) ?? whole),
    );
  }
  return out;
}

/** The compose files (repo paths), service and runServices of a compose dev container; undefined when not one. */
function composeOf(dc: z.infer<typeof devcontainerSchema>, source: string, dir: string): RepoEnvironment['compose'] {
  if (!dc.dockerComposeFile) {
    if (dc.service || dc.runServices) throw new EnvironmentError(`${source}: service needs dockerComposeFile`);
    return undefined;
  }
  if (!dc.service) throw new EnvironmentError(`${source}: service: name the compose service that is the dev container`);
  const files = [dc.dockerComposeFile].flat().map((f, i) => repoPath(dir, f, `dockerComposeFile.${i}`, source));
  return { files, service: dc.service, ...(dc.runServices ? { runServices: dc.runServices } : {}) };
}

/**
 * The app of a dev container: postStartCommand, on the first port of
 * forwardPorts that is the dev container's own. Without such a port the
 * command starts no app drydock can check, and is not run: said in `notes`.
 */
function appOf(dc: z.infer<typeof devcontainerSchema>, source: string, notes: string[]): Pick<RepoEnvironment, 'app'> {
  const own = (dc.forwardPorts ?? []).find((p) => typeof p === 'number' || p.startsWith(`${dc.service}:`));
  if (dc.postStartCommand && own === undefined)
    notes.push(
      `${source}: postStartCommand: not run: with no port of the dev container's own in forwardPorts it starts no app ` +
        'drydock can check (give its port in forwardPorts to have it started as the app, or move it to postCreateCommand)',
    );
  if (!dc.postStartCommand || own === undefined) return {};
  const port = typeof own === 'number' ? own : Number(own.split(':')[1]);
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new EnvironmentError(`${source}: forwardPorts: "${own}" is not a port`);
  return { app: { start: commandShell(dc.postStartCommand), port } };
}

/** A plain Dockerfile of the repo as an environment; its context defaults to its folder. */
export function dockerfileEnvironment(dockerfile: string, context?: string): RepoEnvironment {
  return {
    source: dockerfile,
    dockerfile,
    context: context ?? (path.posix.dirname(dockerfile) === '.' ? '' : path.posix.dirname(dockerfile)),
    args: {},
    containerEnv: {},
  };
}

/** Why an environment image could not be made: permanent until the repo changes. */
export class EnvironmentError extends Error {
  override name = 'EnvironmentError';
}

/** What building an environment image needs beside the repo: the isolated builder's settings (sandbox/builder.ts). */
export interface EnvironmentBuild {
  /** The builder's image (sandbox-images/builder-image.ts), made on first use. */
  builderImage: () => Promise<string>;
  /** The build's allowlist: the operator's rules for the repo and the package registries. */
  egress: EgressRule[];
  extraCaCerts?: string;
  /** Commands run as root in the builder as the environment's last layer (`setup.root`). */
  rootSetup?: string;
  /** Where the dev container's features come from (sandbox/feature-registry.ts); without it features are refused. */
  features?: FeatureSource;
  /** Names the build in logs. */
  owner: string;
  log: Logger;
  limits?: Partial<BuildLimits>;
  /** The worker's folder for what builds reuse (sandbox/builder.ts, IsolatedBuild.cacheDir). */
  cacheDir?: string;
  /** Told where a build is, with the file or field it builds (`.devcontainer/Dockerfile`, `services.db.build`). */
  onProgress?: (progress: BuildProgress & { source: string }) => void;
}

/** An environment image, its features' setup hooks and their postStartCommands, in install order (sandbox/lifecycle.ts). */
export interface EnvironmentImage {
  tag: string;
  featureLifecycles: Lifecycle[];
  featureStarts: FeatureStart[];
}

/**
 * The sandbox image of a repo's environment at `commit`: the repo's image
 * (its Dockerfile built whole, or a named image: on this host or pulled from
 * an allowed registry, and not one drydock made from a repository) with
 * drydock's layer on top (setup.root run as root, /workspace and the home
 * folder owned by the sandbox user, containerEnv). A Dockerfile or setup.root
 * is built in the isolated builder (sandbox/builder.ts), never by the host's
 * daemon; without setup.root drydock's layer is made on the host with no
 * build (hostLayer), over the named image or the builder's result. Built
 * once per content hash; returns the tag and the features' setup hooks
 * (which run as setup, in the sandbox). With no declared environment,
 * `env` undefined: the base image with setup.root on top.
 */
export async function ensureEnvironmentImage(
  provider: SandboxProvider,
  at: { mirror: string; commit: string },
  env: RepoEnvironment | undefined,
  slug: string,
  fetchImage: ImageFetcher,
  build: EnvironmentBuild & { baseImage: string },
): Promise<EnvironmentImage> {
  const source = env?.source ?? REPO_CONFIG_FILE;
  const repo = env?.dockerfile ? await repoDockerfile(at, env) : undefined;
  const named = env?.image ?? (repo ? undefined : build.baseImage);
  const refs = repo
    ? repo.bases.map((b) => ({ ref: b.ref, field: `${source}: ${env!.dockerfile}: ${b.instruction}` }))
    : [{ ref: named!, field: `${source}: image` }];
  const bases: { ref: string; id: string; env: string[] }[] = [];
  for (const { ref, field } of refs) {
    if (ref !== build.baseImage) await fetchImage(ref, field);
    const { id, env: imageEnv } = await allowedImage(provider, ref, field);
    bases.push({ ref, id, env: imageEnv });
  }
  const features = env?.features?.length ? await layerFeatures(at, env, build) : undefined;
  // Without setup.root, features or links drydock's layer runs nothing: the worker makes it with no build
  // (hostLayer), over the named image or over the builder's result; setup.root or features put it in the builder,
  // and so does a link, which replaces what the image has at its path (the daemon's copy into a container refuses
  // to: "cannot overwrite directory"; linkSteps).
  const layerOnHost = !build.rootSetup && !features && !env?.links?.length;
  const layer = layerOnHost
    ? JSON.stringify(hostLayer(env, []))
    : layerDockerfile(repo ? REPO_STAGE : named!, env, build.rootSetup, features?.steps ?? []);
  const hash = hashOf([
    ...bases.map((b) => `${b.ref}@${b.id}`),
    repo?.text ?? '',
    repo?.tree ?? '',
    JSON.stringify(env?.args ?? {}),
    env?.target ?? '',
    layer,
    features?.key ?? '',
  ]);
  const tag = `${environmentImageNames(slug).env}:${hash.slice(0, 12)}`;
  const made = { tag, featureLifecycles: features?.lifecycles ?? [], featureStarts: features?.starts ?? [] };
  if (await imageStoreOf(provider).image(tag)) return made;
  const labels = {
    'drydock.image': 'environment',
    [ENVIRONMENT_FROM_LABEL]: named ?? `${env!.dockerfile}@${at.commit}`,
  };
  if (layerOnHost && !repo) {
    await imageStoreOf(provider).layerImage({ tag, from: bases[0].id, labels, ...hostLayer(env, bases[0].env) });
    return made;
  }
  // The repo's result alone, under the repo's name, when the layer is made here.
  const built = layerOnHost ? `${environmentImageNames(slug).repo}:${hash.slice(0, 12)}` : tag;
  if (!(await imageStoreOf(provider).image(built))) {
    await withContext(async (context, featureFolder) => {
      if (repo) await untar(at.mirror, `${at.commit}:${env!.context ?? ''}`, context);
      if (features) await features.write(featureFolder);
      await buildIn(build, source, {
        ...(features ? { features: featureFolder } : {}),
        builderImage: await build.builderImage(),
        tag: built,
        labels: layerOnHost ? { ...labels, 'drydock.image': 'repo' } : labels,
        ...(repo
          ? {
              repo: {
                dockerfile: repo.text,
                context,
                args: env!.args,
                ...(env!.target ? { target: env!.target } : {}),
              },
            }
          : {}),
        ...(layerOnHost ? {} : { layer }),
        bases,
        egress: build.egress,
        ...(build.extraCaCerts ? { extraCaCerts: build.extraCaCerts } : {}),
        ...(build.limits ? { limits: build.limits } : {}),
        ...(build.cacheDir ? { cacheDir: build.cacheDir } : {}),
        owner: build.owner,
        log: build.log,
      });
    });
  }
  if (layerOnHost) await layerOverResult(provider, built, { tag, labels, env });
  return made;
}

/**
 * drydock's layer (hostLayer) over the builder's result `built`, which is
 * then untagged: the environment image holds its layers. Nothing runs.
 */
async function layerOverResult(
  provider: SandboxProvider,
  built: string,
  layer: { tag: string; labels: Record<string, string>; env: RepoEnvironment | undefined },
): Promise<void> {
  const result = await imageStoreOf(provider).image(built);
  if (!result) throw new Error(`the isolated builder's result ${built} is not on the host after its load`);
  await imageStoreOf(provider).layerImage({
    tag: layer.tag,
    from: result.id,
    labels: layer.labels,
    ...hostLayer(layer.env, result.env),
  });
  await imageStoreOf(provider).removeImage(built);
}

/** The host's image `ref` a repo may start from (workflows/rules/images.ts, repoMadeImage), else why not. */
export async function allowedImage(provider: SandboxProvider, ref: string, source: string): Promise<ImageInfo> {
  const image = await imageStoreOf(provider).image(ref);
  if (!image) {
    throw new EnvironmentError(`${source}: image ${ref} is not on the worker's host`);
  }
  const made = repoMadeImage(ref, image.labels);
  if (made) throw new EnvironmentError(`${source}: ${made}`);
  const triggers = onBuildProblem(ref, image);
  if (triggers) throw new EnvironmentError(`${source}: ${triggers}`);
  return image;
}

/**
 * Why a repo may not build on the image `ref`, if its ONBUILD triggers say so: a build FROM it
 * (the repo's Dockerfile, drydock's own layer) runs them first, and they are whatever the
 * image's author wrote, not the repo's (RUN as root, ADD from the network, COPY --from
 * another image). Pulled or on the host alike.
 */
export function onBuildProblem(ref: string, image: Pick<ImageInfo, 'onBuild'>): string | undefined {
  if (!image.onBuild?.length) return undefined;
  const first = image.onBuild[0].slice(0, 200);
  return (
    `image ${ref} has ${image.onBuild.length} ONBUILD trigger(s) (the first: "${first}"), which any build on it ` +
    "runs before the repo's own steps: use an image without ONBUILD, or put what the triggers do in setup"
  );
}

/**
 * drydock's layer over the repo's image: setup.root as root (through the
 * egress proxy, like every RUN of the build), then the sandbox user's
 * folders and containerEnv; the sandbox always runs as SANDBOX_UID
 * (remoteUser is checked for its form only).
 */
function layerDockerfile(
  from: string,
  env: RepoEnvironment | undefined,
  rootSetup: string | undefined,
  features: string[],
): string {
  const owned = `--chown=${SANDBOX_UID}:${SANDBOX_UID}`;
  const envLines = Object.entries({ ...env?.containerEnv, HOME }).map(([k, v]) => `ENV ${k}=${JSON.stringify(v)}`);
  const root = rootSetup ? ['USER root', `RUN ${JSON.stringify(['/bin/sh', '-c', rootSetup])}`] : [];
  return [
    `FROM ${from}`,
    ...features,
    ...root,
    `COPY ${owned} empty/ ${WORKSPACE}/`,
    `COPY ${owned} empty/ ${HOME}/`,
    ...(env?.volumes?.length ? [`VOLUME ${JSON.stringify(env.volumes)}`] : []),
    ...linkSteps(env?.links ?? []),
    ...envLines,
    `USER ${SANDBOX_UID}:${SANDBOX_UID}`,
    `WORKDIR ${WORKSPACE}`,
    'CMD ["sleep", "infinity"]',
    '',
  ].join('\n');
}

/**
 * The links of a dev service's repo folders mounted elsewhere, as root (what
 * the image has there is replaced, as a bind mount hides it). Paths are
 * checked to need no quoting (devcontainer-run.ts linkTargetProblem).
 */
export function linkSteps(links: RepoLink[]): string[] {
  if (!links.length) return [];
  const commands = links.map(
    (l) => `rm -rf ${l.path} && mkdir -p ${path.posix.dirname(l.path)} && ln -s ${l.to} ${l.path}`,
  );
  return ['USER root', `RUN ${JSON.stringify(['/bin/sh', '-c', commands.join(' && ')])}`];
}

/**
 * The dev container's features for drydock's layer: each fetched (a
 * registry's, pulled at a snapshot build and pinned by digest; a folder of
 * the repo at `commit`), checked and ordered; the steps that install them,
 * a key of their content and options, and how to write their folders (with
 * each one's devcontainer-features.env) into the layer's context.
 */
async function layerFeatures(
  at: { mirror: string; commit: string },
  env: RepoEnvironment,
  build: EnvironmentBuild,
): Promise<{
  steps: string[];
  key: string;
  lifecycles: Lifecycle[];
  starts: FeatureStart[];
  write: (folder: string) => Promise<void>;
}> {
  if (!build.features)
    throw new EnvironmentError(`${env.features![0].field}: this worker installs no dev container features`);
  const sourceOf = build.features;
  return asEnvironmentError(async () => {
    const resolved = await resolveFeatures(env.features!, sourceOf, new RepoTree(at.mirror, at.commit));
    const ordered = installOrder(
      resolved.map((r) => r.feature),
      env.featureOrder,
      env.source,
    );
    // The sandbox runs as uid 1000 whatever containerUser says: with no remoteUser, features are told that uid's user.
    const users = {
      ...(env.remoteUser ? { remoteUser: env.remoteUser } : {}),
      containerUser: env.containerUser ?? 'root',
    };
    const envFiles = ordered.map((f: ResolvedFeature) => featureEnvFile(f, users));
    return {
      steps: featureSteps(ordered),
      lifecycles: ordered.map((f) => f.metadata.lifecycle),
      starts: ordered.flatMap((f) =>
        f.metadata.postStart === undefined ? [] : [{ feature: f.request.key, command: f.metadata.postStart }],
      ),
      key: JSON.stringify(ordered.map((f, i) => [f.request.key, f.pinned, envFiles[i]])),
      write: async (folder: string) => {
        await mkdir(folder);
        for (const [i, feature] of ordered.entries()) {
          const files = resolved.find((r) => r.feature === feature)!.files;
          const env = { kind: 'file' as const, mode: 0o644, data: Buffer.from(envFiles[i]) };
          await writeFeatureTree(path.join(folder, String(i)), {
            kind: 'folder',
            entries: { ...files.entries, 'devcontainer-features.env': env },
          });
        }
      },
    };
  });
}

/** The repo's Dockerfile at `commit`: its text, its context's tree and the images it starts from. */
async function repoDockerfile(
  { mirror, commit }: { mirror: string; commit: string },
  env: RepoEnvironment,
): Promise<{ text: string; tree: string; bases: BaseImage[] }> {
  const blob = await git(['rev-parse', `${commit}:${env.dockerfile}`], mirror).catch(() => {
    throw new EnvironmentError(`${env.source}: Dockerfile ${env.dockerfile} is not in the repository`);
  });
  const tree = await git(['rev-parse', `${commit}:${env.context ?? ''}`], mirror).catch(() => {
    throw new EnvironmentError(`${env.source}: build context ${env.context || '.'} is not in the repository`);
  });
  const text = await git(['cat-file', 'blob', blob.trim()], mirror);
  const bases = dockerfileBases(text, env.args);
  if ('problem' in bases) throw new EnvironmentError(`${env.source}: ${env.dockerfile}: ${bases.problem}`);
  return { text, tree: tree.trim(), bases };
}

/** Runs `fn` with an empty folder for a build context (and a path beside it for the features' folders), removed afterwards. */
export async function withContext(fn: (context: string, features: string) => Promise<void>): Promise<void> {
  const work = await mkdtemp(path.join(tmpdir(), 'drydock-build-'));
  try {
    await mkdir(path.join(work, 'context'));
    await fn(path.join(work, 'context'), path.join(work, 'features'));
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** `git archive` of a tree into a folder. */
export function untar(mirror: string, tree: string, into: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const archive = spawn('git', ['archive', '--format=tar', tree], { cwd: mirror, stdio: ['ignore', 'pipe', 'pipe'] });
    const tar = spawn('tar', ['-x', '-C', into], { stdio: ['pipe', 'ignore', 'pipe'] });
    archive.stdout.pipe(tar.stdin);
    let failed = '';
    archive.stderr.on('data', (c: Buffer) => (failed += c.toString()));
    tar.on('error', reject);
    tar.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`extracting ${tree} failed: ${failed}`))));
  });
}

export function hashOf(parts: string[]): string {
  const hash = createHash('sha256');
  for (const p of parts) hash.update(p).update('\0');
  return hash.digest('hex');
}

/**
 * drydock's layer without setup.root (over a named image or the isolated
 * builder's result), as data for the provider's layerImage: what
 * layerDockerfile writes, without a build. This layer runs nothing, and in
 * the builder it costs minutes (handing a named image over; a vfs copy of
 * the result under gVisor: docs/builder.md): the provider creates a
 * container of the image (never started), copies the two empty owned folders
 * in, and commits it with this configuration, so no Dockerfile is read and
 * nothing of the repo or of the image runs on the host.
 */
export function hostLayer(
  env: RepoEnvironment | undefined,
  imageEnv: string[],
): Omit<ImageLayer, 'tag' | 'from' | 'labels'> {
  return {
    folders: [WORKSPACE, HOME],
    owner: SANDBOX_UID,
    ...(env?.volumes?.length ? { volumes: env.volumes } : {}),
    env: expandedEnv({ ...env?.containerEnv, HOME }, imageEnv),
    user: `${SANDBOX_UID}:${SANDBOX_UID}`,
    workdir: WORKSPACE,
    cmd: ['sleep', 'infinity'],
  };
}

/**
 * Variables as "NAME=value" with `$NAME`, `${NAME}`, `${NAME:-word}` and
 * `${NAME:+word}` in each value taken from those before it (the image's,
 * then the earlier ones), as a Dockerfile's ENV lines expand them: the same
 * containerEnv gives the same environment over a named image as through the builder.
 */
export function expandedEnv(vars: Record<string, string>, imageEnv: string[]): string[] {
  const known = new Map<string, string>();
  for (const e of imageEnv) if (e.includes('=')) known.set(e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1));
  return Object.entries(vars).map(([name, value]) => {
    const expanded = value.replace(
      /\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))/g,
      (_m, braced: string | undefined, op: string | undefined, word: string | undefined, bare: string | undefined) => {
        const current = known.get((braced ?? bare)!) ?? '';
        if (op === '-') return current || word!;
        if (op === '+') return current ? word! : '';
        return current;
      },
    );
    known.set(name, expanded);
    return `${name}=${expanded}`;
  });
}

/** Builds in the isolated builder; a failure names the file and what the builder said. */
export async function buildIn(settings: EnvironmentBuild, source: string, build: IsolatedBuild): Promise<void> {
  try {
    const { onProgress } = settings;
    const counts = await buildIsolated(
      onProgress ? { ...build, onProgress: (p) => onProgress({ source, ...p }) } : build,
    );
    settings.log.info({ owner: build.owner, tag: build.tag, egress: counts }, 'environment image built');
  } catch (err) {
    if (!(err instanceof IsolatedBuildFailed)) throw err;
    throw new EnvironmentError(buildFailure(source, err));
  }
}

/**
 * A failed build's message: the file, what the builder said, and the hosts the
 * egress proxy refused with the setting that allows one (brianc/node-postgres's
 * dev container stopped at apt's bare "403 Forbidden [IP: 127.0.0.1 3128]").
 */
export function buildFailure(source: string, err: IsolatedBuildFailed): string {
  const refused = err.refused.length
    ? `; the egress proxy refused ${err.refused.slice(0, 5).join(', ')}${err.refused.length > 5 ? ', …' : ''}` +
      " (a build reaches the package registries and the repo's --allow rules: " +
      "'drydock repo add <url> --allow <host>' adds one)"
    : '';
  return `${source}: ${err.message}${refused}; its output ends:\n${err.output.trim().slice(-1500)}`;
}
