/**
 * infra/k8s (the control plane and the pods layout's worker) deployed on the
 * cluster built here, as an operator would apply it, with what this cluster
 * lacks made up for in the test alone: its pods have no network (so every
 * drydock pod uses the node's, on throwaway loopback ports, with 127.0.0.1
 * for the Services' names, and the worker finds the API server there), it
 * has no storage provisioner (volumes are folders of the node), and images
 * are loaded onto the node, never pulled. Everything else is the files'.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { chown, mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { parseAllDocuments, stringify } from 'yaml';
import type { TestCluster } from './k8s-cluster';
import { freePort, projectRoot, temporalPorts } from './helpers';

const run = promisify(execFile);
type Obj = Record<string, any>;

export interface Deployment {
  /** The drydock namespace's name here (the files' `drydock`). */
  namespace: string;
  /** The sandboxes' namespace (the files' `drydock-sandboxes`). */
  sandboxes: string;
  serveUrl: string;
  temporalAddress: string;
  /** Tokens of drydock serve's API. */
  tokens: Record<string, string>;
  kubectl(...args: string[]): Promise<string>;
}

export interface DeployOptions {
  dir: string;
  images: { drydock: string; baseImage: string };
  /** DRYDOCK_REPOS of serve. */
  repos: string;
  /** Host folders the worker must see at the same path (file:// repos). */
  hostFolders: string[];
}

/** The documents of infra/k8s/*.yaml and infra/k8s/pods/*.yaml. */
function manifests(): Obj[] {
  const dirs = [path.join(projectRoot, 'infra/k8s'), path.join(projectRoot, 'infra/k8s/pods')];
  return dirs.flatMap((dir) =>
    readdirSync(dir)
      .filter((f) => f.endsWith('.yaml'))
      .flatMap((f) => parseAllDocuments(readFileSync(path.join(dir, f), 'utf8')).map((d) => d.toJS() as Obj)),
  );
}

/** Deploys, waits until serve answers, and returns how to reach it. */
export async function deploy(cluster: TestCluster, opts: DeployOptions): Promise<Deployment> {
  const id = randomBytes(3).toString('hex');
  const namespace = `drydock-${id}`;
  const sandboxes = `drydock-${id}-sandboxes`;
  const ports = { pg: await freePort(), temporal: await temporalPorts(), http: await freePort() };
  const apiPort = new URL(cluster.kubeconfig.getCurrentCluster()!.server).port;
  const kubectl = async (...args: string[]) =>
    (await run(cluster.kubectl, args, { env: { ...process.env, KUBECONFIG: cluster.kubeconfigFile } })).stdout;
  const tokens = { alice: `alice-${randomBytes(12).toString('hex')}`, bob: `bob-${randomBytes(12).toString('hex')}` };
  const adapt = adapter({ ...opts, namespace, sandboxes, ports, apiPort });
  await kubectl('label', 'node', 'localhost', 'drydock.dev/sandbox-node=true', '--overwrite');
  const docs = manifests().flatMap(adapt);
  // Namespaces first; then what the operator creates by hand (docs/operations.md); then the files.
  await apply(
    kubectl,
    docs.filter((d) => d.kind === 'Namespace'),
  );
  await apply(kubectl, operatorObjects(namespace, ports, tokens, opts.repos));
  await apply(
    kubectl,
    docs.filter((d) => d.kind !== 'Namespace'),
  );
  const serveUrl = `http://127.0.0.1:${ports.http}`;
  // Ready once Temporal answers for drydock's namespace (the setup Job makes it): a session started
  // before that is refused ("Namespace not found", seen under load).
  await until('drydock serve ready', async () => ((await fetch(`${serveUrl}/readyz`)).ok ? true : undefined), 600);
  await kubectl('-n', namespace, 'rollout', 'status', 'daemonset/drydock-worker', '--timeout=300s');
  return { namespace, sandboxes, serveUrl, temporalAddress: `127.0.0.1:${ports.temporal}`, tokens, kubectl };
}

