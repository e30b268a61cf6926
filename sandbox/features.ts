/**
 * Dev container features (containers.dev/implementors/features) as drydock
 * installs them: read from devcontainer.json's `features`, each an OCI
 * reference on a registry the operator allows (fetched by the worker:
 * sandbox/feature-registry.ts) or a folder of the repo's .devcontainer
 * (`./myfeature`), then installed in the isolated builder's layer
 * (sandbox/repo-image.ts) the way the spec says: in install order
 * (`dependsOn`, `installsAfter`, `overrideFeatureInstallOrder`), each folder
 * copied in and its `install.sh` run as root with the options as upper-cased
 * environment variables (defaults from devcontainer-feature.json) and
 * `_REMOTE_USER`, `_CONTAINER_USER` and their homes; its `containerEnv` as
 * ENV; its onCreateCommand, updateContentCommand and postCreateCommand
 * become setup, before the dev container's own (sandbox/lifecycle.ts); its
 * postStartCommand runs at each start of a session's sandbox, before the
 * first step and the dev container's own app (sandbox/activities/agent-app.ts).
 * What a feature asks of the running container (privileged, capAdd, mounts,
 * an entrypoint) is refused, naming the feature and the field. Pure: every
 * function here is a decision over text.
 */
import path from 'node:path';
import { z } from 'zod';
import { parseImageReference, type ImageReference } from '../workflows/rules/images';
import { commandShell, lifecycleCommand, lifecycleOf, type Lifecycle } from './lifecycle';

/** A feature as devcontainer.json asks for it. */
export interface FeatureRequest {
  /** The key as written: `ghcr.io/devcontainers/features/node:1` or `./myfeature`. */
  key: string;
  /** Where it is written, for messages: `.devcontainer/devcontainer.json: features["…"]`. */
  field: string;
  /** The options given (a version string is the `version` option). */
  options: Record<string, string | boolean>;
  /** A registry feature's reference. */
  ref?: ImageReference;
  /** A local feature's folder, a repo path. */
  folder?: string;
}

/** An option a feature declares in its devcontainer-feature.json. */
const optionSchema = z.object({
  type: z.enum(['string', 'boolean']),
  default: z.union([z.string(), z.boolean()]).optional(),
  enum: z.array(z.string()).optional(),
  proposals: z.array(z.string()).optional(),
  description: z.string().optional(),
});

const metadataSchema = z.object({
  id: z.string().min(1),
  version: z.string().optional(),
  options: z.record(z.string(), optionSchema).optional(),
  containerEnv: z
    .record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name'), z.string())
    .optional(),
  installsAfter: z.array(z.string()).optional(),
  dependsOn: z.record(z.string(), z.unknown()).optional(),
  privileged: z.boolean().optional(),
  capAdd: z.array(z.string()).optional(),
  securityOpt: z.array(z.string()).optional(),
  mounts: z.array(z.unknown()).optional(),
  entrypoint: z.string().optional(),
  onCreateCommand: lifecycleCommand.optional(),
  updateContentCommand: lifecycleCommand.optional(),
  postCreateCommand: lifecycleCommand.optional(),
  postStartCommand: lifecycleCommand.optional(),
  // Run when an editor attaches, which nothing does to a sandbox: not run, as devcontainer.json's own.
  postAttachCommand: lifecycleCommand.optional(),
});

/** What a feature's devcontainer-feature.json says, as drydock uses it. */
export interface FeatureMetadata {
  id: string;
  version?: string;
  options: Record<string, z.infer<typeof optionSchema>>;
  containerEnv: Record<string, string>;
  installsAfter: string[];
  dependsOn: string[];
  /** Its onCreateCommand, updateContentCommand and postCreateCommand, as shell: run as setup (sandbox/lifecycle.ts). */
  lifecycle: Lifecycle;
  /** Its postStartCommand, as shell: run at each start of a sandbox (FeatureStart). */
  postStart?: string;
}

/** A feature's postStartCommand as a sandbox's start runs it (sandbox/activities/agent-app.ts): `feature` is its key in devcontainer.json. */
export interface FeatureStart {
  feature: string;
  command: string;
}

/** A feature ready to install: what was asked, what it declares, and its folder's name in the build. */
export interface ResolvedFeature {
  request: FeatureRequest;
  metadata: FeatureMetadata;
  /** Pinned content: the layer's digest (registry) or the folder's git tree (local). */
  pinned: string;
}

/** Why a dev container's features cannot be installed: the message names the field and what to do. */
export class FeatureError extends Error {
  override name = 'FeatureError';
}

