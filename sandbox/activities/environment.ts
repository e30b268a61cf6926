/**
 * The sandbox a repo asks for at a commit: the image of its environment (its
 * dev container or Dockerfile, else drydock's base image), its declared
 * Node.js, and drydock's helpers, the last two mounted read-only from the
 * host (sandbox/toolchains.ts).
 */
import { ApplicationFailure } from '@temporalio/common';
import path from 'node:path';
import { ErrorType } from '../../workflows/api';
import { readAtCommit } from '../../repos/git';
import {
  dockerfileEnvironment,
  ENVIRONMENT_FROM_LABEL,
  environmentImageNames,
  ensureEnvironmentImage,
  EnvironmentError,
  devcontainerCompose,
  parseDevcontainer,
  remoteEnvIn,
  type EnvironmentBuild,
  type ImageFetcher,
  type RepoEnvironment,
} from '../repo-image';
import { repoSlug, SNAPSHOT_LABELS } from '../snapshots';
import {
  HELPER_NODE_VERSION,
  HELPERS_COMMANDS,
  HELPERS_GIT,
  HELPERS_MOUNT,
  NODE_MOUNT,
  nodeRequestOf,
  Toolchains,
} from '../toolchains';
import type { SandboxDeps } from './deps';
import { buildsEnvironments, imageStoreOf, type ImageSummary, type SandboxProvider } from '../provider';
import { readRepoConfig } from '../../repos/config-file';
import { REPO_CONFIG_FILE, rootSetupOf, type RepoConfig } from '../../workflows/repo-config';
import {
  chooseEnvironment,
  environmentFiles,
  type OperatorEnvironment,
} from '../../workflows/rules/environment-choice';
import { PACKAGE_REGISTRIES } from '../builder';
import type { EgressRule } from '../egress';
import { ensureBuilderImage } from '../../sandbox-images/builder-image';
import { declaredStack, environmentImageFetcher, type DeclaredStack } from './services';
import { RepoTree } from '../repo-files';
import { builtServices, serviceImageName } from '../service-build';
import { recordedServices } from '../services';
import { proxiedFetch, type FeatureSource } from '../feature-registry';
import { lifecycleScript, type Lifecycle } from '../lifecycle';
import type { FeatureStart } from '../contract';
import { progressReporter } from '../../platform/heartbeat';

/** What finding a repo's environment needs: its image (built on this host), the toolchain cache, the operator's choice. */
export type EnvironmentDeps = Pick<
  SandboxDeps,
  | 'sandboxes'
  | 'baseImage'
  | 'toolsRoot'
  | 'egressRoot'
  | 'log'
  | 'snapshots'
  | 'extraCaCerts'
  | 'builderImage'
  | 'buildTimeoutMs'
>;

/** What a sandbox of the repo is made of. */
export interface SandboxEnvironment {
  image: string;
  /** Host folders mounted read-only: the helpers, and the repo's Node.js when it declares one. */
  mounts: { source: string; target: string }[];
  /** Environment of every process ("NAME=value"): PATH with the declared Node.js first, corepack's settings. */
  env: string[];
  /** The dev container's lifecycle commands, as setup: its features' first, hook by hook (sandbox/lifecycle.ts). */
  setup?: string;
  /**
   * Its features' lifecycle commands alone: what runs before a setup given
   * elsewhere (the operator's, the repo file's, inferred), which replaces the
   * dev container's own commands but not its features' (withFeatureSetup).
   */
  featureSetup?: string;
  /** Its features' postStartCommands, in install order: run at each start of a sandbox (sandbox/activities/agent-app.ts). */
  featureStarts?: FeatureStart[];
  /** Node.js version mounted, when the repo declares one. */
  node?: string;
  /** What made the image when it is not drydock's base image (the dev container's file, a Dockerfile, the operator's setting). */
  imageFrom?: string;
  /** What decides the image, toolchain and services: part of the snapshot's setup hash. */
  key: string;
  /** The services and the app the repo declares (sandbox/activities/services.ts). */
  stack: DeclaredStack;
  /** What was read of the environment as Compose or the Dev Container CLI reads it, but maybe not as meant: a snapshot build keeps them. */
  notes?: string[];
}