async function apply(kubectl: (...args: string[]) => Promise<string>, docs: Obj[]): Promise<void> {
  const file = `/tmp/drydock-k8s-apply-${randomBytes(4).toString('hex')}.yaml`;
  await writeFile(file, docs.map((d) => stringify(d)).join('---\n'));
  try {
    await kubectl('apply', '-f', file);
  } finally {
    await rm(file, { force: true });
  }
}

export async function until<T>(what: string, probe: () => Promise<T | undefined>, seconds = 120): Promise<T> {
  for (let i = 0; i < seconds * 2; i++) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`${what} did not happen within ${seconds} s`);
}

/** The Secrets and the ConfigMap of files that docs/operations.md has the operator create. */
function operatorObjects(
  namespace: string,
  ports: { pg: number },
  tokens: Record<string, string>,
  repos: string,
): Obj[] {
  const auditKey = randomBytes(32).toString('hex');
  const secret = (name: string, data: Record<string, string>) => ({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name, namespace },
    stringData: data,
  });
  const compose = path.join(projectRoot, 'infra/compose');
  const files = ['postgres-init.sh', 'temporal-schema.sh', 'temporal-setup.sh', 'dynamicconfig/drydock.yaml'];
  return [
    secret('drydock-postgresql', {
      POSTGRES_PASSWORD: 'pg-pw',
      TEMPORAL_DB_PASSWORD: 'temporal-pw',
      DRYDOCK_DB_PASSWORD: 'drydock-pw',
    }),
    secret('drydock-database', { DATABASE_URL: `postgres://drydock:drydock-pw@127.0.0.1:${ports.pg}/drydock` }),
    secret('drydock-worker', { DRYDOCK_AUDIT_KEY: auditKey }),
    secret('drydock-serve', {
      DRYDOCK_AUDIT_KEY: auditKey,
      DRYDOCK_API_TOKENS: Object.entries(tokens)
        .map(([who, token]) => `${who}=${token}`)
        .join(','),
      DRYDOCK_REPOS: repos,
    }),
    {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'drydock-files', namespace },
      data: Object.fromEntries(files.map((f) => [path.basename(f), readFileSync(path.join(compose, f), 'utf8')])),
    },
  ];
}

interface Adaptation extends DeployOptions {
  namespace: string;
  sandboxes: string;
  ports: { pg: number; temporal: number; http: number };
  apiPort: string;
}

/** One document of the files as this cluster needs it (none for what it cannot have: a volume claim). */
function adapter(a: Adaptation): (doc: Obj) => Obj[] {
  const rename = (ns: string) => (ns === 'drydock' ? a.namespace : ns === 'drydock-sandboxes' ? a.sandboxes : ns);
  return (doc) => {
    if (doc.kind === 'PersistentVolumeClaim') return [];
    if (doc.kind === 'Namespace') doc.metadata.name = rename(doc.metadata.name);
    if (doc.metadata.namespace) doc.metadata.namespace = rename(doc.metadata.namespace);
    for (const s of doc.subjects ?? []) s.namespace = rename(s.namespace);
    if (doc.kind === 'ConfigMap' && doc.metadata.name === 'drydock-config') {
      Object.assign(doc.data, {
        TEMPORAL_ADDRESS: `127.0.0.1:${a.ports.temporal}`,
        DRYDOCK_DEV_MODE: '1',
        DRYDOCK_APPROVAL_REQUIRED: 'push',
        DRYDOCK_FORBID_SELF_APPROVAL: 'false',
        LOG_LEVEL: 'warn',
      });
    }
    const pod = doc.spec?.template?.spec;
    if (pod) adaptPod(doc, pod, a);
    return [doc];
  };
}

function setEnv(container: Obj, values: Record<string, string>): void {
  container.env = [
    ...(container.env ?? []).filter((e: Obj) => !(e.name in values)),
    ...Object.entries(values).map(([name, value]) => ({ name, value })),
  ];
}

function hostFolder(name: string, dir: string): Obj {
  return { name, hostPath: { path: dir, type: 'DirectoryOrCreate' } };
}