/** Features' keys and options as devcontainer.json gives them (`dir`: the folder devcontainer.json is in). */
export function featureRequests(features: Record<string, unknown>, source: string, dir: string): FeatureRequest[] {
  return Object.entries(features).map(([key, value]) => {
    const field = `${source}: features["${key}"]`;
    const options = optionsOf(value, field);
    if (key.startsWith('./') || key.startsWith('../')) {
      const folder = path.posix.normalize(path.posix.join(dir, key)).replace(/(.)\/+$/, '$1'); // ./tool/ is ./tool
      if (!isFolderInside(folder, dir))
        throw new FeatureError(`${field}: a local feature is a folder inside ${dir}/ (the spec's rule)`);
      return { key, field, options, folder };
    }
    const named = legacyFeature(key) ?? key.toLowerCase(); // the CLI's reading: a reference downcased whole
    if (/^https?:\/\//.test(key) || !named.includes('/'))
      throw new FeatureError(
        `${field}: drydock installs features from an OCI registry (like ghcr.io/devcontainers/features/node:1) ` +
          `or a folder of ${dir}/ (./name); this form (a tarball URL or a legacy short id) is not supported: ` +
          `name the feature by its OCI reference${key.includes('/') ? '' : ` (ghcr.io/devcontainers/features/${key}:1 for most)`}`,
      );
    const runtime = NEEDS_RUNTIME[/^ghcr\.io\/devcontainers\/features\/([\w-]+)(?:[:@]|$)/.exec(named)?.[1] ?? ''];
    if (runtime)
      throw new FeatureError(
        `${field}: the feature asks for ${runtime} (its devcontainer-feature.json), which a sandbox never gets: ` +
          'remove it (a sandbox builds no containers; its services are declared in a compose file)',
      );
    const ref = parseImageReference(named);
    if ('problem' in ref) throw new FeatureError(`${field}: ${ref.problem}`);
    return { key, field, options, ref: { ...ref, ...(ref.tag || ref.digest ? {} : { tag: 'latest' }) } };
  });
}

/**
 * The short ids of the features that came before OCI references, as the Dev
 * Container CLI still reads them (getBackwardCompatibleFeatureId): each is
 * `ghcr.io/devcontainers/features/<id>:1`, `golang` renamed `go`.
 */
const LEGACY_FEATURES = new Set(
  (
    'aws-cli azure-cli common desktop-lite docker-in-docker docker-from-docker dotnet git git-lfs github-cli java ' +
    'kubectl-helm-minikube node powershell python ruby rust sshd terraform'
  ).split(' '),
);
const RENAMED_FEATURES: Record<string, string> = { golang: 'go' };

/** A legacy short id (`github-cli`, `golang`) as the OCI reference the CLI reads it as, else undefined. */
function legacyFeature(key: string): string | undefined {
  const id = RENAMED_FEATURES[key] ?? (LEGACY_FEATURES.has(key) ? key : undefined);
  return id === undefined ? undefined : `ghcr.io/devcontainers/features/${id}:1`;
}

/**
 * Features of ghcr.io/devcontainers/features whose devcontainer-feature.json
 * asks for what a sandbox never gets: refused when read, not once fetched
 * (parseFeatureMetadata would refuse them for the same fields).
 */
const NEEDS_RUNTIME: Record<string, string> = {
  'docker-in-docker': 'privileged',
  'docker-outside-of-docker': "mounts (the host's Docker socket)",
  'docker-from-docker': "mounts (the host's Docker socket)",
};

/**
 * Whether `folder` (normalized, relative to the repo) is a folder below `dir`:
 * for a root `.devcontainer.json` `dir` is `.`, whose folders start with no `./`.
 */
function isFolderInside(folder: string, dir: string): boolean {
  if (folder === '..' || folder.startsWith('../')) return false;
  return dir === '.' ? folder !== '.' : folder.startsWith(`${dir}/`);
}

function optionsOf(value: unknown, field: string): Record<string, string | boolean> {
  if (typeof value === 'string') return { version: value };
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw new FeatureError(`${field}: give the feature's options as an object (or a version string)`);
  const out: Record<string, string | boolean> = {};
  const scalar = (x: unknown): x is string | number | boolean =>
    typeof x === 'number' || typeof x === 'string' || typeof x === 'boolean';
  for (const [name, given] of Object.entries(value)) {
    // A list is what the Dev Container CLI writes of it into the feature's environment: its items joined by ",".
    const v: unknown = Array.isArray(given) && given.every(scalar) ? given.join(',') : given;
    if (!scalar(v)) throw new FeatureError(`${field}.${name}: an option's value is a string or a boolean`);
    // Defined, not assigned: an option named __proto__ stays an option (and is refused as undeclared).
    Object.defineProperty(out, name, {
      value: typeof v === 'number' ? String(v) : v,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out;
}

/** The fields of devcontainer-feature.json that change how the container runs, which a sandbox never does. */
const RUNTIME_FIELDS = ['privileged', 'capAdd', 'securityOpt', 'mounts', 'entrypoint'] as const;
/** A feature's lifecycle command, as shell, at most: setup and the sandbox's start keep it in the snapshot's record and the workflow's history. */
const LIFECYCLE_MAX_BYTES = 16 * 1024;

/** Reads a feature's devcontainer-feature.json; what drydock cannot honour is refused, naming it. */
export function parseFeatureMetadata(text: string | undefined, field: string): FeatureMetadata {
  if (text === undefined) throw new FeatureError(`${field}: the feature has no devcontainer-feature.json`);
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (err) {
    throw new FeatureError(`${field}: its devcontainer-feature.json is not JSON (${(err as Error).message})`);
  }
  const parsed = metadataSchema.safeParse(data);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new FeatureError(
      `${field}: its devcontainer-feature.json: ${issue.path.join('.') || '(file)'}: ${issue.message}`,
    );
  }
  const m = parsed.data;
  const runtime = RUNTIME_FIELDS.filter((f) => m[f] !== undefined && m[f] !== false && [m[f]].flat().length > 0);
  if (runtime.length)
    throw new FeatureError(
      `${field}: the feature asks for ${runtime.join(', ')} (devcontainer-feature.json), which changes how the ` +
        'container runs; a sandbox is never privileged and mounts nothing of the host: remove the feature, or choose ' +
        'one that installs without it',
    );
  const lifecycle = lifecycleOf(m);
  const postStart = m.postStartCommand === undefined ? undefined : commandShell(m.postStartCommand);
  const hooks = { ...lifecycle, ...(postStart !== undefined ? { postStartCommand: postStart } : {}) };
  const long = Object.entries(hooks).find(([, shell]) => Buffer.byteLength(shell) > LIFECYCLE_MAX_BYTES);
  if (long)
    throw new FeatureError(
      `${field}: its ${long[0]} (devcontainer-feature.json) is ${Buffer.byteLength(long[1])} bytes; a lifecycle command ` +
        `is part of the snapshot's record and the workflow's history, at most ${LIFECYCLE_MAX_BYTES / 1024} KiB: ` +
        'remove the feature, or use one that puts its work in install.sh',
    );
  return {
    id: m.id,
    ...(m.version ? { version: m.version } : {}),
    options: m.options ?? {},
    containerEnv: m.containerEnv ?? {},
    installsAfter: m.installsAfter ?? [],
    dependsOn: Object.keys(m.dependsOn ?? {}),
    lifecycle,
    ...(postStart !== undefined ? { postStart } : {}),
  };
}

/** An option's environment variable, as the spec names it. */
export function optionEnvName(option: string): string {
  return option
    .replace(/[^\w_]/g, '_')
    .replace(/^[\d_]+/g, '_')
    .toUpperCase();
}

/**
 * The options of one feature as environment variables: the declared
 * defaults, then the values given. An option the feature does not declare,
 * or a value its type or enum refuses, is refused naming the feature and option.
 */
export function optionEnv(feature: Pick<ResolvedFeature, 'request' | 'metadata'>): Record<string, string> {
  const { request, metadata } = feature;
  const env: Record<string, string> = {};
  for (const [name, declared] of Object.entries(metadata.options)) {
    if (declared.default !== undefined) env[optionEnvName(name)] = String(declared.default);
  }
  for (const [name, value] of Object.entries(request.options)) {
    // Its own: `constructor` or `toString` is no declared option (an object's built-ins are not the feature's).
    const declared = Object.hasOwn(metadata.options, name) ? metadata.options[name] : undefined;
    const declaredNames = Object.keys(metadata.options);
    if (!declared)
      throw new FeatureError(
        `${request.field}.${name}: the feature ${metadata.id} has no option "${name}" ` +
          `(it declares: ${declaredNames.join(', ') || 'none'}): remove it or use one of those`,
      );
    const text = String(value);
    if (declared.type === 'boolean' && text !== 'true' && text !== 'false')
      throw new FeatureError(`${request.field}.${name}: "${text}" is not a boolean (true or false)`);
    if (declared.enum && !declared.enum.includes(text))
      throw new FeatureError(
        `${request.field}.${name}: "${text}" is not one of the values the feature allows (${declared.enum.join(', ')})`,
      );
    env[optionEnvName(name)] = text;
  }
  return env;
}

/** A reference without its tag or digest: how features name each other in dependsOn and installsAfter. */
function baseId(key: string): string {
  const ref = parseImageReference(key);
  if ('problem' in ref) return key.replace(/\/+$/, '');
  return `${ref.registry}/${ref.repository}`;
}

function idOf(f: ResolvedFeature): string {
  return f.request.ref ? `${f.request.ref.registry}/${f.request.ref.repository}` : f.request.key;
}

/**
 * The order to install in (the spec's, minimally): a feature after those it
 * `dependsOn` (each must be listed in the dev container too) and after the
 * listed ones it `installsAfter`; among those free to go, the ones
 * `overrideFeatureInstallOrder` names first, then as written.
 */
export function installOrder(
  features: ResolvedFeature[],
  override: string[] = [],
  source = 'devcontainer.json',
): ResolvedFeature[] {
  const ids = features.map(idOf);
  const after = features.map((f) => {
    const edges = new Set<number>();
    for (const dep of f.metadata.dependsOn) {
      const at = ids.indexOf(baseId(dep));
      if (at < 0)
        throw new FeatureError(
          `${f.request.field}: the feature depends on ${dep} (dependsOn), which the dev container does not list: ` +
            `add "${dep}": {} to features`,
        );
      edges.add(at);
    }
    for (const soft of f.metadata.installsAfter) {
      const at = ids.indexOf(baseId(soft));
      if (at >= 0) edges.add(at);
    }
    return edges;
  });
  const rank = (i: number) => {
    const at = override.findIndex((o) => baseId(o) === ids[i] || o === features[i].request.key);
    return at < 0 ? override.length : at;
  };
  const done: number[] = [];
  while (done.length < features.length) {
    const ready = features
      .map((_, i) => i)
      .filter((i) => !done.includes(i) && [...after[i]].every((d) => done.includes(d) || d === i));
    if (!ready.length) {
      const stuck = features.filter((_, i) => !done.includes(i)).map((f) => f.request.key);
      throw new FeatureError(
        `${source}: features ${stuck.join(', ')} wait for each other (dependsOn/installsAfter): no order installs them`,
      );
    }
    ready.sort((a, b) => rank(a) - rank(b) || a - b);
    done.push(ready[0]);
  }
  return done.map((i) => features[i]);
}

/** Where the features' folders are in the build's layer context, and in the image while they install. */
export const FEATURES_CONTEXT = 'features';
const FEATURES_IN_IMAGE = '/tmp/drydock-features';

/** The uid every sandbox runs as (sandbox/repo-image.ts). */
const SANDBOX_UID = 1000;

/** A value as a single-quoted shell word. */
function shellQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

/**
 * The environment file a feature's install.sh is run with (the spec's
 * devcontainer-features.env): its options, then the users (the remote
 * user, when the dev container names none, is the image's user of the
 * sandbox's uid, else root). Names and homes are read from the image's
 * /etc/passwd while it installs.
 */
export function featureEnvFile(
  feature: ResolvedFeature,
  users: { remoteUser?: string; containerUser: string },
): string {
  const home = (variable: string) =>
    `$(awk -F: -v u="$${variable}" '$1 == u { print $6 }' /etc/passwd 2>/dev/null | head -n 1)`;
  const lines = Object.entries(optionEnv(feature)).map(([k, v]) => `${k}=${shellQuote(v)}`);
  // No remoteUser: the image's user of the sandbox's uid (node's "node", the dev containers' "vscode"), else root.
  const sandboxUser = `$(awk -F: '$3 == ${SANDBOX_UID} { print $1 }' /etc/passwd 2>/dev/null | head -n 1)`;
  lines.push(
    users.remoteUser
      ? `_REMOTE_USER=${shellQuote(users.remoteUser)}`
      : `_REMOTE_USER="${sandboxUser}"; _REMOTE_USER="\${_REMOTE_USER:-root}"`,
    `_CONTAINER_USER=${shellQuote(users.containerUser)}`,
    `_REMOTE_USER_HOME="${home('_REMOTE_USER')}"`,
    `_CONTAINER_USER_HOME="${home('_CONTAINER_USER')}"`,
  );
  return lines.map((l) => `${l}\n`).join('');
}

/**
 * The Dockerfile steps that install `ordered` (each feature's folder is
 * `features/<index>/` of the layer's context, holding its
 * devcontainer-features.env): as root, COPY, ENV of its containerEnv, RUN
 * install.sh; the folders removed at the end.
 */
export function featureSteps(ordered: ResolvedFeature[]): string[] {
  if (!ordered.length) return [];
  const steps = ['USER root'];
  ordered.forEach((feature, i) => {
    const dir = `${FEATURES_IN_IMAGE}/${i}`;
    steps.push(`COPY ${FEATURES_CONTEXT}/${i}/ ${dir}/`);
    for (const [k, v] of Object.entries(feature.metadata.containerEnv)) steps.push(`ENV ${k}=${JSON.stringify(v)}`);
    const run = `cd ${dir} && set -a && . ./devcontainer-features.env && set +a && chmod +x ./install.sh && ./install.sh`;
    steps.push(`RUN ${JSON.stringify(['/bin/sh', '-c', run])}`);
  });
  steps.push(`RUN ${JSON.stringify(['/bin/sh', '-c', `rm -rf ${FEATURES_IN_IMAGE}`])}`);
  return steps;
}