/** The worker's fetch for registries, through its proxy with the extra CAs: one per CA file (its agents pool connections). */
const registryFetches = new Map<string, typeof fetch>();
function registryFetch(extraCaFile: string | undefined): typeof fetch {
  const key = extraCaFile ?? '';
  if (!registryFetches.has(key)) registryFetches.set(key, proxiedFetch(extraCaFile ? { extraCaFile } : {}));
  return registryFetches.get(key)!;
}

/** Where corepack keeps the package managers it fetched: in the snapshot (node_modules is), not in home (it is not). */
const COREPACK_HOME = '/workspace/node_modules/.cache/drydock-corepack';

/** The repo's environment at `commit`; a problem with it fails permanently, naming the file. */
export async function sandboxEnvironment(
  deps: EnvironmentDeps,
  at: { mirror: string; commit: string },
  repo: string,
  pull?: { allowed: string[]; egress?: EgressRule[] },
) {
  const pulls = { repo, ...(pull ? { pull: { allowed: pull.allowed } } : {}) };
  const fetchImage = environmentImageFetcher(deps, pulls);
  // The images an environment is built from go where it is built: the build engine, when the provider has one.
  const engine = deps.sandboxes.environmentBuilds?.engine;
  const fetchBase = engine ? environmentImageFetcher({ ...deps, sandboxes: engine }, pulls) : fetchImage;
  try {
    const features = {
      root: featuresRoot(deps),
      repo,
      ...(pull ? { pull: { allowed: pull.allowed } } : {}),
      fetchImpl: registryFetch(deps.extraCaCerts),
    };
    return await environmentOf(deps, at, repo, { fetchImage, fetchBase, features }, pull?.egress ?? []);
  } catch (err) {
    if (err instanceof EnvironmentError)
      throw ApplicationFailure.nonRetryable(err.message, ErrorType.EnvironmentUnusable);
    throw err;
  }
}

/** Refuses, before anything is built, what this host's provider cannot run (docs/kubernetes.md). */
export function refuseUnsupported(
  provider: SandboxProvider,
  declared: RepoEnvironment | undefined,
  stack: DeclaredStack,
) {
  const refuse = (what: string, why: string) => {
    throw new EnvironmentError(`the repo declares ${what}, and the ${provider.name} sandbox provider ${why}`);
  };
  if (declared && (!buildsEnvironments(provider) || (declared.compose && !provider.capabilities.buildsImages))) {
    refuse(
      `its environment (${declared.source})`,
      unbuiltEnvironment(declared, provider.environmentBuilds !== undefined),
    );
  }
  if (stack.services.length && !provider.services) {
    refuse(`services (${stack.services.map((s) => s.name).join(', ')})`, 'runs no services beside a sandbox');
  }
  const built = stack.services.find((s) => s.build);
  if (built && !provider.capabilities.buildsImages) {
    refuse(
      `a service built from the repository (${built.source}.build)`,
      'builds no service images: name an image instead (pinned by digest, from an allowed registry)',
    );
  }
  if (stack.app?.forAgent && !provider.capabilities.lateCompanions) {
    refuse(
      'app.forAgent',
      "adds no container to a running sandbox: remove app.forAgent (the agent's step starts the app)",
    );
  }
}

/**
 * Why a provider that builds nothing on its sandboxes' host (Kubernetes: docs/kubernetes.md)
 * runs this declared environment not, and what the operator can do. Without a build engine its
 * sandboxes run DRYDOCK_BASE_IMAGE (or a snapshot of it) and nothing else (even a named image
 * needs drydock's layer); with one, a compose dev container is still refused: its dev service
 * is built, but its services would be containers of the pod this build knows nothing of.
 */
