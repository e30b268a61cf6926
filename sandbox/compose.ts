/**
 * A dev container's compose files (`dockerComposeFile` + `service` +
 * `runServices` in devcontainer.json) as drydock's service specs: the dev
 * container's own service becomes the sandbox's environment (its image or
 * build), every other service that runs a container in the sandbox's network
 * namespace (workflows/services.ts). The files are YAML, read with `yaml`,
 * merged in order as `docker compose -f a -f b` merges them, with the
 * project's `.env` for `${VAR}` and each service's `env_file`
 * (sandbox/compose-variables.ts; a file the repo does not hold is read from
 * the example it commits, `.env.example`…); `profiles` pick what runs. The part of the
 * Compose Specification drydock runs is mapped onto the same declaration as
 * `services:` in .drydock/config.yaml and validated by the same schema:
 *
 * - files and folders of the repo a service mounts, its `secrets` and
 *   `configs` (from repo files, `content` or .env) are copied in read-only
 *   (ServiceSpec.files; sandbox/repo-files.ts confines each in the repo);
 * - `networks` are flattened onto the sandbox's loopback: every service's
 *   name, and its aliases, container_name, hostname and links' aliases,
 *   resolve to 127.0.0.1 in the sandbox and in every service (hostNames);
 * - a service's `build:` (context, dockerfile or dockerfile_inline, args,
 *   target) is built by drydock's isolated builder (sandbox/service-build.ts);
 *   a build field it cannot honour (ssh, secrets, a remote context…) is
 *   refused, naming `services.<name>.build.<field>`;
 * - each service is reached at its container port (where Compose would
 *   publish it means nothing on a sandbox's loopback); two on one port are
 *   refused, naming both;
 * - what drydock cannot honour (a host's folder, two services on one
 *   port, privileges) is refused, naming the file and the field; what
 *   does not matter in a sandbox (restart, labels…) is ignored, and only
 *   what is listed here.
 */
import path from 'node:path';
import { isScalar, parseDocument, visit, type Document } from 'yaml';
import {
  serviceDeclaration,
  serviceName,
  servicesOfConfig,
  type ServiceBuild,
  type ServiceFile,
  type ServiceSpec,
} from '../workflows/services';
import { parseEnvFile, substitute, type Variables } from './compose-variables';
import { linkTargetProblem, sandboxUser, volumeTargetProblem, type RepoLink } from './devcontainer-run';

/** A compose file drydock cannot run: every problem names the file and its field. */
export class ComposeError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join('; '));
    this.name = 'ComposeError';
  }
}

/** The dev container's service: what the sandbox image is made of. */
export interface ComposeDevService {
  image?: string;
  /** Paths relative to the repo's root. */
  dockerfile?: string;
  context?: string;
  args: Record<string, string>;
  /** The Dockerfile's stage to build (`build.target`). */
  target?: string;
  /** Its environment and env_files. */
  environment: Record<string, string>;
  /** Its service name and aliases: they resolve to 127.0.0.1 like the services'. */
  hostNames?: string[];
  /** Targets of its named or anonymous volumes and tmpfs: folders of the sandbox (repo-image.ts volumesOf). */
  volumes?: string[];
  /** Folders and files of the repo it mounts elsewhere: links to their place in /workspace. */
  links?: RepoLink[];
  /**
   * Its own `entrypoint` and `command` (not one that only keeps it running),
   * on the first port it declares: the repo's app; `from` names the field.
   */
  app?: { start: string; port: number; from: 'command' | 'entrypoint' };
}

