/**
 * A dev container's compose file (`dockerComposeFile` + `service` +
 * `runServices` in devcontainer.json) as drydock's service specs: the dev
 * container's own service becomes the sandbox's environment (its image or
 * build), every other service a container in the sandbox's network
 * namespace (workflows/services.ts). The file is YAML, read with `yaml`; the
 * part of the Compose Specification drydock runs is mapped onto the same
 * declaration as `services:` in .drydock/config.yaml and validated by the
 * same schema. What drydock cannot honour (a build of a service, networks,
 * a port published elsewhere, host folders, privileges) is refused, naming
 * the file and the field; what does not matter in a sandbox (restart,
 * container_name, labels…) is ignored.
 */
import path from 'node:path';
import { parseDocument } from 'yaml';
import { serviceDeclaration, serviceName, servicesOfConfig, type ServiceSpec } from '../workflows/services';

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
  environment: Record<string, string>;
}

export interface ComposeEnvironment {
  dev: ComposeDevService;
  services: ServiceSpec[];
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Keys of a service that mean nothing in a sandbox (each service is one container on the sandbox's loopback). */
const IGNORED = new Set([
  'restart',
  'container_name',
  'labels',
  'hostname',
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
  'links',
  'shm_size',
  'read_only',
  'tmpfs',
  'ulimits',
  'oom_score_adj',
]);

/** Keys drydock refuses, and what to do instead. */
const REFUSED: Record<string, string> = {
  build:
    'drydock builds no compose service but the dev container: name an image (built on the host or from an allowed registry)',
  networks: "every service shares the sandbox's loopback: remove it and reach services on localhost",
  network_mode: "every service shares the sandbox's loopback: remove it",
  privileged: 'services run without privileges: remove it',
  cap_add: 'services run without capabilities: remove it',
  devices: 'services get no host devices: remove it',
  security_opt: "services run under drydock's security options: remove it",
  pid: 'services get no host namespaces: remove it',
  ipc: 'services get no host namespaces: remove it',
  userns_mode: 'services get no host namespaces: remove it',
  uts: 'services get no host namespaces: remove it',
  cgroup_parent: 'drydock places and limits services itself: remove it',
  runtime: 'services use the runtime the sandbox uses: remove it',
  sysctls: 'services cannot change kernel settings: remove it',
  extra_hosts: 'services reach nothing but localhost: remove it',
  dns: 'services reach nothing but localhost: remove it',
  dns_search: 'services reach nothing but localhost: remove it',
  external_links: 'services reach nothing but localhost: remove it',
  volumes_from: "services share no volumes: declare the folder in this service's volumes",
  env_file: 'put the variables under environment (drydock reads no other files for a service)',
  secrets: 'give values under environment: drydock mounts no secrets into services',
  configs: 'drydock mounts no configs into services: put the file in the image, or run it in setup',
  extends: 'write the service out in full',
  deploy: 'only deploy.resources.limits is supported',
};

/** Top-level keys. */
const TOP_IGNORED = new Set(['version', 'name', 'volumes']);
const TOP_REFUSED: Record<string, string> = {
  networks: "every service shares the sandbox's loopback: remove it",
  secrets: 'drydock mounts no secrets into services',
  configs: 'drydock mounts no configs into services',
  include: 'put every service in one file',
};

/**
 * Reads compose `text` (at `file`, a path of the repo) for a dev container
 * whose own service is `devService`; `runServices` (default: all) names the
 * services to run beside it.
 */
export function parseCompose(
  text: string,
  file: string,
  opts: { devService: string; runServices?: string[] },
): ComposeEnvironment {
  const doc = parseDocument(text, { uniqueKeys: true, merge: true });
  if (doc.errors.length) throw new ComposeError([`${file}: not valid YAML (${doc.errors[0].message.split('\n')[0]})`]);
  const problems: string[] = [];
  const data = interpolate(doc.toJS({ maxAliasCount: 100 }) as unknown, file, [], problems);
  if (!isObj(data) || !isObj(data.services))
    throw new ComposeError([`${file}: services: a map of services is required`]);
  for (const key of Object.keys(data)) {
    if (key.startsWith('x-') || TOP_IGNORED.has(key) || key === 'services') continue;
    problems.push(`${file}: ${key}: ${TOP_REFUSED[key] ?? 'not supported by drydock'}`);
  }
  const volumes = isObj(data.volumes) ? data.volumes : {};
  for (const [name, v] of Object.entries(volumes)) {
    if (v !== null && !(isObj(v) && Object.keys(v).every((k) => k === 'driver' && v.driver === 'local'))) {
      problems.push(
        `${file}: volumes.${name}: only plain named volumes are supported (no driver options, no external)`,
      );
    }
  }
  const services = data.services;
  if (!isObj(services[opts.devService])) {
    throw new ComposeError([
      `${file}: services.${opts.devService}: the dev container's service (devcontainer.json "service") is not in the file`,
    ]);
  }
  const run = opts.runServices ?? Object.keys(services);
  for (const name of run) {
    if (!isObj(services[name])) problems.push(`${file}: services.${name}: named in runServices but not in the file`);
  }
  const dev = devServiceOf(services[opts.devService] as Obj, file, `services.${opts.devService}`, problems);
  const declarations: Obj = {};
  for (const name of run.filter((n) => n !== opts.devService && isObj(services[n]))) {
    declarations[name] = declarationOf(services[name] as Obj, file, `services.${name}`, name, problems);
  }
  const specs = validated(declarations, file, problems, {
    declared: new Set(Object.keys(services)),
    running: new Set(run.filter((n) => n !== opts.devService)),
  });
  if (problems.length) throw new ComposeError(problems);
  return { dev, services: specs };
}

/** The declarations through the schema of .drydock/config.yaml's services, problems named by the file's fields. */
function validated(
  declarations: Obj,
  file: string,
  problems: string[],
  names: { declared: Set<string>; running: Set<string> },
): ServiceSpec[] {
  const specs: ServiceSpec[] = [];
  for (const [name, declaration] of Object.entries(declarations)) {
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
    // A dependency on the dev container, or on a service not run, is no dependency of a service here.
    const dependsOn = deps.filter((d) => names.running.has(d));
    const [spec] = servicesOfConfig({ [name]: { ...parsed.data, dependsOn } });
    specs.push({ ...spec, source: `${file} services.${name}` });
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

function devServiceOf(s: Obj, file: string, field: string, problems: string[]): ComposeDevService {
  const dir = path.posix.dirname(file);
  const env = environmentOf(s.environment, file, `${field}.environment`, problems);
  for (const key of ['privileged', 'cap_add', 'devices', 'security_opt', 'pid', 'ipc', 'userns_mode']) {
    if (key in s) problems.push(`${file}: ${field}.${key}: ${REFUSED[key]}`);
  }
  if (s.build !== undefined) {
    const build = typeof s.build === 'string' ? { context: s.build } : isObj(s.build) ? s.build : undefined;
    if (!build) {
      problems.push(`${file}: ${field}.build: expected a folder or {context, dockerfile, args}`);
      return { args: {}, environment: env };
    }
    const context = repoRelative(dir, String(build.context ?? '.'), file, `${field}.build.context`, problems);
    const dockerfile = repoRelative(
      path.posix.join(dir, String(build.context ?? '.')),
      String(build.dockerfile ?? 'Dockerfile'),
      file,
      `${field}.build.dockerfile`,
      problems,
    );
    return {
      dockerfile,
      context,
      args: stringMap(build.args, file, `${field}.build.args`, problems),
      environment: env,
    };
  }
  if (typeof s.image !== 'string') problems.push(`${file}: ${field}: give image or build`);
  return { ...(typeof s.image === 'string' ? { image: s.image } : {}), args: {}, environment: env };
}

/** A non-dev compose service as a declaration of .drydock/config.yaml's `services:`. */
function declarationOf(s: Obj, file: string, field: string, name: string, problems: string[]): Obj {
  const out: Obj = {};
  const problem = (key: string, why: string) => problems.push(`${file}: ${field}.${key}: ${why}`);
  for (const [key, value] of Object.entries(s)) {
    if (IGNORED.has(key) || key.startsWith('x-')) continue;
    if (key === 'deploy') {
      const limits = deployLimits(value);
      if (limits === undefined) problem(key, REFUSED.deploy);
      else out.limits = { ...(out.limits as Obj), ...limits };
      continue;
    }
    if (key in REFUSED) {
      problem(key, REFUSED[key]);
      continue;
    }
    switch (key) {
      case 'image':
        out.image = value;
        break;
      case 'environment':
        out.environment = environmentOf(value, file, `${field}.environment`, problems);
        break;
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
        out.ports = [...((out.ports as number[]) ?? []), ...portsOf(value, key, (k, why) => problem(k, why))];
        break;
      case 'volumes':
        out.data = dataOf(value, (k, why) => problem(k, why));
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
        problem(key, `not supported by drydock (service ${name})`);
    }
  }
  if (out.image === undefined && !('build' in s))
    problems.push(`${file}: ${field}.image: every service needs an image`);
  return out;
}

function environmentOf(value: unknown, file: string, field: string, problems: string[]): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (Array.isArray(value)) {
    const out: Record<string, string> = {};
    value.forEach((entry, i) => {
      const text = String(entry);
      const at = text.indexOf('=');
      if (at <= 0)
        problems.push(
          `${file}: ${field}.${i}: "${text.slice(0, 60)}" takes its value from the host, which drydock does not read: write NAME=value`,
        );
      else out[text.slice(0, at)] = text.slice(at + 1);
    });
    return out;
  }
  return stringMap(value, file, field, problems);
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
    if (key === 'test' || key === 'retries') out[key] = v;
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

/** `ports` / `expose` entries as the ports the service listens on; a port published elsewhere is refused. */
function portsOf(value: unknown, key: string, problem: (key: string, why: string) => void): number[] {
  if (!Array.isArray(value)) {
    problem(key, 'expected a list');
    return [];
  }
  return value.flatMap((entry, i) => {
    const [published, target] = isObj(entry)
      ? [entry.published === undefined ? undefined : String(entry.published), String(entry.target)]
      : publishedAndTarget(String(entry));
    const port = Number(target?.replace(/\/(tcp|udp)$/, ''));
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      problem(`${key}.${i}`, `"${String(entry)}" is not a port (ranges are not supported)`);
      return [];
    }
    if (published !== undefined && Number(published) !== port) {
      problem(
        `${key}.${i}`,
        `publishes port ${port} as ${published}: services are reached on localhost at their own port (${port}), nothing is published on the host`,
      );
      return [];
    }
    return [port];
  });
}

/** "5432", "5432:5432", "127.0.0.1:5432:5432" → [published?, target]. */
function publishedAndTarget(entry: string): [string | undefined, string] {
  const parts = entry.split(':');
  if (parts.length === 1) return [undefined, parts[0]];
  return [parts[parts.length - 2], parts[parts.length - 1]];
}

/** Named or anonymous volumes as data folders; a folder of the host is refused. */
function dataOf(value: unknown, problem: (key: string, why: string) => void): string[] {
  if (!Array.isArray(value)) {
    problem('volumes', 'expected a list');
    return [];
  }
  return value.flatMap((entry, i) => {
    const field = `volumes.${i}`;
    if (isObj(entry)) {
      if (entry.type === 'tmpfs') return [];
      if (entry.type !== 'volume') {
        problem(field, `type ${String(entry.type)}: only named volumes (a folder of the host is never mounted)`);
        return [];
      }
      return [String(entry.target)];
    }
    const parts = String(entry).split(':');
    if (parts.length === 1) return [parts[0]];
    const source = parts[0];
    if (/^[./~]/.test(source) || source.includes('/')) {
      problem(
        field,
        `"${String(entry)}" mounts a folder of the host, which drydock never does: copy what it needs in setup, or build it into the image`,
      );
      return [];
    }
    return [parts[1]];
  });
}

/** deploy: only resources.limits; anything else undefined (refused). */
function deployLimits(value: unknown): Obj | undefined {
  if (!isObj(value) || Object.keys(value).some((k) => k !== 'resources')) return undefined;
  const resources = value.resources;
  if (!isObj(resources) || Object.keys(resources).some((k) => k !== 'limits' && k !== 'reservations')) return undefined;
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
 * Compose's variable substitution with no host environment: `${NAME:-default}`
 * and `${NAME-default}` take the default, `$$` is a `$`; a variable without a
 * default is a problem naming the field (drydock reads no host's environment).
 */
function interpolate(value: unknown, file: string, at: string[], problems: string[]): unknown {
  if (typeof value === 'string') {
    return value.replace(
      /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g,
      (m, braced, dflt, bare) => {
        if (m === '$$') return '$';
        if (dflt !== undefined) return dflt as string;
        problems.push(
          `${file}: ${at.join('.')}: \${${(braced ?? bare) as string}} has no default, and drydock does not read the host's environment: write \${${(braced ?? bare) as string}:-value} or the value itself`,
        );
        return '';
      },
    );
  }
  if (Array.isArray(value)) return value.map((v, i) => interpolate(v, file, [...at, String(i)], problems));
  if (isObj(value))
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, interpolate(v, file, [...at, k], problems)]));
  return value;
}