function unbuiltEnvironment(declared: RepoEnvironment, hasBuilds: boolean): string {
  const kept = declared.compose
    ? '; its compose services with it: add --ignore-devcontainer, and declare them under services: in .drydock/config.yaml'
    : '';
  if (hasBuilds) {
    return (
      'builds no compose dev container: its dev service and compose services are not yet built for pods. ' +
      "Name the dev service's Dockerfile with 'drydock repo add <url> --environment dockerfile' or in .drydock/config.yaml" +
      `${kept}, or run the repo on a worker with DRYDOCK_SANDBOX_PROVIDER=docker`
    );
  }
  return (
    'builds no images and runs none but DRYDOCK_BASE_IMAGE (no dev container, Dockerfile, feature or ' +
    "--environment image:<ref>): give the worker a registry its nodes pull from (DRYDOCK_K8S_BUILD_REGISTRY), where its Docker engine's isolated builder pushes the repo's environment, " +
    "or run the repo on that image with 'drydock repo add <url> --environment base' " +
    `(what its environment would install goes in DRYDOCK_BASE_IMAGE, or in setup)${kept}, ` +
    'or on a worker with DRYDOCK_SANDBOX_PROVIDER=docker, whose isolated builder builds it'
  );
}

/** Where the features a snapshot build pulled are kept on this host (sandbox/feature-registry.ts): beside the toolchains. */
function featuresRoot(deps: Pick<SandboxDeps, 'toolsRoot' | 'egressRoot'>): string {
  return path.join(deps.toolsRoot ?? path.join(path.dirname(deps.egressRoot), 'tools'), 'features');
}