export interface ComposeEnvironment {
  dev: ComposeDevService;
  services: ServiceSpec[];
  /** What was read as Compose reads it but may not be what the developer meant: a variable with no value, empty. */
  notes: string[];
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Keys of a service that mean nothing in a sandbox (each service is one container on the sandbox's loopback). */
const IGNORED = new Set([
  'restart',
  'labels',
  'domainname',
  'stop_grace_period',
  'stop_signal',
  'profiles',
  'init',
  'logging',
  'tty',
  'stdin_open',
  'platform',
  'pull_policy',
  'shm_size',
  'read_only',
  'tmpfs',
  'ulimits',
  'oom_score_adj',
  // Names it is reached by (hostNamesOf), and networks flattened onto the loopback.
  'container_name',
  'hostname',
  'links',
  // Services and sandboxes run with every capability dropped already.
  'cap_drop',
  // Compose Watch (`docker compose watch`) syncs the developer's edits into a container: a sandbox works in the repo itself.
  'develop',
]);

/** Keys drydock refuses, and what to do instead. */
const REFUSED: Record<string, string> = {
  privileged: 'services run without privileges: remove it',
  cap_add: 'services run without capabilities: remove it',
  devices: 'services get no host devices: remove it',
  security_opt:
    "services run under drydock's security options (no new privileges, Docker's seccomp profile): remove it",
  pid: 'services get no host namespaces: remove it',
  ipc: 'services get no host namespaces: remove it',
  userns_mode: 'services get no host namespaces: remove it',
  uts: 'services get no host namespaces: remove it',
  cgroup_parent: 'drydock places and limits services itself: remove it',
  runtime: 'services use the runtime the sandbox uses: remove it',
  sysctls: 'services cannot change kernel settings: remove it',
  extra_hosts: "services reach nothing but the sandbox's loopback: remove it",
  dns: "services reach nothing but the sandbox's loopback: remove it",
  dns_search: "services reach nothing but the sandbox's loopback: remove it",
  external_links: "services reach nothing but the sandbox's loopback: remove it",
  volumes_from: "services share no volumes: declare the folder in this service's volumes",
  extends: 'write the service out in full',
  deploy: 'only deploy.resources.limits is supported',
};

/** Top-level keys drydock reads (networks: flattened onto the sandbox's loopback). */
const TOP_KNOWN = new Set(['version', 'name', 'volumes', 'services', 'networks', 'secrets', 'configs']);
const TOP_REFUSED: Record<string, string> = {
  include: "list the files in devcontainer.json's dockerComposeFile instead",
};

/** What picks the services: the dev container's own service, and runServices (default: all). */
export interface ComposeOptions {
  devService: string;
  runServices?: string[];
}

/** A file of the repo by its path, or undefined when it is not there. */
export type RepoText = (file: string) => string | undefined;

/**
 * Reads compose `text` (at `file`, a path of the repo) for a dev container
 * whose own service is `devService`; `runServices` (default: all) names the
 * services to run beside it. `files` holds the other files of the repo it may
 * read (the project's .env, env_files), by path.
 */
export function parseCompose(
  text: string,
  file: string,
  opts: ComposeOptions & { files?: Record<string, string> },
): ComposeEnvironment {
  return parseComposeFiles([file], (f) => (f === file ? text : opts.files?.[f]), opts);
}

/**
 * The compose files of a dev container (its `dockerComposeFile`, one or
 * several merged in order, as `docker compose -f a -f b` does), reading every
 * file of the repo they need through `read`: the files themselves, the
 * project's `.env` (beside the first), each running service's env_file.
 */
export async function readCompose(
  files: string[],
  read: (file: string) => Promise<string | undefined>,
  opts: ComposeOptions,
): Promise<ComposeEnvironment> {
  const known = new Map<string, string | undefined>();
  // Which files are read depends on what was read (an env_file's path may come from .env): read until none is new.
  for (;;) {
    const asked = new Set<string>();
    const lookup: RepoText = (f) => {
      if (!known.has(f)) asked.add(f);
      return known.get(f);
    };
    let result: ComposeEnvironment | undefined;
    let failure: unknown;
    try {
      result = parseComposeFiles(files, lookup, opts);
    } catch (err) {
      failure = err;
    }
    if (!asked.size) {
      if (result) return result;
      throw failure;
    }
    for (const f of asked) known.set(f, await read(f));
  }
}

/** parseCompose over several files (the first's folder is the project's, where its .env is). */
export function parseComposeFiles(files: string[], text: RepoText, opts: ComposeOptions): ComposeEnvironment {
  const problems: string[] = [];
  const dir = path.posix.dirname(files[0]);
  const env = withExample(path.posix.join(dir, '.env'), text);
  const variables = env === undefined ? new Map<string, string>() : parseEnvFile(env.text, env.path, problems);
  const notes: string[] = [];
  const model = loadFiles(files, text, variables, { problems, notes, dir });
  if (!model) throw new ComposeError(problems);
  const { services, from } = model;
  const label = files.join(' + ');
  if (!isObj(services[opts.devService])) {
    throw new ComposeError([
      `${label}: services.${opts.devService}: the dev container's service (devcontainer.json "service") is not in the file`,
    ]);
  }
  for (const name of opts.runServices ?? []) {
    if (!isObj(services[name])) problems.push(`${label}: services.${name}: named in runServices but not in the file`);
  }
  const run = runningServices(services, opts, activeProfiles(variables));
  const context: ServiceContext = { variables, text, top: model.top, problems, notes, dir };
  const dev = devServiceOf(
    services[opts.devService] as Obj,
    from[opts.devService],
    `services.${opts.devService}`,
    context,
  );
  const declarations: Record<string, Declared> = {};
  for (const name of run.filter((n) => n !== opts.devService)) {
    const field = `services.${name}`;
    const declared = declarationOf(services[name] as Obj, from[name], field, name, context);
    declarations[name] = { ...declared, file: from[name] };
  }
  const specs = validated(declarations, problems, {
    declared: new Set(Object.keys(services)),
    running: new Set(run.filter((n) => n !== opts.devService)),
  });
  const aliases = hostNamesOf(services, run, problems, label);
  const devListening = devPorts(services[opts.devService] as Obj, opts.devService, from[opts.devService]);
  problems.push(...portClashes([devListening, ...specs.map((s) => ({ ...s, file: declarations[s.name].file }))]));
  for (const spec of specs) {
    const names = aliases.get(spec.name) ?? [];
    if (names.length) spec.hostNames = names;
  }
  if (problems.length) throw new ComposeError(problems);
  return {
    dev: { ...dev, hostNames: [opts.devService, ...(aliases.get(opts.devService) ?? [])] },
    services: specs,
    notes,
  };
}

/** A service as read from the files: its declaration (.drydock/config.yaml's form), files it mounts, its build. */
interface Declared {
  declaration: Obj;
  file: string;
  files: ServiceFile[];
  build?: ServiceBuild;
}

/** The top-level definitions a service may name: secrets and configs (by name). */
interface TopLevel {
  secrets: Obj;
  configs: Obj;
}

/** What reading a service needs beside it. */
interface ServiceContext {
  variables: Variables;
  text: RepoText;
  top: TopLevel;
  problems: string[];
  notes: string[];
  /** The project's folder: the first file's, which every file's relative paths start from (Compose's rule). */
  dir: string;
}

/**
 * The files parsed, substituted, checked at the top level and merged in order
 * (Compose's merge: maps by key, `command`/`entrypoint` replaced, volumes by
 * target, other lists appended), each service's paths made the repo's, and
 * the file each service first came from; undefined when a file cannot be read.
 */
function loadFiles(
  files: string[],
  text: RepoText,
  variables: Variables,
  { problems, notes, dir }: { problems: string[]; notes: string[]; dir: string },
) {
  const merged: Obj = {};
  const from: Record<string, string> = {};
  for (const file of files) {
    const source = text(file);
    if (source === undefined) {
      problems.push(`${file}: not in the repository (named in dockerComposeFile)`);
      return undefined;
    }
    const doc = parseDocument(source, { uniqueKeys: true, merge: true });
    if (doc.errors.length) {
      problems.push(`${file}: not valid YAML (${doc.errors[0].message.split('\n')[0]})`);
      return undefined;
    }
    octalModes(doc);
    const unset = (name: string, field: string) => notes.push(unsetNote(field, `\${${name}}`));
    const data = interpolate(containerPortsOnly(doc.toJS({ maxAliasCount: 100 })), file, [], variables, {
      problems,
      unset,
    });
    if (!isObj(data) || !isObj(data.services)) {
      problems.push(`${file}: services: a map of services is required`);
      return undefined;
    }
    checkTopLevel(data, file, problems);
    for (const [name, service] of Object.entries(data.services)) {
      if (!isObj(service)) continue;
      from[name] ??= file;
      (data.services as Obj)[name] = withRepoPaths(service, dir, file, `services.${name}`, problems);
    }
    for (const kind of ['secrets', 'configs'] as const) {
      for (const [name, def] of Object.entries(isObj(data[kind]) ? data[kind] : {})) {
        if (isObj(def) && typeof def.file === 'string') {
          const repoPath = repoRelative(dir, def.file, file, `${kind}.${name}.file`, problems);
          (data[kind] as Obj)[name] = { ...def, file: repoPath, declaredIn: file };
        } else if (isObj(def)) (data[kind] as Obj)[name] = { ...def, declaredIn: file };
      }
    }
    mergeInto(merged, data);
  }
  const services = merged.services as Obj;
  const top = {
    secrets: isObj(merged.secrets) ? merged.secrets : {},
    configs: isObj(merged.configs) ? merged.configs : {},
  };
  return { services, from, top };
}

/** A `mode: 0440` as Compose means it (octal): YAML 1.2 would read the number 440. */
function octalModes(doc: Document) {
  visit(doc, {
    Pair(_, pair) {
      const { key, value } = pair;
      if (isScalar(key) && key.value === 'mode' && isScalar(value) && /^0[0-7]+$/.test(String(value.source ?? '')))
        value.value = parseInt(String(value.source), 8);
    },
  });
}

/** Top-level keys: what drydock does with each, problems naming the file and key. */
function checkTopLevel(data: Obj, file: string, problems: string[]) {
  for (const key of Object.keys(data)) {
    if (key.startsWith('x-') || TOP_KNOWN.has(key)) continue;
    problems.push(`${file}: ${key}: ${TOP_REFUSED[key] ?? 'not supported by drydock'}`);
  }
  const volumes = isObj(data.volumes) ? data.volumes : {};
  for (const [name, v] of Object.entries(volumes)) {
    // `name` and `labels` name and mark the engine's volume: a sandbox's is a folder of its own.
    const plain = (o: Obj) => Object.keys(o).every((k) => ['name', 'labels'].includes(k) || o.driver === 'local');
    if (v !== null && !(isObj(v) && plain(v))) {
      problems.push(
        `${file}: volumes.${name}: only plain named volumes are supported (no driver options, no external)`,
      );
    }
  }
  for (const kind of ['secrets', 'configs']) {
    for (const [name, def] of Object.entries(isObj(data[kind]) ? data[kind] : {})) {
      const ok =
        isObj(def) &&
        Object.keys(def).length === 1 &&
        (typeof def.file === 'string' ||
          typeof def.environment === 'string' ||
          (kind === 'configs' && typeof def.content === 'string'));
      if (!ok)
        problems.push(
          `${file}: ${kind}.${name}: give file (a file of the repo)${kind === 'configs' ? ', content' : ''} or environment (a variable of the project's .env); external ones are not on a sandbox's host`,
        );
    }
  }
}

/** Compose's merge of a later file into what the earlier ones declared. */
function mergeInto(into: Obj, data: Obj, at: string[] = []) {
  for (const [key, value] of Object.entries(data)) {
    const here = [...at, key];
    const old = into[key];
    if (isObj(old) && isObj(value)) mergeInto(old, value, here);
    else if (Array.isArray(old) && Array.isArray(value) && !REPLACED_LISTS.has(key)) {
      const seen = new Map(old.map((v) => [listKey(key, v), v] as const));
      for (const v of value) seen.set(listKey(key, v), v);
      into[key] = [...seen.values()];
    } else into[key] = value;
  }
}
/** Lists a later file replaces whole. */
const REPLACED_LISTS = new Set(['command', 'entrypoint', 'test', 'profiles']);
/** What makes two entries of a list the same entry: a volume's target, else the entry itself. */
const listKey = (key: string, v: unknown) =>
  key === 'volumes' && isObj(v) ? `target ${String(v.target)}` : JSON.stringify(v);

/**
 * A service with its lists in the forms a merge needs (environment and
 * depends_on as maps, volumes in the long syntax) and its paths the repo's
 * (relative to `dir`, the compose file's folder).
 */
function withRepoPaths(s: Obj, dir: string, file: string, field: string, problems: string[]): Obj {
  const out: Obj = { ...s };
  if (Array.isArray(s.environment)) {
    out.environment = Object.fromEntries(
      s.environment.map((entry) => {
        const text = String(entry);
        const at = text.indexOf('=');
        return at < 0 ? [text, null] : [text.slice(0, at), text.slice(at + 1)];
      }),
    );
  }
  if (s.env_file !== undefined) {
    const entries = [s.env_file].flat();
    out.env_file = entries.map((e, i) => {
      const entry = isObj(e) ? e : { path: e };
      const where = `${field}.env_file${Array.isArray(s.env_file) ? `.${i}` : ''}`;
      return { ...entry, path: repoRelative(dir, String(entry.path), file, where, problems), field: where, file };
    });
  }
  if (Array.isArray(s.volumes))
    out.volumes = s.volumes.map((v, i) => longVolume(v, dir, file, `${field}.volumes.${i}`));
  return out;
}

/** A volume in the long syntax, a bind's source as a repo path (`repo`) or a host's (`host`). */
function longVolume(v: unknown, dir: string, file: string, field: string): Obj {
  let entry: Obj;
  if (isObj(v)) entry = { ...v };
  else {
    const parts = String(v).split(':');
    if (parts.length === 1) entry = { type: 'volume', target: parts[0] };
    else {
      const bind = /^[./~]/.test(parts[0]) || parts[0].includes('/');
      entry = {
        type: bind ? 'bind' : 'volume',
        source: parts[0],
        target: parts[1],
        ...(parts[2] ? { read_only: parts[2].split(',').includes('ro') } : {}),
      };
    }
  }
  if (entry.type === 'bind' && typeof entry.source === 'string') {
    const source = entry.source;
    const joined = path.posix.normalize(path.posix.join(dir, source)).replace(/(.)\/+$/, '$1'); // ../ is ..
    if (path.posix.isAbsolute(source) || source.startsWith('~')) entry.host = source;
    else if (joined === '..' || joined.startsWith('../')) entry.outside = joined;
    else entry.repo = joined === '.' ? '' : joined;
  }
  return { ...entry, field, file };
}

/** A service's ports, and the file it is declared in (for messages). */
interface Listening {
  name: string;
  file: string;
  ports: number[];
}

/** The ports the dev container's own service declares (its app's), unless it is in another service's namespace. */
function devPorts(s: Obj, name: string, file: string): Listening {
  if (typeof s.network_mode === 'string' && s.network_mode.startsWith('service:')) return { name, file, ports: [] };
  const declared = (['ports', 'expose'] as const).flatMap((key) =>
    s[key] === undefined ? [] : portsOf(s[key], key, () => {}),
  );
  return { name, file, ports: [...new Set(declared)] };
}

/**
 * Services on one container port: in Compose each has an address of its
 * own, on a sandbox's one loopback only the first can listen. A clash is
 * refused at the last service on the port, naming the others.
 */
function portClashes(listening: Listening[]): string[] {
  const on = new Map<number, Listening[]>();
  for (const l of listening) for (const port of l.ports) on.set(port, [...(on.get(port) ?? []), l]);
  return [...on]
    .filter(([, all]) => all.length > 1)
    .map(([port, all]) => {
      const last = all[all.length - 1];
      const others = all.slice(0, -1).map((l) => l.name);
      const also =
        others.length === 1 ? others[0] : `${others.slice(0, -1).join(', ')} and ${others[others.length - 1]}`;
      return (
        `${last.file}: services.${last.name}.ports: ${last.name} listens on port ${port} as ${also} ${others.length > 1 ? 'do' : 'does'}, ` +
        "and a sandbox's services share one loopback, where each is reached at its container port: " +
        'move one to another port (its command or environment), or leave it out (profiles, runServices)'
      );
    });
}

/** COMPOSE_PROFILES of the project's .env: the profiles `docker compose up` would run. */
function activeProfiles(variables: Variables): Set<string> {
  return new Set(
    (variables.get('COMPOSE_PROFILES') ?? '')
      .split(',')
      .map((p) => p.trim())
      .filter(Boolean),
  );
}

/**
 * The services that run, as `docker compose up` runs them for a dev
 * container: runServices (default: every service whose profiles are active,
 * or that has none) and the dev service, with what they depend on.
 */
function runningServices(services: Obj, opts: ComposeOptions, active: Set<string>): string[] {
  const profiled = (s: unknown) => {
    const profiles = isObj(s) && Array.isArray(s.profiles) ? s.profiles.map(String) : [];
    return !profiles.length || profiles.some((p) => active.has(p));
  };
  const wanted = opts.runServices ?? Object.keys(services).filter((n) => profiled(services[n]));
  const run = new Set([...wanted.filter((n) => isObj(services[n])), opts.devService]);
  for (const name of run) {
    const s = services[name];
    const deps = isObj(s)
      ? Array.isArray(s.depends_on)
        ? s.depends_on
        : isObj(s.depends_on)
          ? Object.keys(s.depends_on)
          : []
      : [];
    for (const d of deps.map(String)) if (isObj(services[d])) run.add(d); // a Set iterates what is added meanwhile
  }
  return Object.keys(services).filter((n) => run.has(n));
}

/** A name other containers may reach a service by (as a host name). */
const HOST_NAME = /^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,62})$/;

