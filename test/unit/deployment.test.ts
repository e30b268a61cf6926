/**
 * The multi-host deployment files against real schemas and against drydock:
 * - infra/compose/*.yaml: the compose-spec JSON schema (as shipped in dclint);
 * - infra/k8s/*.yaml, pods/*.yaml, docker-hosts/*.yaml (the control plane, and the workers of either layout:
 *   pods/ for sandboxes as pods, docker-hosts/ for Docker hosts): the Kubernetes
 *   OpenAPI validators of kubernetes-models,
 *   and its TypeScript types for unknown fields (OpenAPI allows them; a typo
 *   such as `mountpath` would otherwise pass and be dropped by the API server);
 * - what a working deployment depends on: every variable is one platform/config.ts
 *   reads and the values parse, one image name, the worker's Docker socket and
 *   egress folder at identical paths, the host id from the node's name, secrets
 *   only from Secrets or env files, probes on serve's port, the pod worker's
 *   API rights in the sandboxes' namespace and nothing of a container runtime.
 * Each check is also run on a broken copy, which it must reject.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import Ajv from 'ajv';
import ts from 'typescript';
import * as apps from 'kubernetes-models/apps/v1';
import * as batch from 'kubernetes-models/batch/v1';
import * as networking from 'kubernetes-models/networking.k8s.io/v1';
import * as rbac from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import * as core from 'kubernetes-models/v1';
import { parse, parseAllDocuments } from 'yaml';
import { configVariables, loadConfig } from '../../platform/config';
import { version } from '../../package.json';

const root = path.resolve(__dirname, '../..');
const composeDir = path.join(root, 'infra/compose');
const k8sDir = path.join(root, 'infra/k8s');
const IMAGE = `drydock:${version}`;
const DOCKER_SOCKET = '/var/run/docker.sock';

type Obj = Record<string, any>;
const clone = <T>(x: T): T => structuredClone(x);
const yamlFiles = (dir: string) => readdirSync(dir).filter((f) => /\.ya?ml$/.test(f));

// ---------------------------------------------------------------- variables

/** Read by drydock outside platform/config.ts: dockerode, and the base image's debootstrap fallback. */
const OTHER_VARIABLES = ['DOCKER_HOST', 'DRYDOCK_DEBIAN_MIRROR'];
const SECRET_NAME = /TOKEN|SECRET|PASSWORD|_KEY$|^DATABASE_URL$/;

function unknownVariables(names: string[]): string[] {
  const known = new Set([...configVariables(), ...OTHER_VARIABLES]);
  return names.filter((n) => !known.has(n) && !/^DRYDOCK_SECRET_[A-Z0-9_]+$/.test(n));
}

/** KEY=VALUE lines of an env file (comments and blank lines skipped). */
function readEnvFile(file: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line.trim());
    if (m) env[m[1]] = m[2];
  }
  return env;
}

/** Compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}, $$. */
function interpolate(value: unknown, vars: Record<string, string>): any {
  if (typeof value === 'string') {
    return value.replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}/g, (all, name, op, arg) => {
      if (all === '$$') return '$';
      const v = vars[name];
      const unset = op?.startsWith(':') ? !v : v === undefined;
      if (!unset) return v;
      if (op?.endsWith('?')) throw new Error(`\${${name}} is required: ${arg}`);
      return op ? arg : '';
    });
  }
  if (Array.isArray(value)) return value.map((v) => interpolate(v, vars));
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, interpolate(v, vars)]));
  }
  return value;
}

// ---------------------------------------------------------------- compose

const composeSchema = JSON.parse(
  readFileSync(path.join(path.dirname(require.resolve('dclint/package.json')), 'schemas/compose.schema.json'), 'utf8'),
);
// Draft-07, which Ajv's default class implements; its $schema is spelt with https and no "#", which Ajv does not know.
expect(composeSchema.$schema).toBe('https://json-schema.org/draft-07/schema');
delete composeSchema.$schema;
const validateCompose = new Ajv({ allErrors: true, strict: false }).compile(composeSchema);