/** `fetchImage` brings the images the environment names onto the host, `features` its features (a snapshot build may pull both). */
async function environmentOf(
  deps: EnvironmentDeps,
  { mirror, commit }: { mirror: string; commit: string },
  repo: string,
  { fetchImage, fetchBase, features }: { fetchImage: ImageFetcher; fetchBase: ImageFetcher; features: FeatureSource },
  egress: EgressRule[],
): Promise<SandboxEnvironment> {
  const toolchains = toolchainsOf(deps);
  const read = (file: string) =>
    readAtCommit(mirror, commit, ['cat-file', 'blob', `${commit}:${file}`]).catch(() => undefined);
  const file = await readRepoConfig(mirror, commit);
  if (!file.ok) throw new EnvironmentError(file.problems.join('; '));
  const operator = await deps.snapshots.repo(repo);
  const {
    environment: declared,
    stack,
    notes,
  } = await declaredStack(
    read,
    await declaredEnvironment(operator, file.config, read),
    file.config,
    new RepoTree(mirror, commit),
  );
  // Read as Compose reads them, but maybe not what the repo's developers meant: said, never taken in silence.
  for (const note of notes) deps.log.warn({ repo, commit }, note);
  refuseUnsupported(deps.sandboxes, declared, stack);
  const settings = buildSettings(deps, repo, egress);
  // Each compose service's build: in the isolated builder, named by its content (sandbox/service-build.ts).
  stack.services = await builtServices(deps.sandboxes, { mirror, commit }, stack.services, repo, fetchImage, settings);
  const rootSetup = rootSetupOf(file.config);
  if (rootSetup && !buildsEnvironments(deps.sandboxes)) {
    throw new EnvironmentError(
      `${REPO_CONFIG_FILE}: setup.root needs the isolated builder, and the ${deps.sandboxes.name} sandbox provider builds no images; ` +
        'install the packages in the image the operator gives (DRYDOCK_BASE_IMAGE) instead, or give the worker a registry its nodes pull from (DRYDOCK_K8S_BUILD_REGISTRY)',
    );
  }
  // Built where the provider builds: itself, or its build engine, whose result is then published to its sandboxes.
  const builds = deps.sandboxes.environmentBuilds;
  const {
    tag: built,
    featureLifecycles,
    featureStarts,
  } = declared || rootSetup
    ? await ensureEnvironmentImage(
        builds?.engine ?? deps.sandboxes,
        { mirror, commit },
        declared,
        repoSlug(repo),
        fetchBase,
        {
          ...settings,
          baseImage: deps.baseImage,
          ...(rootSetup ? { rootSetup } : {}),
          features,
          // Beside the tools folder, as toolchainsOf places it: base archives kept between builds.
          cacheDir: path.join(path.dirname(deps.egressRoot), 'builder-cache'),
          owner: `environment ${repoSlug(repo)}`,
          log: deps.log,
        },
      )
    : { tag: deps.baseImage, featureLifecycles: [], featureStarts: [] };
  if (featureStarts.length && !deps.sandboxes.capabilities.lateCompanions)
    throw new EnvironmentError(
      `the dev container's features ${featureStarts.map((f) => f.feature).join(', ')} have a postStartCommand, run ` +
        `at each start of a sandbox in a companion container, which the ${deps.sandboxes.name} sandbox provider ` +
        'cannot add to a running sandbox: remove those features, or run the repo on a Docker worker',
    );
  const image = builds && built !== deps.baseImage ? await builds.publish(built) : built;
  const packageJson = await read('package.json');
  const request = nodeRequestOf({ nvmrc: await read('.nvmrc'), nodeVersion: await read('.node-version'), packageJson });
  const mounts = [{ source: await toolchains.helpers(), target: HELPERS_MOUNT }];
  const env: string[] = [];
  let node: string | undefined;
  const own = await imagePath(deps, image);
  // The helpers' git comes last: an image with its own git keeps using it; then drydock-child.
  const last = `${HELPERS_GIT}:${HELPERS_COMMANDS}`;
  let searchPath = `${own}:${last}`;
  // A packageManager alone gets corepack (on a Node.js of drydock's choice) after the image's own tools.
  // A musl image (Alpine) cannot run the official builds: it brings its own Node.js.
  const corepackOnly = !request && usesPackageManager(packageJson);
  if ((request || corepackOnly) && !(await isMuslImage(deps, image))) {
    const dir = await toolchains.node(request ?? { range: HELPER_NODE_VERSION, source: 'packageManager' });
    node = path.basename(dir).replace(/^node-|-corepack-.*$/g, '');
    mounts.push({ source: dir, target: NODE_MOUNT });
    searchPath = corepackOnly ? `${own}:${NODE_MOUNT}/bin:${last}` : `${NODE_MOUNT}/bin:${searchPath}`;
    env.push(
      `COREPACK_HOME=${COREPACK_HOME}`,
      'COREPACK_ENABLE_DOWNLOAD_PROMPT=0',
      'COREPACK_ENABLE_AUTO_PIN=0',
      // corepack fetches with Node's own fetch, which takes HTTPS_PROXY (the egress forwarder) only when told.
      'NODE_USE_ENV_PROXY=1',
    );
  }
  env.unshift(`PATH=${searchPath}`);
  // The dev container's remoteEnv last: its ${containerEnv:NAME} reads the image's environment and drydock's.
  if (declared?.remoteEnv) env.push(...remoteEnvIn(declared.remoteEnv, [...(await imageEnv(deps, image)), ...env]));
  return {
    image,
    mounts,
    env,
    ...setupsOf(declared, featureLifecycles),
    ...(featureStarts.length ? { featureStarts } : {}),
    ...(image !== deps.baseImage ? { imageFrom: declared?.source ?? REPO_CONFIG_FILE } : {}),
    ...(node ? { node } : {}),
    key: `${image}${node ? ` node ${node}` : ''}${stack.services.length ? ` services ${JSON.stringify(stack.services)}` : ''}`,
    stack,
    ...(notes.length ? { notes } : {}),
  };
}

/**
 * The dev container's setup with its features' lifecycle commands (each
 * hook's features' first, in install order, as the Dev Container CLI runs
 * them), and the features' alone.
 */
export function setupsOf(
  declared: Pick<RepoEnvironment, 'lifecycle'> | undefined,
  featureLifecycles: Lifecycle[],
): Pick<SandboxEnvironment, 'setup' | 'featureSetup'> {
  const featureSetup = lifecycleScript(featureLifecycles);
  const setup = declared?.lifecycle && lifecycleScript([...featureLifecycles, declared.lifecycle]);
  return { ...(setup ? { setup } : {}), ...(featureSetup ? { featureSetup } : {}) };
}