/**
 * The names each running service is also reached by in Compose (its
 * container_name, hostname, network aliases, and the aliases of links to
 * it): on the sandbox's loopback, each resolves to 127.0.0.1 like its name.
 */
function hostNamesOf(services: Obj, run: string[], problems: string[], label: string): Map<string, string[]> {
  const out = new Map<string, Set<string>>(run.map((n) => [n, new Set<string>()]));
  const add = (service: string, name: unknown, field: string) => {
    if (!out.has(service) || name === service) return;
    if (typeof name !== 'string' || !HOST_NAME.test(name))
      problems.push(`${label}: ${field}: "${String(name)}" is not a host name`);
    else out.get(service)!.add(name);
  };
  for (const name of run) {
    const s = services[name] as Obj;
    if (s.container_name !== undefined) add(name, s.container_name, `services.${name}.container_name`);
    if (s.hostname !== undefined) add(name, s.hostname, `services.${name}.hostname`);
    if (isObj(s.networks)) {
      for (const [net, opts] of Object.entries(s.networks)) {
        const aliases = isObj(opts) && Array.isArray(opts.aliases) ? opts.aliases : [];
        aliases.forEach((a, i) => add(name, a, `services.${name}.networks.${net}.aliases.${i}`));
      }
    }
    for (const [i, link] of (Array.isArray(s.links) ? s.links : []).entries()) {
      const [target, alias] = String(link).split(':');
      if (!out.has(target)) problems.push(`${label}: services.${name}.links.${i}: ${target} is not a running service`);
      else if (alias) add(target, alias, `services.${name}.links.${i}`);
    }
  }
  return new Map([...out].map(([k, v]) => [k, [...v].sort()]));
}