function composeSchemaProblems(doc: unknown): string[] {
  if (validateCompose(doc)) return [];
  return (validateCompose.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`);
}

const composeFiles = yamlFiles(composeDir);
const compose: Record<string, Obj> = Object.fromEntries(
  composeFiles.map((f) => [f, parse(readFileSync(path.join(composeDir, f), 'utf8'))]),
);
/** Values for ${...}: the example env file of the control plane, plus a host id. */
const composeVars = { ...readEnvFile(path.join(composeDir, 'control.env.example')), DRYDOCK_HOST_ID: 'docker-1' };

const environmentOf = (service: Obj): Record<string, string> =>
  Array.isArray(service.environment)
    ? Object.fromEntries(service.environment.map((e: string) => [e.split('=')[0], e.split('=').slice(1).join('=')]))
    : { ...service.environment };

/** The environment a compose service's process gets: its env files (their .example), then `environment`. */
function composeServiceEnv(service: Obj): Record<string, string> {
  const files = [service.env_file ?? []]
    .flat()
    .map((f: string | { path: string }) => (typeof f === 'string' ? f : f.path));
  const fromFiles = files.map((f) => readEnvFile(path.join(composeDir, `${f}.example`)));
  return Object.assign({}, ...fromFiles, interpolate(environmentOf(service), composeVars));
}

const drydockServices = (doc: Obj): [string, Obj][] =>
  Object.entries(doc.services as Obj).filter(([, s]) => String(s.image).startsWith('drydock:'));

/** Short-syntax volumes as {source, target, options}. */
const composeBinds = (service: Obj): { source: string; target: string; options: string[] }[] =>
  (service.volumes ?? []).map((v: string | Obj) => {
    if (typeof v !== 'string') return { source: v.source, target: v.target, options: [v.bind?.propagation ?? ''] };
    const [source, target, options = ''] = interpolate(v, composeVars).split(':');
    return { source, target, options: options.split(',') };
  });

/** The bind that holds a path in the container: the longest target above it. */
const holderOf = <T extends { target: string }>(binds: T[], dir: string): T | undefined =>
  binds
    .filter((b) => dir === b.target || dir.startsWith(`${b.target}/`))
    .sort((a, b) => b.target.length - a.target.length)[0];

/** sandbox/docker/storage.ts loop-mounts each sandbox's upper layer here; the host's engine mounts overlays on it. */
const storageDir = (env: Record<string, string>) => `${env.DRYDOCK_DATA_DIR}/sandboxes`;
const LOOP_DEVICE_RULES = ['b 7:* rmw', 'c 10:237 rmw'];

/** What the copy-on-write workspace needs of the worker's container, and only that (no privileged). */
function composeStorageProblems(worker: Obj): string[] {
  const problems: string[] = [];
  const binds = composeBinds(worker);
  const storage = holderOf(binds, storageDir(composeServiceEnv(worker)));
  if (!storage || storage.source !== storage.target || !storage.options.includes('rshared')) {
    problems.push(
      `the sandbox storage ${storageDir(composeServiceEnv(worker))} is not bound rshared from the same path`,
    );
  }
  if (!(worker.cap_add ?? []).includes('SYS_ADMIN')) problems.push('the worker cannot mount (no SYS_ADMIN)');
  if (!LOOP_DEVICE_RULES.every((r) => (worker.device_cgroup_rules ?? []).includes(r))) {
    problems.push('the worker may not use the loop devices');
  }
  if (!binds.some((b) => b.source === '/dev' && b.target === '/dev')) problems.push("the host's /dev is not bound");
  if (!(worker.security_opt ?? []).includes('apparmor=unconfined')) problems.push("AppArmor's profile refuses mount");
  if (worker.privileged) problems.push('the worker is privileged');
  return problems;
}

function composeWorkerProblems(worker: Obj): string[] {
  const problems: string[] = [];
  const env = composeServiceEnv(worker);
  const binds = composeBinds(worker);
  if (!binds.some((b) => b.source === DOCKER_SOCKET && b.target === DOCKER_SOCKET)) {
    problems.push(`the Docker socket is not bound at ${DOCKER_SOCKET}`);
  }
  const egress = env.DRYDOCK_EGRESS_DIR ?? `${env.DRYDOCK_DATA_DIR}/egress`;
  const holder = holderOf(binds, egress);
  if (!holder || holder.source !== holder.target) {
    problems.push(`the egress folder ${egress} is not bound from the same path on the host`);
  }
  if (!env.DRYDOCK_HOST_ID) problems.push('DRYDOCK_HOST_ID is not set');
  if (worker.network_mode !== 'host') problems.push('the worker uses a bridge network');
  return problems;
}

// ---------------------------------------------------------------- kubernetes

interface K8sDoc {
  /** Its path under infra/k8s: `serve.yaml`, `pods/worker.yaml`. */
  file: string;
  doc: Obj;
}
/** The control plane (infra/k8s), and the two layouts of workers, each applied with it. */
const LAYOUTS = ['pods', 'docker-hosts'];
const k8sDocs: K8sDoc[] = ['', ...LAYOUTS].flatMap((folder) =>
  yamlFiles(path.join(k8sDir, folder)).flatMap((name) => {
    const file = folder ? `${folder}/${name}` : name;
    return parseAllDocuments(readFileSync(path.join(k8sDir, file), 'utf8'))
      .map((d) => d.toJS())
      .filter(Boolean)
      .map((doc) => ({ file, doc }));
  }),
);
/** What `kubectl apply -f infra/k8s/ -f infra/k8s/<layout>/` creates. */
const layoutDocs = (layout: string) => k8sDocs.filter((d) => !d.file.includes('/') || d.file.startsWith(`${layout}/`));
const label = ({ file, doc }: K8sDoc) => `${file}: ${doc.kind}/${doc.metadata?.name}`;

/** The API groups the manifests use, as kubernetes-models' modules. */
const models: Record<string, Obj> = {
  v1: core,
  'apps/v1': apps,
  'batch/v1': batch,
  'networking.k8s.io/v1': networking,
  'rbac.authorization.k8s.io/v1': rbac,
};
const modelModule = (doc: Obj) => `kubernetes-models/${doc.apiVersion}`;

function k8sSchemaProblems(doc: Obj): string[] {
  const Model = models[doc.apiVersion]?.[doc.kind];
  if (!Model) return [`no model of ${doc.apiVersion} ${doc.kind}`];
  try {
    new Model(doc).validate();
    return [];
  } catch (err) {
    return [(err as Error).message];
  }
}

/**
 * Type-checks each document as an object literal of its kubernetes-models
 * interface: excess property checks name every field the API does not have.
 */
function k8sUnknownFields(docs: Obj[]): string[] {
  const fileName = path.join(root, 'test', '__k8s_manifests__.ts');
  const source = docs
    .map((doc, i) => {
      const type = `import('${modelModule(doc)}/${doc.kind}').I${doc.kind}`;
      return `export const doc${i}: ${type} = ${JSON.stringify(doc)};`;
    })
    .join('\n');
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: [],
    lib: ['lib.es2022.d.ts'],
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.CommonJS,
    moduleResolution: ts.ModuleResolutionKind.Node10,
  };
  const host = ts.createCompilerHost(options);
  const { getSourceFile, fileExists, readFile } = host;
  host.getSourceFile = (name, lang, ...rest) =>
    name === fileName ? ts.createSourceFile(name, source, lang) : getSourceFile.call(host, name, lang, ...rest);
  host.fileExists = (name) => name === fileName || fileExists.call(host, name);
  host.readFile = (name) => (name === fileName ? source : readFile.call(host, name));
  const program = ts.createProgram([fileName], options, host);
  return ts.getPreEmitDiagnostics(program, program.getSourceFile(fileName)).map((d) => {
    const line = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line : -1;
    const doc = docs[line];
    return `${doc ? `${doc.kind}/${doc.metadata?.name}` : '?'}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`;
  });
}

/** A document of the control plane or, with `layout`, of that layout's deployment. */
const find = (kind: string, name: string, layout = LAYOUTS[0]) => {
  const found = layoutDocs(layout).find((d) => d.doc.kind === kind && d.doc.metadata?.name === name);
  if (!found) throw new Error(`infra/k8s (${layout}) has no ${kind} ${name}`);
  return found.doc;
};
/** The Docker hosts' worker (infra/k8s/docker-hosts). */
const workerSet = () => find('DaemonSet', 'drydock-worker', 'docker-hosts');
/** The worker whose sandboxes are pods (infra/k8s/pods). */
const podWorkerSet = () => find('DaemonSet', 'drydock-worker', 'pods');
const serveDeployment = () => find('Deployment', 'drydock-serve');
const containerOf = (workload: Obj, name: string): Obj =>
  workload.spec.template.spec.containers.find((c: Obj) => c.name === name);

/** The environment a container gets: ConfigMaps it loads, then `env` (placeholders for Secrets and the downward API). */
function k8sContainerEnv(container: Obj): { env: Record<string, string>; names: string[]; problems: string[] } {
  const env: Record<string, string> = {};
  const problems: string[] = [];
  for (const from of container.envFrom ?? []) {
    if (from.configMapRef) Object.assign(env, find('ConfigMap', from.configMapRef.name).data);
  }
  for (const e of container.env ?? []) {
    if (e.value !== undefined) {
      env[e.name] = e.value;
      if (SECRET_NAME.test(e.name)) problems.push(`${e.name} is a literal value, not from a Secret`);
    } else if (e.valueFrom?.secretKeyRef) {
      env[e.name] = e.name === 'DATABASE_URL' ? 'postgres://drydock:pw@postgres:5432/drydock' : 'from-a-secret';
    } else if (e.valueFrom?.fieldRef) {
      env[e.name] = 'node-1';
    }
  }
  for (const name of Object.keys(env)) {
    const inConfigMap = !(container.env ?? []).some((e: Obj) => e.name === name);
    if (inConfigMap && SECRET_NAME.test(name)) problems.push(`${name} is in a ConfigMap, not a Secret`);
  }
  return { env, names: Object.keys(env), problems };
}

/** How long the worker may take to stop after SIGTERM (its shutdown grace), in seconds. */
function workerShutdownGraceSeconds(): number {
  return loadConfig({}).DRYDOCK_SHUTDOWN_GRACE / 1000;
}

function k8sWorkerProblems(ds: Obj): string[] {
  const problems: string[] = [];
  const pod = ds.spec.template.spec;
  const worker = containerOf(ds, 'worker');
  const { env } = k8sContainerEnv(worker);
  const hostPathOf = (volumeName: string) => pod.volumes.find((v: Obj) => v.name === volumeName)?.hostPath?.path;
  const mounts: Obj[] = worker.volumeMounts ?? [];
  if (!mounts.some((m) => m.mountPath === DOCKER_SOCKET && hostPathOf(m.name) === DOCKER_SOCKET)) {
    problems.push(`the Docker socket is not mounted from the node's ${DOCKER_SOCKET}`);
  }
  const egress = env.DRYDOCK_EGRESS_DIR ?? `${env.DRYDOCK_DATA_DIR}/egress`;
  const holder = mounts
    .filter((m) => egress === m.mountPath || egress.startsWith(`${m.mountPath}/`))
    .sort((a, b) => b.mountPath.length - a.mountPath.length)[0];
  if (!holder || hostPathOf(holder.name) !== holder.mountPath) {
    problems.push(`the egress folder ${egress} is not mounted from the same path on the node`);
  }
  const hostId = (worker.env ?? []).find((e: Obj) => e.name === 'DRYDOCK_HOST_ID');
  if (hostId?.valueFrom?.fieldRef?.fieldPath !== 'spec.nodeName') {
    problems.push('DRYDOCK_HOST_ID does not come from spec.nodeName');
  }
  const storage = holderOf<Obj & { target: string }>(
    mounts.map((m) => ({ ...m, target: m.mountPath })),
    storageDir(env),
  );
  if (!storage || hostPathOf(storage.name) !== storage.mountPath || storage.mountPropagation !== 'Bidirectional') {
    problems.push(`the sandbox storage ${storageDir(env)} is not mounted Bidirectional from the same path on the node`);
  }
  if (!mounts.some((m) => m.mountPath === '/dev' && hostPathOf(m.name) === '/dev')) {
    problems.push("the node's /dev is not mounted");
  }
  // Kubernetes allows Bidirectional propagation only to privileged containers.
  if (worker.securityContext?.privileged !== true) problems.push('the worker is not privileged');
  if (!((ds.spec.template.spec.terminationGracePeriodSeconds ?? 30) > workerShutdownGraceSeconds() + 15)) {
    problems.push(`terminationGracePeriodSeconds is not above the worker's shutdown grace`);
  }
  return problems;
}