/** The isolated builder's settings for a repo's builds (its environment, its services' images). */
export function buildSettings(deps: EnvironmentDeps, repo: string, egress: EgressRule[]): EnvironmentBuild {
  return {
    builderImage: deps.builderImage ?? (() => ensureBuilderImage()),
    // The operator's rules for the repo, and what the build's package managers need.
    egress: [...egress, ...PACKAGE_REGISTRIES],
    ...(deps.extraCaCerts ? { extraCaCerts: deps.extraCaCerts } : {}),
    ...(deps.buildTimeoutMs ? { limits: { timeoutMs: deps.buildTimeoutMs } } : {}),
    owner: `environment ${repoSlug(repo)}`,
    log: deps.log,
    onProgress: reportBuilding(),
  };
}

/** A build's progress in the running activity's heartbeats (`drydock snapshot build` shows it). */
function reportBuilding(): NonNullable<EnvironmentBuild['onProgress']> {
  const report = progressReporter();
  return (building) => report({ building });
}

/**
 * The environment a repo's sandboxes run in (workflows/rules/environment-choice.ts):
 * the operator's choice, then the repo file's, then its dev container; none: the base image (undefined).
 */
export async function declaredEnvironment(
  operator: OperatorEnvironment | undefined,
  config: RepoConfig | undefined,
  read: (file: string) => Promise<string | undefined>,
): Promise<RepoEnvironment | undefined> {
  const texts = new Map<string, string>();
  for (const file of environmentFiles(config?.environment)) {
    const text = await read(file);
    if (text !== undefined) texts.set(file, text);
  }
  const chosen = chooseEnvironment(operator, config?.environment, new Set(texts.keys()));
  if (!chosen.ok) throw new EnvironmentError(chosen.refusal);
  const { choice } = chosen;
  if (choice.kind === 'base' || choice.kind === 'image') {
    const compose = keptCompose(operator, config, texts);
    const image = choice.kind === 'image' ? { image: choice.image } : {};
    if (compose) return { source: choice.by, ...image, args: {}, containerEnv: {}, compose };
    return choice.kind === 'image' ? { source: choice.by, image: choice.image, args: {}, containerEnv: {} } : undefined;
  }
  if (choice.kind === 'dockerfile') return dockerfileEnvironment(choice.file, choice.context);
  return parseDevcontainer(texts.get(choice.file)!, choice.file);
}

/**
 * When the operator's `--environment base|image:<ref>` replaces a compose dev
 * container, its compose files still declare the repo's services (a
 * database…): they are kept, the dev service's image is the operator's. Not
 * with `--ignore-devcontainer`, which reads nothing of the dev container.
 */
function keptCompose(
  operator: OperatorEnvironment | undefined,
  config: RepoConfig | undefined,
  texts: Map<string, string>,
): RepoEnvironment['compose'] {
  if (
    operator?.ignoreDevcontainer ||
    !(operator?.environment === 'base' || operator?.environment?.startsWith('image:'))
  )
    return undefined;
  const file = environmentFiles(config?.environment)[0];
  const text = texts.get(file);
  const compose = text === undefined ? undefined : devcontainerCompose(text, file);
  return compose && { ...compose, servicesOnly: true };
}

function usesPackageManager(packageJson: string | undefined): boolean {
  try {
    return typeof (JSON.parse(packageJson ?? '{}') as { packageManager?: unknown }).packageManager === 'string';
  } catch {
    return false;
  }
}

/** The image's own environment ("NAME=value"). */
async function imageEnv({ sandboxes }: Pick<SandboxDeps, 'sandboxes'>, image: string): Promise<string[]> {
  const info = await imageStoreOf(sandboxes).image(image);
  if (!info) throw new Error(`no such image: ${image}`);
  return info.env;
}