/** The declarations through the schema of .drydock/config.yaml's services, problems named by the file's fields. */
function validated(
  declarations: Record<string, Declared>,
  problems: string[],
  names: { declared: Set<string>; running: Set<string> },
): ServiceSpec[] {
  const specs: ServiceSpec[] = [];
  for (const [name, { declaration, file, files, build }] of Object.entries(declarations)) {
    // The name becomes a container's, a host name and a folder of the sandbox's disk (docs/security.md, T4-M5).
    const badName = serviceName.safeParse(name);
    if (!badName.success) {
      problems.push(`${file}: services.${name}: a service's name: ${badName.error.issues[0].message}`);
      continue;
    }
    const parsed = serviceDeclaration.safeParse(declaration);
    if (!parsed.success) {
      for (const issue of parsed.error.issues) {
        problems.push(`${file}: services.${name}.${composeField(issue.path.map(String))}: ${issue.message}`);
      }
      continue;
    }
    const deps = parsed.data.dependsOn ?? [];
    for (const d of deps.filter((d) => !names.declared.has(d))) {
      problems.push(`${file}: services.${name}.depends_on: ${d} is not a service of the file`);
    }
    // A dependency on the dev container is no dependency of a service here.
    const dependsOn = deps.filter((d) => names.running.has(d));
    const [spec] = servicesOfConfig({ [name]: { ...parsed.data, dependsOn } });
    specs.push({
      ...spec,
      ...(files.length ? { files } : {}),
      ...(build ? { build } : {}),
      source: `${file} services.${name}`,
    });
  }
  return specs;
}

/** The compose name of a declaration's field, for messages. */
function composeField(p: string[]): string {
  const names: Record<string, string> = {
    dependsOn: 'depends_on',
    workingDir: 'working_dir',
    data: 'volumes',
    startPeriod: 'start_period',
  };
  return p.map((k) => names[k] ?? k).join('.');
}

/**
 * The dev service's keys drydock reads, beside image and build; its
 * healthcheck means nothing for a sandbox (drydock's keeper runs in it, and
 * no service waits on it here).
 */
const DEV_HONOURED = new Set([
  'ports',
  'expose',
  'depends_on',
  'networks',
  'network_mode',
  'user',
  'healthcheck',
  // The sandbox's limits are the operator's (drydock repo add --max-memory…), as devcontainer.json's hostRequirements.
  'mem_limit',
  'memswap_limit',
  'mem_reservation',
  'cpus',
  'cpu_shares',
  'pids_limit',
]);

/**
 * `security_opt`: `no-new-privileges` is what drydock sets on every service
 * and sandbox already; any other option (seccomp:unconfined, apparmor…) is
 * refused, naming its entry.
 */
function securityOptions(value: unknown, problem: (key: string, why: string) => void) {
  for (const [i, opt] of (Array.isArray(value) ? value : [value]).entries()) {
    if (/^no-new-privileges(?:[:=]true)?$/.test(String(opt))) continue;
    problem(`security_opt.${i}`, `"${String(opt)}": ${REFUSED.security_opt}`);
  }
}

function devServiceOf(s: Obj, file: string, field: string, ctx: ServiceContext): ComposeDevService {
  const { problems } = ctx;
  const problem = (key: string, why: string) => problems.push(`${file}: ${field}.${key}: ${why}`);
  const env = { ...envFilesOf(s.env_file, ctx), ...environmentOf(s.environment, file, `${field}.environment`, ctx) };
  const volumes: string[] = [];
  const links: RepoLink[] = [];
  let app: ComposeDevService['app'];
  for (const [key, value] of Object.entries(s)) {
    if (IGNORED.has(key) || DEV_HONOURED.has(key) || key.startsWith('x-')) continue;
    // working_dir: read below, once the app is known.
    if (['image', 'build', 'environment', 'env_file', 'working_dir'].includes(key)) continue;
    if (key === 'command' || key === 'entrypoint') continue; // devProcess, below
    if (key === 'volumes') volumes.push(...devVolumes(value, problem, links));
    else if (key === 'security_opt') securityOptions(value, problem);
    else if (key === 'deploy') {
      // The sandbox's limits are the operator's, as for mem_limit and cpus.
      if (deployLimits(value) === undefined) problem(key, deployProblem(value));
    } else problem(key, REFUSED[key] ?? 'not supported by drydock for the dev container');
  }
  app = devProcess(s, file, problem);
  if (s.working_dir !== undefined) app = devWorkingDir(s.working_dir, app, problem);
  if (typeof s.network_mode === 'string' && !/^service:/.test(s.network_mode))
    problem('network_mode', networkMode(s.network_mode));
  if (s.user !== undefined) sandboxUser(String(s.user), `${file}: ${field}.user`, ctx.notes);
  if (s.build !== undefined) {
    const build = buildOf(s.build, file, field, ctx);
    if (build?.inline !== undefined)
      problem(
        'build.dockerfile_inline',
        "the dev container's Dockerfile is built from a file: write it to one and name it in dockerfile",
      );
    const kept = {
      ...(volumes.length ? { volumes } : {}),
      ...(links.length ? { links } : {}),
      ...(app ? { app } : {}),
    };
    if (!build || build.dockerfile === undefined) return { args: {}, environment: env, ...kept };
    const { dockerfile, context, args, target } = build;
    return { dockerfile, context, args, ...(target ? { target } : {}), environment: env, ...kept };
  }
  if (typeof s.image !== 'string') problems.push(`${file}: ${field}: give image or build`);
  return {
    ...(typeof s.image === 'string' ? { image: s.image } : {}),
    args: {},
    environment: env,
    ...(volumes.length ? { volumes } : {}),
    ...(links.length ? { links } : {}),
    ...(app ? { app } : {}),
  };
}

/**
 * The dev service's own process (its `entrypoint`, then its `command` as the
 * entrypoint's arguments, as Docker runs them) as the sandbox takes it: one
 * that only keeps the container running is what drydock's keeper does; any
 * other is the repo's app on the first port the dev service declares
 * (started as the app is: repoApp, docs/services.md); with no port it is
 * refused, naming the field, since nothing could say it is up.
 */