/** A pod of the files on the node's network, its volumes folders of the node, its images loaded. */
function adaptPod(doc: Obj, pod: Obj, a: Adaptation): void {
  pod.hostNetwork = true;
  pod.dnsPolicy = 'Default';
  for (const c of [...(pod.initContainers ?? []), ...pod.containers]) c.imagePullPolicy = 'Never';
  pod.volumes = (pod.volumes ?? []).map((v: Obj) =>
    v.persistentVolumeClaim ? hostFolder(v.name, path.join(a.dir, 'artifacts')) : v,
  );
  const [main] = pod.containers;
  // The probes' host is the pod's address, the node's here; the pods listen on loopback.
  for (const probe of [main.readinessProbe, main.livenessProbe]) {
    if (probe?.httpGet) probe.httpGet.host = '127.0.0.1';
    if (probe?.tcpSocket) probe.tcpSocket.host = '127.0.0.1';
  }
  const name = doc.metadata.name as string;
  if (name === 'drydock-postgresql') {
    delete doc.spec.volumeClaimTemplates;
    pod.volumes.push(hostFolder('data', path.join(a.dir, 'postgresql')));
    main.args = ['-p', String(a.ports.pg)];
    main.readinessProbe.exec.command.push('-p', String(a.ports.pg));
  }
  if (name === 'drydock-temporal-schema' || name === 'drydock-temporal') {
    setEnv(main, { POSTGRES_SEEDS: '127.0.0.1', DB_PORT: String(a.ports.pg) });
  }
  if (name === 'drydock-temporal') {
    main.env = main.env.filter((e: Obj) => e.name !== 'TEMPORAL_BROADCAST_ADDRESS');
    setEnv(main, { BIND_ON_IP: '127.0.0.1', FRONTEND_GRPC_PORT: String(a.ports.temporal) });
    main.ports[0].containerPort = a.ports.temporal;
  }
  if (name === 'drydock-serve') {
    doc.spec.replicas = 1;
    setEnv(main, { DRYDOCK_HTTP_HOST: '127.0.0.1', DRYDOCK_HTTP_PORT: String(a.ports.http) });
    main.ports[0].containerPort = a.ports.http;
  }
  if (name === 'drydock-worker') adaptWorker(pod, main, a);
}

/** The worker: the API server on loopback, its data folder a throwaway folder of the node, the test's images. */
function adaptWorker(pod: Obj, worker: Obj, a: Adaptation): void {
  const data = path.join(a.dir, 'node');
  pod.volumes.find((v: Obj) => v.name === 'data').hostPath.path = data;
  worker.volumeMounts.find((m: Obj) => m.name === 'data').mountPath = data;
  worker.volumeMounts.find((m: Obj) => m.name === 'artifacts').mountPath = path.join(data, 'artifacts');
  for (const [i, dir] of a.hostFolders.entries()) {
    pod.volumes.push({ name: `host-${i}`, hostPath: { path: dir, type: 'Directory' } });
    worker.volumeMounts.push({ name: `host-${i}`, mountPath: dir, readOnly: false });
  }
  // The worker fetches Node.js builds from the npm registry: this network intercepts TLS.
  pod.volumes.push({ name: 'ca', hostPath: { path: '/etc/ssl/certs/ca-certificates.crt', type: 'File' } });
  worker.volumeMounts.push({ name: 'ca', mountPath: '/etc/drydock/extra-ca.pem', readOnly: true });
  setEnv(worker, {
    KUBERNETES_SERVICE_HOST: '127.0.0.1',
    KUBERNETES_SERVICE_PORT: a.apiPort,
    DRYDOCK_DATA_DIR: data,
    DRYDOCK_EGRESS_DIR: path.join(data, 'egress'),
    DRYDOCK_AGENTS_DIR: path.join(data, 'agents'),
    DRYDOCK_K8S_NAMESPACE: a.sandboxes,
    DRYDOCK_K8S_IMAGE_PULL_POLICY: 'Never',
    DRYDOCK_BASE_IMAGE: a.images.baseImage,
    NODE_EXTRA_CA_CERTS: '/etc/drydock/extra-ca.pem',
  });
}

/** The node folders of a deployment, made before its pods start (PostgreSQL's owned by its user). */
export async function prepareFolders(dir: string, postgresUid: number): Promise<void> {
  for (const sub of ['artifacts', 'node', 'postgresql']) await mkdir(path.join(dir, sub), { recursive: true });
  await chown(path.join(dir, 'postgresql'), postgresUid, postgresUid);
}