/** The image's own PATH (the declared Node.js goes before it). */
async function imagePath(deps: Pick<SandboxDeps, 'sandboxes'>, image: string): Promise<string> {
  const found = (await imageEnv(deps, image)).find((e) => e.startsWith('PATH='));
  return found?.slice(5) ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
}

const musl = new Map<string, boolean>();
/** Whether an image's programs link musl (Alpine): its loader is there. Asked once per image and process. */
async function isMuslImage({ sandboxes }: Pick<SandboxDeps, 'sandboxes'>, image: string): Promise<boolean> {
  const id = (await imageStoreOf(sandboxes).image(image))?.id ?? image;
  let known = musl.get(id);
  if (known === undefined) {
    known = await imageStoreOf(sandboxes).imageHasFile(id, '/lib/ld-musl-x86_64.so.1');
    musl.set(id, known);
  }
  return known;
}

/**
 * Removes this host's images of a repo's environment (and of its services'
 * builds) that a newer one replaced: made before the newest ready snapshot's
 * build started, and used neither by a snapshot still kept (its environment,
 * the image that one is built FROM, its services' images) nor by a
 * container (removeImage refuses; the reaper tries again). Images made since
 * (a build running or failed) stay: nothing has replaced them yet. Returns
 * the images removed.
 */
export async function collectEnvironmentImages(
  { sandboxes, snapshots, hostId, log }: Pick<SandboxDeps, 'sandboxes' | 'snapshots' | 'hostId' | 'log'>,
  repo: string,
): Promise<string[]> {
  const kept = await snapshots.ready(repo, hostId);
  if (!kept.length) return [];
  const used = new Set<string>();
  for (const row of kept) {
    const labels = (await imageStoreOf(sandboxes).image(row.image!))?.labels;
    // Its services' images built from the repo (sandbox/service-build.ts) are in use too.
    for (const service of servicesOf(row.image!, labels)) used.add(service.image);
    const environment = labels?.[SNAPSHOT_LABELS.environment];
    if (!environment) continue;
    used.add(environment);
    const from = (await imageStoreOf(sandboxes).image(environment))?.labels[ENVIRONMENT_FROM_LABEL];
    if (from) used.add(from);
  }
  const replacedBefore = Date.parse(kept[0].startedAt);
  const names = environmentImageNames(repoSlug(repo));
  const images = await imageStoreOf(sandboxes).images([names.env, names.repo, serviceImageName(repoSlug(repo))]);
  const removed: string[] = [];
  // drydock's layers first: the repo's own image goes once no layer of it is left.
  for (const image of images.sort((a, b) => Number(isRepoImage(a, names.repo)) - Number(isRepoImage(b, names.repo)))) {
    if (image.createdMs >= replacedBefore) continue;
    for (const tag of image.tags.filter((t) => !used.has(t))) {
      const outcome = await imageStoreOf(sandboxes).removeImage(tag);
      if (outcome === 'removed') removed.push(tag);
      else if (outcome === 'in_use') log.info({ repo, image: tag }, 'old environment image still in use: kept for now');
    }
  }
  if (removed.length) log.info({ repo, removed, host: hostId }, 'old environment images removed');
  return removed;
}

const isRepoImage = (image: ImageSummary, name: string) => image.tags.some((t) => t.startsWith(`${name}:`));

/** A snapshot's recorded services; a record drydock did not write names no image in use. */
function servicesOf(image: string, labels: Record<string, string> | undefined) {
  try {
    return recordedServices(image, labels);
  } catch {
    return [];
  }
}

const caches = new Map<string, Toolchains>();
/** The host's toolchain cache (one per folder, so the registry's version list is asked once). */
export function toolchainsOf(deps: Pick<SandboxDeps, 'toolsRoot' | 'egressRoot' | 'log'>): Toolchains {
  const root = deps.toolsRoot ?? path.join(path.dirname(deps.egressRoot), 'tools');
  let cache = caches.get(root);
  if (!cache) caches.set(root, (cache = new Toolchains(root, deps.log)));
  return cache;
}