function devProcess(s: Obj, file: string, problem: (key: string, why: string) => void): ComposeDevService['app'] {
  const wordsOf = (v: unknown) => (typeof v === 'string' ? shellWords(v) : Array.isArray(v) ? v.map(String) : []);
  const entrypoint = wordsOf(s.entrypoint);
  const command = wordsOf(s.command);
  const words = [...entrypoint, ...command];
  if (!words.length || keepsAlive(words)) return undefined;
  const key = entrypoint.length ? 'entrypoint' : 'command';
  // Start-up work, then a keep-alive: no app, and work a sandbox's keeper does not do.
  const startUp = keepsAlive(command) ? entrypoint.join(' ') : startUpBeforeKeepAlive(command);
  if (startUp !== undefined) {
    problem(
      key,
      `"${startUp.slice(0, 80)}" runs before the dev container's keep-alive, and a sandbox runs drydock's keeper ` +
        'instead: put that work in postCreateCommand (run as the sandbox user), or remove it',
    );
    return undefined;
  }
  const port = devPorts(s, '', file).ports[0];
  // A command alone as it is written (a string: the shell's), as drydock has always started it.
  const start = key === 'command' ? commandText(s.command) : commandText(words);
  if (port !== undefined) return { start, port, from: key };
  // Its own ports declared but none read (a ${VAR} with no value): their own problems say why, once.
  const inAnother = typeof s.network_mode === 'string' && s.network_mode.startsWith('service:');
  if (!inAnother && hasPorts(s)) return undefined;
  problem(
    key,
    `a sandbox runs drydock's keeper, and the dev service's ${key === 'entrypoint' ? 'entrypoint and command are' : 'command is'} ` +
      'its app only on the port it declares: give it in ports or expose, or start it in postStartCommand ' +
      '(with its port in forwardPorts), or remove it',
  );
  return undefined;
}

/**
 * The start-up commands of a `sh -c "<commands> && <keep-alive>"` (paperless-ngx's
 * `chown … && while sleep 1000; do :; done`), else undefined.
 */
function startUpBeforeKeepAlive(command: string[]): string | undefined {
  if (command.length !== 3 || !/^(?:(?:\/usr)?\/bin\/)?(?:ba)?sh$/.test(command[0]) || !/^-l?c$/.test(command[1]))
    return undefined;
  const at = command[2].search(/(?:&&|;)\s*(?:exec\s+)?(?:sleep|tail|while)\b[^;&|]*(?:;\s*do\s*:;\s*done)?\s*$/);
  if (at <= 0) return undefined;
  const rest = command[2].slice(at).replace(/^(?:&&|;)\s*/, '');
  return keepsAlive([command[0], command[1], rest]) ? command[2].slice(0, at).trim() : undefined;
}

/** Whether the service lists ports or expose entries (read or not). */
const hasPorts = (s: Obj) => ['ports', 'expose'].some((k) => Array.isArray(s[k]) && s[k].length > 0);

/**
 * The dev service's `working_dir`: where its own command starts, so the app's
 * command (when the dev service's command is its app) starts there; a
 * sandbox's other commands start where devcontainer.json's run, in the
 * workspace (the spec's rule for lifecycle commands), as on a developer's
 * machine, where the editor opens workspaceFolder whatever working_dir says.
 */
function devWorkingDir(
  value: unknown,
  app: ComposeDevService['app'],
  problem: (key: string, why: string) => void,
): ComposeDevService['app'] {
  const dir = String(value);
  if (!/^\/[A-Za-z0-9_./@+-]*$/.test(dir) || dir.split('/').includes('..')) {
    problem('working_dir', `"${dir}": an absolute path of letters, digits and _ . / @ + -, without ".."`);
    return app;
  }
  return app ? { ...app, start: `cd ${dir} && ${app.start}` } : app;
}

/** A compose `command` (a string, or a list of words) as one shell command, each word quoted where it must be. */
export function commandText(value: unknown): string {
  if (!Array.isArray(value)) return String(value);
  return value
    .map(String)
    .map((w) => (/^[\w@%+=:,./-]+$/.test(w) ? w : `'${w.replace(/'/g, `'\\''`)}'`))
    .join(' ');
}

/** Fields of a service's `build:` the isolated builder takes. */
const BUILD_HONOURED = new Set(['context', 'dockerfile', 'dockerfile_inline', 'args', 'target']);
/** Fields of a `build:` that mean nothing for a build in the isolated builder (drydock names, caches and labels its images). */
const BUILD_IGNORED = new Set([
  'labels',
  'tags',
  'no_cache',
  'pull',
  'cache_from',
  'cache_to',
  'platforms',
  'shm_size',
  'ulimits',
  'isolation',
]);
/** Fields of a `build:` drydock refuses, and what to do instead. */
const BUILD_REFUSED: Record<string, string> = {
  ssh: 'the isolated builder has no SSH agent: fetch what the build needs over https in a RUN step (through the egress proxy), or remove it',
  secrets:
    'the isolated builder is given no secrets: remove it (and RUN --mount=type=secret), and give what needs one in setup',
  additional_contexts:
    'the isolated builder has one context, a folder of the repository: COPY from it or from a stage instead',
  entitlements: 'builds run without extra privileges: remove it',
  privileged: 'builds run without extra privileges: remove it',
  network:
    "a build reaches only drydock's egress proxy (the operator's allowlist and the package registries): remove it",
  extra_hosts: "a build reaches only drydock's egress proxy: remove it",
};

/**
 * A service's `build:` (a folder, or {context, dockerfile or
 * dockerfile_inline, args, target}) as what the isolated builder builds,
 * paths the repo's; a field it cannot honour (ssh, secrets, a remote
 * context…) is a problem naming `<field>.build.<key>`.
 */
function buildOf(value: unknown, file: string, field: string, ctx: ServiceContext): ServiceBuild | undefined {
  const at = `${field}.build`;
  const problem = (key: string, why: string) => ctx.problems.push(`${file}: ${at}${key ? `.${key}` : ''}: ${why}`);
  const build = typeof value === 'string' ? { context: value } : isObj(value) ? value : undefined;
  if (!build) {
    problem('', 'expected a folder or {context, dockerfile, args, target}');
    return undefined;
  }
  for (const key of Object.keys(build)) {
    if (BUILD_HONOURED.has(key) || BUILD_IGNORED.has(key) || key.startsWith('x-')) continue;
    if (key === 'network' && build.network === 'default') continue;
    problem(key, BUILD_REFUSED[key] ?? 'not supported by drydock');
  }
  const context = String(build.context ?? '.');
  if (/^[a-z][a-z0-9+.-]*:\/\/|^git@|^github\.com\//i.test(context)) {
    problem(
      'context',
      `"${context}" is a remote context, which drydock does not fetch: build from a folder of the repository`,
    );
    return undefined;
  }
  const dir = ctx.dir;
  const before = ctx.problems.length;
  const repoContext = repoRelative(dir, context, file, `${at}.context`, ctx.problems);
  if (ctx.problems.length > before) return undefined;
  const inline = build.dockerfile_inline;
  if (inline !== undefined && (typeof inline !== 'string' || build.dockerfile !== undefined)) {
    problem('dockerfile_inline', 'give the Dockerfile as text, and not beside dockerfile');
    return undefined;
  }
  const target = build.target;
  if (target !== undefined && (typeof target !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(target))) {
    problem('target', 'the name of a stage of the Dockerfile');
    return undefined;
  }
  return {
    context: repoContext,
    ...(typeof inline === 'string'
      ? { inline }
      : {
          dockerfile: repoRelative(
            path.posix.join(dir, context),
            String(build.dockerfile ?? 'Dockerfile'),
            file,
            `${at}.dockerfile`,
            ctx.problems,
          ),
        }),
    args: buildArgsOf(build.args, file, `${at}.args`, ctx),
    ...(target ? { target } : {}),
  };
}

/**
 * A build's args (a map, or a list of NAME=value): an arg with no value
 * takes the project's .env's, else is not given (the Dockerfile's default
 * holds), as Compose gives none from an empty environment.
 */
function buildArgsOf(value: unknown, file: string, field: string, ctx: ServiceContext): Record<string, string> {
  if (value === undefined || value === null) return {};
  const entries: [string, unknown][] = Array.isArray(value)
    ? value.map((entry) => {
        const text = String(entry);
        const at = text.indexOf('=');
        return at < 0 ? [text, null] : [text.slice(0, at), text.slice(at + 1)];
      })
    : isObj(value)
      ? Object.entries(value)
      : [];
  if (!Array.isArray(value) && !isObj(value))
    ctx.problems.push(`${file}: ${field}: expected a map or a list of NAME=value`);
  const out: Record<string, string> = {};
  for (const [name, v] of entries) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
      ctx.problems.push(`${file}: ${field}.${name}: a build argument's name`);
      continue;
    }
    const given = v === null || v === undefined ? ctx.variables.get(name) : String(v);
    if (given !== undefined) out[name] = given;
  }
  return out;
}