/** What the API lets a service account do in a namespace: "<resource> <verb>" for each grant of its Roles. */
function grantsOf(account: { name: string; namespace: string }, namespace: string, docs: K8sDoc[]): string[] {
  const bindings = docs
    .map((d) => d.doc)
    .filter((d) => d.kind === 'RoleBinding' && d.metadata.namespace === namespace)
    .filter((b) =>
      b.subjects.some(
        (s: Obj) => s.kind === 'ServiceAccount' && s.name === account.name && s.namespace === account.namespace,
      ),
    );
  const roles = bindings.map(
    (b) =>
      docs.find(
        (d) =>
          d.doc.kind === 'Role' && d.doc.metadata.name === b.roleRef.name && d.doc.metadata.namespace === namespace,
      )?.doc,
  );
  return roles.flatMap((r) =>
    (r?.rules ?? []).flatMap((rule: Obj) =>
      rule.resources.flatMap((res: string) => rule.verbs.map((v: string) => `${res} ${v}`)),
    ),
  );
}

/** The worker whose sandboxes are pods: the API and its node's data folder, no container runtime, no privilege. */
function k8sPodWorkerProblems(ds: Obj, docs: K8sDoc[]): string[] {
  const problems: string[] = [];
  const pod = ds.spec.template.spec;
  const worker = containerOf(ds, 'worker');
  const { env } = k8sContainerEnv(worker);
  if (env.DRYDOCK_SANDBOX_PROVIDER !== 'kubernetes') problems.push('DRYDOCK_SANDBOX_PROVIDER is not kubernetes');
  const hostPaths = (pod.volumes as Obj[]).filter((v) => v.hostPath).map((v) => v.hostPath.path);
  if (hostPaths.join() !== env.DRYDOCK_DATA_DIR)
    problems.push(`the node's folders mounted are ${hostPaths.join(', ')}, not the data folder alone`);
  const data = (worker.volumeMounts as Obj[]).find((m) => pod.volumes.find((v: Obj) => v.name === m.name)?.hostPath);
  if (data?.mountPath !== env.DRYDOCK_DATA_DIR) problems.push('the data folder is not mounted at its path on the node');
  for (const dir of [env.DRYDOCK_EGRESS_DIR, env.DRYDOCK_AGENTS_DIR]) {
    if (dir && !dir.startsWith(`${env.DRYDOCK_DATA_DIR}/`)) problems.push(`${dir} is not under the data folder`);
  }
  const hostId = (worker.env ?? []).find((e: Obj) => e.name === 'DRYDOCK_HOST_ID');
  if (hostId?.valueFrom?.fieldRef?.fieldPath !== 'spec.nodeName')
    problems.push('DRYDOCK_HOST_ID does not come from spec.nodeName');
  if (worker.securityContext?.privileged || worker.securityContext?.capabilities?.drop?.[0] !== 'ALL') {
    problems.push('the worker has privileges');
  }
  // The sandbox nodes' pods have loopback alone: the worker reaches Temporal and the rest on the node's network.
  if (pod.hostNetwork !== true) problems.push('the worker is not on the node network');
  const namespace = env.DRYDOCK_K8S_NAMESPACE;
  const granted = grantsOf({ name: pod.serviceAccountName, namespace: ds.metadata.namespace }, namespace, docs);
  const needs = [
    'pods create',
    'pods get',
    'pods list',
    'pods delete',
    'pods/exec create',
    'pods/log get',
    'events list',
  ];
  for (const need of needs) {
    if (!granted.includes(need))
      problems.push(`its service account may not ${need.replace(' ', ': ')} in ${namespace}`);
  }
  if (!docs.some((d) => d.doc.kind === 'Namespace' && d.doc.metadata.name === namespace))
    problems.push(`no namespace ${namespace}`);
  if (!((pod.terminationGracePeriodSeconds ?? 30) > workerShutdownGraceSeconds() + 15)) {
    problems.push(`terminationGracePeriodSeconds is not above the worker's shutdown grace`);
  }
  return problems;
}