/**
 * A command that only keeps the dev container running: what drydock's keeper
 * does already. `sleep`'s long times with a unit (`10000d`, as VS Code's
 * templates write it) count too.
 */
function keepsAlive(value: unknown): boolean {
  const words = typeof value === 'string' ? shellWords(value) : Array.isArray(value) ? value.map(String) : [];
  const text = words.join(' ');
  const bin = '(?:(?:/usr)?/bin/)?';
  const sleep = `${bin}sleep (?:infinity|inf|\\d{4,}[smh]?|\\d+d)`;
  const tail = `${bin}tail -f /dev/null`;
  const loop = `while ${bin}sleep \\d+[smhd]?; ?do :; ?done`;
  return (
    new RegExp(`^(?:${sleep}|${tail})$`).test(text) ||
    new RegExp(`^${bin}(?:ba)?sh -l?c (?:${loop}|(?:exec )?${sleep}|(?:exec )?${tail})$`).test(
      text.replace(/\s+/g, ' ').trim(),
    )
  );
}

/**
 * The dev service's volumes: the repo's own folder (or a folder above it, as
 * dev container templates mount `../..`) is what the sandbox has at
 * /workspace; a named or anonymous volume (or a tmpfs) is a writable folder
 * of the sandbox (its target returned: repo-image.ts volumesOf); a folder or
 * file of the repo elsewhere (`./backend:/app`) is a link there to its place
 * in /workspace (`links`); a folder of the host is refused.
 */
function devVolumes(value: unknown, problem: (key: string, why: string) => void, links: RepoLink[]): string[] {
  const targets: string[] = [];
  for (const [i, v] of (Array.isArray(value) ? value : []).entries()) {
    const entry = v as Obj;
    // The repo's root at /workspace or where dev container templates put it (/workspaces/<name>), or a folder above it.
    if (entry.type === 'bind' && entry.repo === '' && /^\/workspaces?(?:\/|$)/.test(String(entry.target))) continue;
    if (entry.type === 'bind' && entry.outside !== undefined) continue;
    if (entry.type === 'volume' || entry.type === 'tmpfs') {
      const why = volumeTargetProblem(String(entry.target));
      if (why) problem(`volumes.${i}`, why);
      else targets.push(String(entry.target));
      continue;
    }
    if (entry.type === 'bind' && typeof entry.repo === 'string') {
      const target = String(entry.target);
      const why = /^[A-Za-z0-9_./@+-]*$/.test(entry.repo)
        ? linkTargetProblem(target, ['/workspace', '/home/drydock'])
        : 'its path is not letters, digits and _ . / @ + -';
      if (why) problem(`volumes.${i}`, `"${String(entry.source)}" is in the repository, and ${why}`);
      else links.push(repoLink(target, entry.repo));
      continue;
    }
    problem(
      `volumes.${i}`,
      'a folder of the host, which a sandbox never mounts (only the repository, at /workspace): remove it',
    );
  }
  return targets;
}

/** The link at `target` to `repoPath`'s place in /workspace (the repo's root: /workspace itself). */
function repoLink(target: string, repoPath: string): RepoLink {
  return {
    path: path.posix.normalize(target).replace(/(.)\/+$/, '$1'),
    to: repoPath ? `/workspace/${repoPath}` : '/workspace',
  };
}

/** A non-dev compose service as a declaration of .drydock/config.yaml's `services:`, and the files it mounts. */
function declarationOf(s: Obj, file: string, field: string, name: string, ctx: ServiceContext) {
  const out: Obj = {};
  const files: ServiceFile[] = [];
  let build: ServiceBuild | undefined;
  const problem = (key: string, why: string) => ctx.problems.push(`${file}: ${field}.${key}: ${why}`);
  for (const [key, value] of Object.entries(s)) {
    if (IGNORED.has(key) || key.startsWith('x-')) continue;
    if (key === 'build') {
      build = buildOf(value, file, field, ctx);
      continue;
    }
    if (key === 'deploy') {
      const limits = deployLimits(value);
      if (limits === undefined) problem(key, deployProblem(value));
      else out.limits = { ...(out.limits as Obj), ...limits };
      continue;
    }
    if (key === 'security_opt') {
      securityOptions(value, problem);
      continue;
    }
    if (key in REFUSED) {
      problem(key, REFUSED[key]);
      continue;
    }
    if (!declareKey(out, files, key, value, { file, field, name, ctx, problem }))
      problem(key, `not supported by drydock (service ${name})`);
  }
  // A built service is named by what it is built from (sandbox/service-build.ts): until then, by its name.
  if (out.image === undefined && 'build' in s) out.image = name;
  if (out.image === undefined) ctx.problems.push(`${file}: ${field}.image: every service needs an image`);
  const fromFiles = envFilesOf(s.env_file, ctx);
  if (Object.keys(fromFiles).length) out.environment = { ...fromFiles, ...((out.environment as Obj) ?? {}) };
  return { declaration: out, files, ...(build ? { build } : {}) };
}

interface KeyContext {
  file: string;
  field: string;
  name: string;
  ctx: ServiceContext;
  problem: (key: string, why: string) => void;
}

/** One key of a service into its declaration (`out`) and `files`; false: a key drydock does not know. */
function declareKey(out: Obj, files: ServiceFile[], key: string, value: unknown, k: KeyContext): boolean {
  const { problem } = k;
  switch (key) {
    case 'image':
      out.image = value;
      break;
    case 'environment':
      out.environment = environmentOf(value, k.file, `${k.field}.environment`, k.ctx);
      break;
    case 'env_file':
      break; // read after the loop (envFilesOf): environment wins
    case 'command':
    case 'entrypoint':
      out[key] = typeof value === 'string' ? shellWords(value) : value;
      break;
    case 'user':
      if (/^(root|0)(:|$)/.test(String(value)))
        problem(key, 'services never run as root: remove it, or name another user');
      else out.user = String(value);
      break;
    case 'working_dir':
      out.workingDir = value;
      break;
    case 'healthcheck':
      out.healthcheck = healthcheckOf(value, (why) => problem(key, why));
      if (out.healthcheck === undefined) delete out.healthcheck;
      break;
    case 'ports':
    case 'expose':
      out.ports = [...new Set([...((out.ports as number[]) ?? []), ...portsOf(value, key, problem)])];
      break;
    case 'volumes':
      out.data = volumesOf(value, files, problem);
      break;
    case 'secrets':
    case 'configs':
      files.push(...mountedDefinitions(key, value, k));
      break;
    case 'networks':
      networksOf(value, problem);
      break;
    case 'network_mode':
      if (!/^service:/.test(String(value))) problem(key, networkMode(String(value)));
      break;
    case 'depends_on':
      out.dependsOn = Array.isArray(value) ? value : isObj(value) ? Object.keys(value) : value;
      break;
    case 'mem_limit':
      out.limits = { ...(out.limits as Obj), memory: memoryOf(value) };
      break;
    case 'cpus':
      out.limits = { ...(out.limits as Obj), cpus: Number(value) };
      break;
    case 'pids_limit':
      out.limits = { ...(out.limits as Obj), pids: value };
      break;
    default:
      return false;
  }
  return true;
}

/** A service's networks: flattened onto the loopback (aliases: hostNamesOf); a fixed address cannot be. */
function networksOf(value: unknown, problem: (key: string, why: string) => void) {
  if (!isObj(value)) return;
  for (const [net, opts] of Object.entries(value)) {
    for (const key of Object.keys(isObj(opts) ? opts : {})) {
      if (key === 'aliases' || key === 'priority') continue;
      problem(
        `networks.${net}.${key}`,
        "every service shares the sandbox's loopback (127.0.0.1) and is reached by its name or aliases: remove it",
      );
    }
  }
}

/** A service's `secrets:` or `configs:`: files read-only at /run/secrets/<name> or the config's target (default /<name>). */
function mountedDefinitions(kind: 'secrets' | 'configs', value: unknown, k: KeyContext): ServiceFile[] {
  if (!Array.isArray(value)) {
    k.problem(kind, 'expected a list');
    return [];
  }
  const out: ServiceFile[] = [];
  for (const [i, entry] of value.entries()) {
    const field = `${kind}.${i}`;
    const ref: Obj = isObj(entry) ? entry : { source: entry };
    const source = String(ref.source);
    const def = k.ctx.top[kind][source];
    if (!isObj(def)) {
      k.problem(field, `${source} is not declared in the file's top-level ${kind}`);
      continue;
    }
    const extra = Object.keys(ref).filter((key) => !['source', 'target', 'mode'].includes(key));
    if (extra.length) {
      k.problem(`${field}.${extra[0]}`, `drydock mounts ${kind} readable by the service's user: remove it`);
      continue;
    }
    const name = ref.target === undefined ? source : String(ref.target);
    const target = name.startsWith('/') ? name : kind === 'secrets' ? `/run/secrets/${name}` : `/${name}`;
    const mode = ref.mode === undefined ? 0o444 : Number(ref.mode);
    if (!Number.isInteger(mode) || mode < 0 || mode > 0o777) {
      k.problem(`${field}.mode`, 'a file mode (for example 0440)');
      continue;
    }
    const content =
      typeof def.content === 'string'
        ? def.content
        : typeof def.environment === 'string'
          ? k.ctx.variables.get(def.environment)
          : undefined;
    if (typeof def.environment === 'string' && content === undefined) {
      k.problem(field, `${kind}.${source}.environment: ${def.environment} has no value in the project's .env`);
      continue;
    }
    out.push(
      content !== undefined
        ? { target, source: `${String(def.declaredIn)} ${kind}.${source}`, content, mode }
        : { target, source: String(def.file), mode },
    );
  }
  return out;
}

/**
 * The examples a repo commits for a file its developers create and git
 * ignores (`.env` beside `.env.example`), in the order they are tried.
 */
export const EXAMPLE_SUFFIXES = ['.example', '.sample', '.dist', '.template'];

/**
 * A variables file of the repo (the project's `.env`, an `env_file`), else the
 * example the repo commits for it (`.env.example`…: what a developer copies
 * to make it, as its README says); undefined when neither is there.
 */
export function withExample(file: string, text: RepoText): { path: string; text: string } | undefined {
  for (const candidate of [file, ...EXAMPLE_SUFFIXES.map((s) => `${file}${s}`)]) {
    const found = text(candidate);
    if (found !== undefined) return { path: candidate, text: found };
  }
  return undefined;
}

/** A service's env_files (read from the repo, or their examples; substituted with the project's .env), in order. */
function envFilesOf(value: unknown, ctx: ServiceContext): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of Array.isArray(value) ? (value as Obj[]) : []) {
    const file = String(entry.path);
    const found = withExample(file, ctx.text);
    if (found === undefined) {
      if (entry.required !== false)
        ctx.problems.push(
          `${String(entry.file)}: ${String(entry.field)}: ${file} is not in the repository, nor an example of it (${EXAMPLE_SUFFIXES.map((s) => `${path.posix.basename(file)}${s}`).join(', ')}): commit one, or mark it required: false`,
        );
      continue;
    }
    for (const [k, v] of parseEnvFile(found.text, found.path, ctx.problems, ctx.variables)) out[k] = v;
  }
  return out;
}

/** A service's environment (a map by now: withRepoPaths); a name without a value takes the project's .env's. */
function environmentOf(value: unknown, file: string, field: string, ctx: ServiceContext): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (!isObj(value)) return stringMap(value, file, field, ctx.problems);
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) {
    const known = v === null || v === undefined ? ctx.variables.get(k) : String(v);
    // As Compose leaves a variable of the host's environment it does not have: not set in the container.
    if (known === undefined) ctx.notes.push(unsetNote(`${file}: ${field}.${k}`, k, 'not set'));
    else out[k] = known;
  }
  return out;
}

function stringMap(value: unknown, file: string, field: string, problems: string[]): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (!isObj(value)) {
    problems.push(`${file}: ${field}: expected a map of names to values`);
    return {};
  }
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) {
    if (v === null || v === undefined)
      problems.push(`${file}: ${field}.${k}: has no value (drydock does not read the host's environment)`);
    else out[k] = String(v);
  }
  return out;
}

/** A path of the repo relative to `base`; one leaving the repo is a problem. */
function repoRelative(base: string, relative: string, file: string, field: string, problems: string[]): string {
  const joined = path.posix.normalize(path.posix.join(base, relative));
  if (path.posix.isAbsolute(relative) || joined === '..' || joined.startsWith('../')) {
    problems.push(`${file}: ${field}: "${relative}" is outside the repository`);
    return '';
  }
  return joined === '.' ? '' : joined.replace(/\/$/, '');
}

function healthcheckOf(value: unknown, problem: (why: string) => void): Obj | undefined {
  if (!isObj(value)) {
    problem('expected {test, interval, timeout, retries, start_period}');
    return undefined;
  }
  if (value.disable === true) return undefined;
  const out: Obj = {};
  for (const [key, v] of Object.entries(value)) {
    if (key === 'test') out[key] = v;
    // Compose casts "3" to the number it means (compose-go's interpolation casts), so does drydock.
    else if (key === 'retries') out[key] = typeof v === 'string' && /^\d+$/.test(v.trim()) ? Number(v) : v;
    else if (key === 'interval' || key === 'timeout') out[key] = composeDuration(v);
    else if (key === 'start_period') out.startPeriod = composeDuration(v);
    else if (key !== 'start_interval' && key !== 'disable') problem(`${key} is not supported`);
  }
  return out;
}

/** Compose durations ("1m30s", "500ms", "10s") as drydock's: a number of ms. */
function composeDuration(v: unknown): unknown {
  if (typeof v !== 'string') return v;
  const units: Record<string, number> = { us: 0.001, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
  const parts = [...v.matchAll(/(\d+(?:\.\d+)?)(us|ms|s|m|h)/g)];
  if (!parts.length || parts.map((p) => p[0]).join('') !== v) return v;
  return Math.max(1, Math.round(parts.reduce((ms, [, n, u]) => ms + Number(n) * units[u], 0)));
}

/**
 * `ports` / `expose` entries as the ports the service listens on (its
 * container ports: containerPortsOnly dropped where Compose would publish
 * them), each once.
 */
function portsOf(value: unknown, key: string, problem: (key: string, why: string) => void): number[] {
  if (!Array.isArray(value)) {
    problem(key, 'expected a list');
    return [];
  }
  return value.flatMap((entry, i) => {
    const target = isObj(entry) ? String(entry.target) : String(entry);
    if (target === '') return []; // a variable with no value: refused where it was substituted
    const port = Number(target.replace(/\/(tcp|udp)$/, ''));
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      problem(`${key}.${i}`, `"${target}" is not a port (ranges are not supported)`);
      return [];
    }
    return [port];
  });
}