// ---------------------------------------------------------------- tests

describe('infra/compose', () => {
  test('there are the control plane and the worker', () => {
    expect(composeFiles.sort()).toEqual(['control.yaml', 'worker.yaml']);
  });

  test.each(composeFiles)('%s is valid against the compose-spec schema, before and after interpolation', (file) => {
    expect(composeSchemaProblems(compose[file])).toEqual([]);
    expect(composeSchemaProblems(interpolate(compose[file], composeVars))).toEqual([]);
  });

  test('the schema rejects a broken file', () => {
    const broken = clone(compose['control.yaml']);
    broken.services.temporal.volume = broken.services.temporal.volumes; // typo of a key
    broken.services.temporal.depends_on['temporal-schema'].condition = 'service_ready';
    const problems = composeSchemaProblems(broken).join('\n');
    expect(problems).toMatch(/\/services\/temporal .*additionalProperty.*"volume"/);
    expect(problems).toMatch(/depends_on\/temporal-schema\/condition must be equal to one of the allowed values/);
  });

  test.each(composeFiles)('%s: depends_on names services; mounted files and env file examples exist', (file) => {
    const services = compose[file].services as Obj;
    for (const [name, s] of Object.entries(services)) {
      for (const dep of Object.keys(s.depends_on ?? {}))
        expect(`${name} -> ${dep}: ${dep in services}`).toMatch(/true$/);
      for (const { source } of composeBinds(s)) {
        if (source.startsWith('.')) expect(existsSync(path.join(composeDir, source))).toBe(true);
      }
      for (const f of [s.env_file ?? []].flat()) expect(existsSync(path.join(composeDir, `${f}.example`))).toBe(true);
      // Images come from infra/images.sh (its staged context holds the build CA), not compose's build.
      expect(s.build).toBeUndefined();
    }
  });

  test('the scripts the Temporal steps and PostgreSQL run are executable shell scripts', () => {
    for (const f of ['postgres-init.sh', 'temporal-schema.sh', 'temporal-setup.sh']) {
      expect(statSync(path.join(composeDir, f)).mode & 0o111).not.toBe(0);
      expect(readFileSync(path.join(composeDir, f), 'utf8')).toMatch(
        /^#!\/bin\/sh\nset -eu\n|^#!\/bin\/sh\n(#.*\n)*set -eu\n/,
      );
    }
  });

  test.each(composeFiles)('%s: drydock services set only variables drydock reads, and they parse', (file) => {
    const services = drydockServices(compose[file]);
    expect(services.length).toBeGreaterThan(0);
    for (const [, service] of services) {
      expect(service.image).toBe(IMAGE);
      const env = composeServiceEnv(service);
      expect(unknownVariables(Object.keys(env))).toEqual([]);
      if (service.command?.[0] === 'worker' || service.command?.[0] === 'serve') {
        expect(() => loadConfig(env)).not.toThrow();
        // A multi-host deployment needs the PostgreSQL server; PGlite is one host's.
        expect(env.DATABASE_URL).toMatch(/^postgres:\/\//);
      }
      // Secrets come from env files or ${...} of the operator's env file, never from this file.
      for (const [name, value] of Object.entries(environmentOf(service))) {
        if (SECRET_NAME.test(name)) expect(`${name}: ${value}`).toMatch(/\$\{/);
      }
    }
  });

  test('the example env files set only variables drydock reads', () => {
    for (const f of ['serve.env.example', 'worker.env.example']) {
      expect(unknownVariables(Object.keys(readEnvFile(path.join(composeDir, f))))).toEqual([]);
    }
    expect(unknownVariables(['DRYDOCK_HOSTID'])).toEqual(['DRYDOCK_HOSTID']);
  });

  test("the worker binds the Docker socket and the egress folder at the host's own paths", () => {
    const worker = compose['worker.yaml'].services.worker;
    expect(composeWorkerProblems(worker)).toEqual([]);
    const moved = clone(worker);
    moved.volumes = moved.volumes.map((v: string) => v.replace(/^\/var\/lib\/drydock:/, '/srv/drydock:'));
    expect(composeWorkerProblems(moved)).toEqual([
      'the egress folder /var/lib/drydock/egress is not bound from the same path on the host',
    ]);
  });

  test('the worker can loop-mount sandbox storage that reaches the host, without being privileged', () => {
    const worker = compose['worker.yaml'].services.worker;
    expect(composeStorageProblems(worker)).toEqual([]);
    const bare = clone(worker);
    for (const key of ['cap_add', 'device_cgroup_rules', 'security_opt']) delete bare[key];
    bare.volumes = bare.volumes.filter((v: string) => v !== '/dev:/dev').map((v: string) => v.replace(/:rshared$/, ''));
    bare.privileged = true;
    expect(composeStorageProblems(bare)).toEqual([
      'the sandbox storage /var/lib/drydock/sandboxes is not bound rshared from the same path',
      'the worker cannot mount (no SYS_ADMIN)',
      'the worker may not use the loop devices',
      "the host's /dev is not bound",
      "AppArmor's profile refuses mount",
      'the worker is privileged',
    ]);
  });

  test('workers and serve share the artifact store; serve listens where its port is published', () => {
    const artifactsOf = (s: Obj) => composeBinds(s).find((b: Obj) => b.target === '/var/lib/drydock/artifacts')?.source;
    const serve = compose['control.yaml'].services['drydock-serve'];
    expect(artifactsOf(serve)).toBeDefined();
    expect(artifactsOf(serve)).toBe(artifactsOf(compose['worker.yaml'].services.worker));
    const env = composeServiceEnv(serve);
    expect(env.DRYDOCK_HTTP_HOST).toBe('0.0.0.0');
    expect(serve.ports.map((p: string) => p.split(':').pop())).toContain(env.DRYDOCK_HTTP_PORT);
    expect(serve.healthcheck.test.join(' ')).toContain(`:${env.DRYDOCK_HTTP_PORT}/readyz`);
  });

  test("the worker's stop grace is longer than its shutdown grace", () => {
    const grace = compose['worker.yaml'].services.worker.stop_grace_period as string;
    const m = /^(\d+)m$/.exec(grace);
    expect(m && Number(m[1]) * 60).toBeGreaterThan(workerShutdownGraceSeconds() + 15);
  });
});

describe('infra/k8s', () => {
  test('the control plane (PostgreSQL, Temporal, serve), and a worker per layout', () => {
    const names = (docs: K8sDoc[]) => docs.map((d) => `${d.file}: ${d.doc.kind}/${d.doc.metadata.name}`).sort();
    expect(names(k8sDocs.filter((d) => !d.file.includes('/')))).toEqual([
      'artifacts.yaml: PersistentVolumeClaim/drydock-artifacts',
      'config.yaml: ConfigMap/drydock-config',
      'namespace.yaml: Namespace/drydock',
      'postgresql.yaml: Service/drydock-postgresql',
      'postgresql.yaml: StatefulSet/drydock-postgresql',
      'serve.yaml: Deployment/drydock-serve',
      'serve.yaml: Ingress/drydock-serve',
      'serve.yaml: Service/drydock-serve',
      'temporal-setup.yaml: Job/drydock-temporal-setup',
      'temporal.yaml: Deployment/drydock-temporal',
      'temporal.yaml: Job/drydock-temporal-schema',
      'temporal.yaml: Service/drydock-temporal',
    ]);
    expect(names(k8sDocs.filter((d) => d.file.includes('/')))).toEqual([
      'docker-hosts/worker.yaml: DaemonSet/drydock-worker',
      'pods/sandboxes.yaml: Namespace/drydock-sandboxes',
      'pods/sandboxes.yaml: NetworkPolicy/drydock-sandboxes-deny-all',
      'pods/sandboxes.yaml: Role/drydock-sandboxes',
      'pods/sandboxes.yaml: RoleBinding/drydock-worker',
      'pods/sandboxes.yaml: ServiceAccount/drydock-worker',
      'pods/worker.yaml: DaemonSet/drydock-worker',
    ]);
  });

  test.each(k8sDocs.map((d) => [label(d), d.doc]))('%s is valid against the Kubernetes schema', (_, doc) => {
    expect(k8sSchemaProblems(doc)).toEqual([]);
  });

  test('every field is one the Kubernetes API has', () => {
    expect(k8sUnknownFields(k8sDocs.map((d) => d.doc))).toEqual([]);
  });

  test('the schema and the field check reject broken manifests', () => {
    const nameless = clone(workerSet());
    delete nameless.spec.template.spec.containers[0].name;
    expect(k8sSchemaProblems(nameless).join()).toMatch(/containers\/0 must have required property name/);
    const wrongType = clone(serveDeployment());
    wrongType.spec.replicas = 'two';
    expect(k8sSchemaProblems(wrongType).join()).toMatch(/replicas must be integer/);
    const typo = clone(workerSet());
    const mount = typo.spec.template.spec.containers[0].volumeMounts[0];
    mount.mountpath = mount.mountPath;
    delete mount.mountPath;
    expect(k8sSchemaProblems(typo).join()).toMatch(/volumeMounts\/0 must have required property mountPath/);
    const extra = clone(workerSet());
    extra.spec.template.spec.containers[0].volumeMounts[0].readonly = true;
    expect(k8sUnknownFields([extra]).join()).toMatch(/'"readonly"' does not exist in type 'IVolumeMount'/);
  });

  test("everything is in the drydock namespace, but the sandboxes' Role, its binding and their network policy in theirs", () => {
    expect(find('Namespace', 'drydock')).toBeDefined();
    for (const d of k8sDocs.filter((d) => d.doc.kind !== 'Namespace')) {
      const expected = ['Role', 'RoleBinding', 'NetworkPolicy'].includes(d.doc.kind) ? 'drydock-sandboxes' : 'drydock';
      expect(`${label(d)}: ${d.doc.metadata.namespace}`).toBe(`${label(d)}: ${expected}`);
    }
  });

  test("the sandboxes' namespace denies all its pods every connection in and out", () => {
    // No ingress or egress rule at all: nothing is allowed (the egress proxy is a socket on the node, not the network).
    expect(find('NetworkPolicy', 'drydock-sandboxes-deny-all', 'pods').spec).toEqual({
      podSelector: {},
      policyTypes: ['Ingress', 'Egress'],
    });
  });

  test('every image is one infra/images.sh builds, but the Temporal UI; Temporal images are the Go-built server version', () => {
    const containers = k8sDocs.flatMap(({ doc }) => {
      const pod = doc.spec?.template?.spec;
      return pod ? [...(pod.initContainers ?? []), ...pod.containers] : [];
    });
    const images = new Set(containers.map((c: Obj) => c.image as string));
    expect([...images].filter((i) => i.startsWith('drydock:'))).toEqual([IMAGE]);
    const composeImages = composeFiles.flatMap((f) => Object.values(compose[f].services as Obj).map((s) => s.image));
    const goModule = readFileSync(path.join(root, 'infra/temporal-server/go.mod'), 'utf8');
    const serverVersion = /^require go\.temporal\.io\/server v(\S+)$/m.exec(goModule)![1];
    const built = [IMAGE, `drydock-temporal:${serverVersion}`, 'drydock-postgresql:17'];
    const script = readFileSync(path.join(root, 'infra/images.sh'), 'utf8');
    expect(script).toContain('"drydock-temporal:$TEMPORAL_VERSION"');
    expect(script).toContain('"drydock-postgresql:17"');
    // The UI has no source to build from here (docs/operations.md): the one image pulled.
    const pulled = [...images, ...composeImages].filter((i: string) => !built.includes(i));
    expect([...new Set(pulled)]).toEqual(['temporalio/ui:2.42.1']);
    expect(composeImages.filter((i: string) => i.startsWith('drydock-temporal:')).length).toBe(3);
    for (const image of [...images, ...composeImages]) expect(image).not.toMatch(/:latest$|^[^:]+$/);
  });

  test('drydock containers set only variables drydock reads, secrets only from Secrets, and they parse', () => {
    for (const workload of [workerSet(), podWorkerSet(), serveDeployment()]) {
      for (const container of workload.spec.template.spec.containers) {
        const { env, names, problems } = k8sContainerEnv(container);
        expect(unknownVariables(names)).toEqual([]);
        expect(problems).toEqual([]);
        expect(() => loadConfig(env)).not.toThrow();
        expect(names).toContain('DATABASE_URL');
      }
    }
    const leaky = clone(serveDeployment());
    leaky.spec.template.spec.containers[0].env.push({ name: 'GITHUB_TOKEN', value: 'ghp_x' });
    expect(k8sContainerEnv(leaky.spec.template.spec.containers[0]).problems).toEqual([
      'GITHUB_TOKEN is a literal value, not from a Secret',
    ]);
  });

  test("the pod worker has API rights in the sandboxes' namespace, its data folder from the node at the same path, and nothing else", () => {
    const docs = layoutDocs('pods');
    expect(k8sPodWorkerProblems(podWorkerSet(), docs)).toEqual([]);
    const broken = clone(podWorkerSet());
    const pod = broken.spec.template.spec;
    pod.volumes.push({ name: 'docker-socket', hostPath: { path: DOCKER_SOCKET } });
    pod.serviceAccountName = 'default';
    delete pod.hostNetwork;
    pod.containers[0].securityContext.privileged = true;
    pod.containers[0].env.find((e: Obj) => e.name === 'DRYDOCK_K8S_NAMESPACE').value = 'elsewhere';
    expect(k8sPodWorkerProblems(broken, docs)).toEqual([
      `the node's folders mounted are /var/lib/drydock, ${DOCKER_SOCKET}, not the data folder alone`,
      'the worker has privileges',
      'the worker is not on the node network',
      'its service account may not pods: create in elsewhere',
      'its service account may not pods: get in elsewhere',
      'its service account may not pods: list in elsewhere',
      'its service account may not pods: delete in elsewhere',
      'its service account may not pods/exec: create in elsewhere',
      'its service account may not pods/log: get in elsewhere',
      'its service account may not events: list in elsewhere',
      'no namespace elsewhere',
    ]);
  });

  test("the control plane's files (scripts, dynamic config) are infra/compose's own, from the ConfigMap drydock-files", () => {
    const keys = k8sDocs.flatMap(({ doc }) => {
      const pod = doc.spec?.template?.spec;
      if (!pod) return [];
      const files = (pod.volumes ?? [])
        .filter((v: Obj) => v.configMap?.name === 'drydock-files')
        .map((v: Obj) => v.name);
      return pod.containers.flatMap((c: Obj) =>
        (c.volumeMounts ?? []).filter((m: Obj) => files.includes(m.name)).map((m: Obj) => m.subPath),
      );
    });
    expect([...new Set(keys)].sort()).toEqual([
      'drydock.yaml',
      'postgres-init.sh',
      'temporal-schema.sh',
      'temporal-setup.sh',
    ]);
    for (const key of keys)
      expect(existsSync(path.join(composeDir, key)) || existsSync(path.join(composeDir, 'dynamicconfig', key))).toBe(
        true,
      );
  });

  test("the Docker hosts' worker DaemonSet mounts the node's Docker socket, egress folder and sandbox storage at the same paths, and is named by its node", () => {
    expect(k8sWorkerProblems(workerSet())).toEqual([]);
    const broken = clone(workerSet());
    broken.spec.template.spec.volumes.find((v: Obj) => v.name === 'data').hostPath.path = '/srv/drydock';
    broken.spec.template.spec.containers[0].env.find((e: Obj) => e.name === 'DRYDOCK_HOST_ID').valueFrom.fieldRef = {
      fieldPath: 'metadata.name',
    };
    broken.spec.template.spec.terminationGracePeriodSeconds = 30;
    const worker = broken.spec.template.spec.containers[0];
    worker.volumeMounts = worker.volumeMounts.filter((m: Obj) => m.mountPath !== '/dev');
    delete worker.securityContext;
    expect(k8sWorkerProblems(broken)).toEqual([
      'the egress folder /var/lib/drydock/egress is not mounted from the same path on the node',
      'DRYDOCK_HOST_ID does not come from spec.nodeName',
      'the sandbox storage /var/lib/drydock/sandboxes is not mounted Bidirectional from the same path on the node',
      "the node's /dev is not mounted",
      'the worker is not privileged',
      "terminationGracePeriodSeconds is not above the worker's shutdown grace",
    ]);
    // The base image is built on the node's engine before the worker starts.
    const init = broken.spec.template.spec.initContainers[0];
    expect(init.command.join(' ')).toContain('sandbox-images/base-image.ts');
    expect(init.volumeMounts.map((m: Obj) => m.mountPath)).toContain(DOCKER_SOCKET);
  });

  test('selectors, references and ports fit together', () => {
    const workloads = ['DaemonSet', 'Deployment', 'StatefulSet'].flatMap((kind) =>
      k8sDocs.filter((d) => d.doc.kind === kind).map((d) => d.doc),
    );
    for (const workload of workloads) {
      expect(workload.spec.template.metadata.labels).toMatchObject(workload.spec.selector.matchLabels);
      for (const v of workload.spec.template.spec.volumes ?? []) {
        if (v.persistentVolumeClaim)
          expect(find('PersistentVolumeClaim', v.persistentVolumeClaim.claimName)).toBeDefined();
      }
    }
    const serve = containerOf(serveDeployment(), 'serve');
    const { env } = k8sContainerEnv(serve);
    expect(env.DRYDOCK_HTTP_HOST).toBe('0.0.0.0');
    expect(serve.ports).toEqual([{ name: 'http', containerPort: Number(env.DRYDOCK_HTTP_PORT) }]);
    expect(serve.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'http' });
    expect(serve.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'http' });
    const service = find('Service', 'drydock-serve');
    expect(serveDeployment().spec.template.metadata.labels).toMatchObject(service.spec.selector);
    expect(service.spec.ports[0].targetPort).toBe('http');
    const backend = find('Ingress', 'drydock-serve').spec.rules[0].http.paths[0].backend.service;
    expect(backend).toEqual({ name: 'drydock-serve', port: { name: service.spec.ports[0].name } });
    // Workers and serve share the artifact store.
    const artifacts = (w: Obj, c: string) => {
      const m = containerOf(w, c).volumeMounts.find((m: Obj) => m.mountPath === '/var/lib/drydock/artifacts');
      return w.spec.template.spec.volumes.find((v: Obj) => v.name === m?.name)?.persistentVolumeClaim?.claimName;
    };
    expect(artifacts(workerSet(), 'worker')).toBe('drydock-artifacts');
    expect(artifacts(podWorkerSet(), 'worker')).toBe('drydock-artifacts');
    // Every Service selects the pods of one workload, on a port it names.
    for (const service of k8sDocs.filter((d) => d.doc.kind === 'Service').map((d) => d.doc)) {
      const target = workloads.find((w) =>
        Object.entries(service.spec.selector).every(([k, v]) => w.spec.template.metadata.labels[k] === v),
      );
      const ports = target?.spec.template.spec.containers.flatMap((c: Obj) => c.ports ?? []).map((p: Obj) => p.name);
      expect(`${service.metadata.name}: ${ports?.includes(service.spec.ports[0].targetPort)}`).toBe(
        `${service.metadata.name}: true`,
      );
    }
    expect(artifacts(serveDeployment(), 'serve')).toBe('drydock-artifacts');
  });
});

test('the Dockerfile sets only variables drydock reads', () => {
  const dockerfile = readFileSync(path.join(root, 'infra/Dockerfile'), 'utf8');
  const names = [...dockerfile.matchAll(/^(?:ENV|\s+)\s*([A-Z_]+)=/gm)]
    .map((m) => m[1])
    .filter((n) => n !== 'NODE_ENV');
  expect(names).toContain('DRYDOCK_DATA_DIR');
  expect(unknownVariables(names)).toEqual([]);
});