/**
 * The file's services' `ports` with only their container ports, before
 * `${VAR}` is substituted: a sandbox's services and the sandbox share one
 * loopback, where each is reached at its container port (`localhost:5432`,
 * `db:5432`), so where Compose would publish it on the developer's machine
 * (`"15432:5432"`, `${DB_PORT}:5432`, a host_ip) means nothing here, and a
 * variable there needs no value.
 */
function containerPortsOnly(data: unknown): unknown {
  if (!isObj(data) || !isObj(data.services)) return data;
  const services: Obj = {};
  for (const [name, s] of Object.entries(data.services)) {
    services[name] =
      isObj(s) && Array.isArray(s.ports)
        ? {
            ...s,
            ports: s.ports.map((entry: unknown) => {
              if (!isObj(entry)) return typeof entry === 'string' ? containerPart(entry) : entry;
              return Object.fromEntries(Object.entries(entry).filter(([k]) => k !== 'published' && k !== 'host_ip'));
            }),
          }
        : s;
  }
  return { ...data, services };
}

/** "5432", "15432:5432", "127.0.0.1:${PORT:-1}:5432/tcp", "[::1]:80:80" → what follows the last ':' outside `${…}` and `[…]`. */
export function containerPart(entry: string): string {
  let depth = 0;
  let last = -1;
  for (let i = 0; i < entry.length; i++) {
    const c = entry[i];
    if (c === '$' && entry[i + 1] === '{') {
      depth++;
      i++;
    } else if (c === '[') depth++;
    else if ((c === '}' || c === ']') && depth > 0) depth--;
    else if (c === ':' && depth === 0) last = i;
  }
  return entry.slice(last + 1);
}

/**
 * A service's volumes (long syntax by now: longVolume): named or anonymous
 * ones as data folders; files and folders of the repo as read-only copies
 * (`files`); a folder of the host is refused.
 */
function volumesOf(value: unknown, files: ServiceFile[], problem: (key: string, why: string) => void): string[] {
  if (!Array.isArray(value)) {
    problem('volumes', 'expected a list');
    return [];
  }
  return (value as Obj[]).flatMap((entry, i) => {
    const field = `volumes.${i}`;
    if (entry.type === 'tmpfs') return [];
    if (entry.type === 'volume') return [String(entry.target)];
    if (entry.type !== 'bind') {
      problem(field, `type ${String(entry.type)}: only named volumes and files or folders of the repository`);
      return [];
    }
    if (typeof entry.repo === 'string') {
      files.push({ target: String(entry.target), source: entry.repo || '.' });
      return [];
    }
    // Outside the repository is a folder of the developer's machine as much as an absolute path is.
    const where = entry.host !== undefined ? 'a folder of the host' : 'a folder of the host outside the repository';
    problem(
      field,
      `"${String(entry.source)}" is ${where}, which drydock never mounts: mount a file or folder of the repository, or copy what it needs in setup`,
    );
    return [];
  });
}

/** Why a `deploy` is refused: a device reservation (a GPU) is the host's, by design; else what is read. */
function deployProblem(value: unknown): string {
  const reservations = isObj(value) && isObj(value.resources) ? value.resources.reservations : undefined;
  if (isObj(reservations) && reservations.devices !== undefined)
    return 'resources.reservations.devices: a sandbox and its services get no host devices (GPUs): remove it';
  return REFUSED.deploy;
}

/** Why a `network_mode` other than service:<name> is refused (`host`: the host's network, by design). */
function networkMode(mode: string): string {
  if (mode === 'host')
    return "a sandbox never gets the host's network (its services share the sandbox's loopback): remove it";
  return "every service shares the sandbox's loopback: remove it, or name service:<name>";
}

/** deploy: only resources.limits (reservations of no device reserve nothing here); anything else undefined (refused). */
function deployLimits(value: unknown): Obj | undefined {
  if (!isObj(value) || Object.keys(value).some((k) => k !== 'resources')) return undefined;
  const resources = value.resources;
  if (!isObj(resources) || Object.keys(resources).some((k) => k !== 'limits' && k !== 'reservations')) return undefined;
  if (isObj(resources.reservations) && resources.reservations.devices !== undefined) return undefined;
  const limits = isObj(resources.limits) ? resources.limits : {};
  return {
    ...(limits.cpus !== undefined ? { cpus: Number(limits.cpus) } : {}),
    ...(limits.memory !== undefined ? { memory: memoryOf(limits.memory) } : {}),
    ...(limits.pids !== undefined ? { pids: limits.pids } : {}),
  };
}

/** Compose memory ("512m", "1gb", "2G", bytes) as drydock's size ("512m", "1g", bytes). */
function memoryOf(v: unknown): unknown {
  if (typeof v === 'number') return v;
  const m = /^(\d+)\s*([kmg])b?$/i.exec(String(v));
  return m ? `${m[1]}${m[2].toLowerCase()}` : /^\d+b?$/i.test(String(v)) ? Number(String(v).replace(/b$/i, '')) : v;
}

/** A command string split the way Compose does: words, with single and double quotes and backslashes. */
export function shellWords(text: string): string[] {
  const words: string[] = [];
  let word: string | undefined;
  let quote: string | undefined;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quote) {
      if (c === quote) quote = undefined;
      else if (c === '\\' && quote === '"' && i + 1 < text.length) word += text[++i];
      else word += c;
    } else if (c === "'" || c === '"') {
      quote = c;
      word ??= '';
    } else if (c === '\\' && i + 1 < text.length) word = (word ?? '') + text[++i];
    else if (/\s/.test(c)) {
      if (word !== undefined) words.push(word);
      word = undefined;
    } else word = (word ?? '') + c;
  }
  if (word !== undefined) words.push(word);
  return words;
}

/**
 * What a variable with no value becomes, said: drydock reads no host's
 * environment, so where Compose would read the developer's, it has nothing.
 */
function unsetNote(field: string, variable: string, becomes = 'empty'): string {
  return `${field}: ${variable} has no value in the project's .env (nor an example of it), and drydock does not read the host's environment: ${becomes}, as Compose makes it without one (set it in .env to give one)`;
}

/** Compose's variable substitution over a parsed file, from the project's .env (sandbox/compose-variables.ts). */
function interpolate(
  value: unknown,
  file: string,
  at: string[],
  variables: Variables,
  k: { problems: string[]; unset: (name: string, field: string) => void },
): unknown {
  // A port is what a service is reached at: an empty one is no port, so it needs a value.
  const strict = at[0] === 'services' && (at[2] === 'ports' || at[2] === 'expose');
  if (typeof value === 'string')
    return substitute(
      value,
      (name) => variables.get(name),
      `${file}: ${at.join('.')}`,
      k.problems,
      strict ? {} : { unset: k.unset },
    );
  if (Array.isArray(value)) return value.map((v, i) => interpolate(v, file, [...at, String(i)], variables, k));
  if (isObj(value))
    return Object.fromEntries(
      Object.entries(value).map(([key, v]) => [key, interpolate(v, file, [...at, key], variables, k)]),
    );
  return value;
}
