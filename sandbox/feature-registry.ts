/**
 * Where a dev container's features come from (sandbox/features.ts): an OCI
 * artifact on a registry the operator allows, fetched by the worker over the
 * registry's HTTP API v2 at a snapshot build only and pinned by digest, or a
 * folder of the repo read from the worker's mirror (sandbox/repo-files.ts).
 * A small, bounded client rather than a library: no npm package fetches an
 * OCI artifact without a Docker daemon or a CLI of its own, and drydock needs
 * two GETs (the manifest, its one tar layer) plus the registries' anonymous
 * token. Each body is size-capped and its sha256 checked against the digest
 * asked for; the layer's tar is read here (files and folders only, no links,
 * no path out of the feature) and never extracted on the host but into the
 * build's own folder. What a build pulled is kept under the worker's tools
 * folder, so a session's sandbox (which never pulls) finds the same content.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { rootCertificates } from 'node:tls';
import { Agent, ProxyAgent, fetch as undiciFetch, type Dispatcher } from 'undici';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import type { FileTree } from './provider';
import { RepoFileError, RepoTree } from './repo-files';
import { FeatureError, parseFeatureMetadata, type FeatureRequest, type ResolvedFeature } from './features';
import { formatImageReference, normalizeRegistry, type ImageReference } from '../workflows/rules/images';

/** The feature layer's media type (containers.dev's distribution spec). */
export const FEATURE_LAYER_TYPE = 'application/vnd.devcontainers.layer.v1+tar';
/** Bounds of one fetch. */
export const FEATURE_LIMITS = {
  manifestBytes: 1024 ** 2,
  layerBytes: 64 * 1024 ** 2,
  entries: 5_000,
  timeoutMs: 120_000,
};

/** A feature's files and what pins them. */
export interface FetchedFeature {
  files: FileTree & { kind: 'folder' };
  pinned: string;
}

/** How the environment's features are found: pulled when `pull` is given (a snapshot build), else what a build kept. */
export interface FeatureSource {
  /** The worker's folder for pulled features. */
  root: string;
  repo: string;
  pull?: { allowed: string[] };
  /** @default globalThis.fetch */
  fetchImpl?: typeof fetch;
}

/**
 * A fetch for the worker's own requests to registries that goes where the
 * worker's network lets it: Node's fetch ignores HTTPS_PROXY, so on a network
 * that reaches registries only through a proxy a feature could never be
 * fetched. This one sends each request through `HTTPS_PROXY` (https) or
 * `HTTP_PROXY` (http; lower-case names first, as curl reads them) unless
 * `NO_PROXY` names its host (`*`, a host, `.domain` or `domain` for its
 * subdomains, optionally `:port`), and trusts the system's CAs,
 * NODE_EXTRA_CA_CERTS and `extraCaFile` (DRYDOCK_EXTRA_CA_CERTS: the CA of an
 * intercepting proxy) for the registry and for an https proxy.
 */
export function proxiedFetch(opts: { env?: NodeJS.ProcessEnv; extraCaFile?: string } = {}): typeof fetch {
  const env = opts.env ?? process.env;
  const extra = [env.NODE_EXTRA_CA_CERTS, opts.extraCaFile].filter((f): f is string => !!f);
  // `ca` replaces Node's default list (which holds NODE_EXTRA_CA_CERTS): given only with an extra CA, and then whole.
  const tls = opts.extraCaFile ? { ca: [...rootCertificates, ...extra.map((f) => readFileSync(f, 'utf8'))] } : {};
  const direct = new Agent({ connect: tls });
  const through = (uri: string | undefined) =>
    uri ? new ProxyAgent({ uri, requestTls: tls, proxyTls: tls }) : undefined;
  const httpProxy = through(env.http_proxy || env.HTTP_PROXY);
  const httpsProxy = through(env.https_proxy || env.HTTPS_PROXY) ?? httpProxy;
  const noProxy = (env.no_proxy ?? env.NO_PROXY ?? '')
    .split(/[,\s]+/)
    .map((e) => e.trim().toLowerCase())
    .filter(Boolean);
  return ((input: string | URL | Request, init?: RequestInit) => {
    const url = new URL(input instanceof Request ? input.url : input);
    const proxy = url.protocol === 'https:' ? httpsProxy : httpProxy;
    const dispatcher: Dispatcher = proxy && !bypassesProxy(url, noProxy) ? proxy : direct;
    return undiciFetch(url, { ...(init as object), dispatcher });
  }) as unknown as typeof fetch;
}

/** Whether NO_PROXY's entries name `url`'s host (and port, when an entry gives one). */
export function bypassesProxy(url: URL, noProxy: string[]): boolean {
  const host = url.hostname.toLowerCase().replace(/^\[|\]$/g, '');
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  return noProxy.some((entry) => {
    if (entry === '*') return true;
    const m = /^(.*?)(?::(\d+))?$/.exec(entry.replace(/^\[|\](?=:|$)/g, ''))!;
    const name = m[1].replace(/^\*?\./, '');
    if (m[2] && m[2] !== port) return false;
    return host === name || host.endsWith(`.${name}`);
  });
}

/** Resolves every request to its files and metadata; a problem names the feature's field. */
export async function resolveFeatures(
  requests: FeatureRequest[],
  source: FeatureSource,
  tree: RepoTree,
): Promise<{ feature: ResolvedFeature; files: FileTree & { kind: 'folder' } }[]> {
  const out: { feature: ResolvedFeature; files: FileTree & { kind: 'folder' } }[] = [];
  for (const request of requests) {
    const fetched = request.ref
      ? await registryFeature(request, request.ref, source)
      : await localFeature(request, tree);
    const json = fetched.files.entries['devcontainer-feature.json'];
    const install = fetched.files.entries['install.sh'];
    if (install?.kind !== 'file') throw new FeatureError(`${request.field}: the feature has no install.sh`);
    const metadata = parseFeatureMetadata(
      json?.kind === 'file' ? json.data.toString('utf8') : undefined,
      request.field,
    );
    out.push({ feature: { request, metadata, pinned: fetched.pinned }, files: fetched.files });
  }
  return out;
}

async function localFeature(request: FeatureRequest, tree: RepoTree): Promise<FetchedFeature> {
  try {
    const found = await tree.resolve(request.folder!, request.field);
    if (found?.kind !== 'folder')
      throw new FeatureError(`${request.field}: ${request.folder} is not a folder of the repository`);
    const files = await tree.tree(found.object, 'folder', found.path);
    return { files: files as FileTree & { kind: 'folder' }, pinned: `git:${found.object}` };
  } catch (err) {
    if (err instanceof RepoFileError) throw new FeatureError(err.message);
    throw err;
  }
}

/**
 * The index file of a reference, as `repo`'s snapshot build pulled it, in the
 * worker's folder: the repo's own, so a session installs what its snapshot
 * build pinned, not what another repo's later pull of the same (moved) tag
 * found, and a repo whose builds never pulled it finds none.
 */
function indexOf(root: string, repo: string, ref: ImageReference): string {
  const key = `${repo}\n${formatImageReference(ref)}`;
  return path.join(root, 'refs', createHash('sha256').update(key).digest('hex'));
}

async function registryFeature(
  request: FeatureRequest,
  ref: ImageReference,
  source: FeatureSource,
): Promise<FetchedFeature> {
  const name = formatImageReference(ref);
  let layer: string | undefined;
  if (source.pull) {
    const allowed = source.pull.allowed.map(normalizeRegistry);
    if (!allowed.includes(ref.registry))
      throw new FeatureError(
        `${request.field}: the feature's registry ${ref.registry} is not allowed for ${source.repo} ` +
          `(allowed: ${allowed.join(', ') || 'none'}): allow it with ` +
          `'drydock repo add ${source.repo} --allow-registry ${ref.registry}' or DRYDOCK_ALLOWED_REGISTRIES`,
      );
    layer = await pullFeature(ref, source, request.field);
  } else {
    layer = await readFile(indexOf(source.root, source.repo, ref), 'utf8').catch(() => undefined);
    if (!layer)
      throw new FeatureError(
        `${request.field}: the feature ${name} was not pulled on this worker's host: a snapshot build pulls it ` +
          "from an allowed registry ('drydock snapshot build')",
      );
  }
  const blob = await readFile(blobPath(source.root, layer));
  if (sha256(blob) !== layer)
    throw new FeatureError(`${request.field}: the kept copy of ${name} does not match ${layer}`);
  return { files: filesOfTar(unzipped(blob, request.field), request.field), pinned: layer };
}

const blobPath = (root: string, digest: string) => path.join(root, 'blobs', digest.replace(':', '-'));
const sha256 = (data: Buffer) => `sha256:${createHash('sha256').update(data).digest('hex')}`;

/** Pulls the feature's manifest and layer (pinned, checked), keeps them; returns the layer's digest. */
async function pullFeature(ref: ImageReference, source: FeatureSource, field: string): Promise<string> {
  const client = new RegistryClient(ref, source.fetchImpl ?? fetch, field);
  const manifest = await client.get(
    `manifests/${ref.digest ?? ref.tag}`,
    'application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json',
    FEATURE_LIMITS.manifestBytes,
    ref.digest,
  );
  const layers = (
    JSON.parse(manifest.toString('utf8')) as { layers?: { mediaType?: string; digest?: string; size?: number }[] }
  ).layers;
  const layer = layers?.length === 1 ? layers[0] : undefined;
  if (!layer || layer.mediaType !== FEATURE_LAYER_TYPE || !/^sha256:[0-9a-f]{64}$/.test(layer.digest ?? ''))
    throw new FeatureError(
      `${field}: ${formatImageReference(ref)} is not a dev container feature (one layer of ${FEATURE_LAYER_TYPE})`,
    );
  if ((layer.size ?? 0) > FEATURE_LIMITS.layerBytes)
    throw new FeatureError(
      `${field}: the feature's layer is ${layer.size} bytes, more than ${FEATURE_LIMITS.layerBytes}`,
    );
  const tar = await client.get(`blobs/${layer.digest}`, '*/*', FEATURE_LIMITS.layerBytes, layer.digest);
  await keep(blobPath(source.root, layer.digest!), tar);
  await keep(indexOf(source.root, source.repo, ref), Buffer.from(layer.digest!));
  return layer.digest!;
}

/** Writes a file whole (a temp name, then rename), so a reader never sees half of one. */
async function keep(file: string, data: Buffer): Promise<void> {
  await mkdir(path.dirname(file), { recursive: true });
  const temp = `${file}.${process.pid}.${Date.now()}`;
  await writeFile(temp, data);
  await rename(temp, file);
}

/** A loopback registry speaks plain HTTP (as Docker allows 127.0.0.0/8 without configuration); any other, HTTPS. */
export function registryBase(registry: string): string {
  const host = registry.replace(/:\d+$/, '');
  const loopback = host === 'localhost' || /^127\.\d+\.\d+\.\d+$/.test(host) || host === '[::1]';
  return `${loopback ? 'http' : 'https'}://${registry}/v2/`;
}

/** GETs of one repository of a registry, with the anonymous bearer token registries ask for. */
class RegistryClient {
  private token?: string;
  constructor(
    private readonly ref: ImageReference,
    private readonly fetchImpl: typeof fetch,
    private readonly field: string,
  ) {}

  /** The body of `path` (under /v2/<repository>/), at most `limit` bytes, checked against `digest` when given. */
  async get(what: string, accept: string, limit: number, digest?: string): Promise<Buffer> {
    const url = `${registryBase(this.ref.registry)}${this.ref.repository}/${what}`;
    let res = await this.request(url, accept);
    if (res.status === 401 && !this.token) {
      this.token = await this.anonymousToken(res.headers.get('www-authenticate') ?? '');
      res = await this.request(url, accept);
    }
    if (!res.ok)
      throw new FeatureError(
        `${this.field}: the registry answered ${res.status} for ${formatImageReference(this.ref)} (${what.split('/')[0]})`,
      );
    const body = await readCapped(res, limit, this.field);
    const got = sha256(body);
    const expected = digest ?? res.headers.get('docker-content-digest') ?? undefined;
    if (expected && got !== expected)
      throw new FeatureError(`${this.field}: the registry sent content of ${got}, not the ${expected} asked for`);
    return body;
  }

  /**
   * One GET, following at most 5 redirects by hand (registries send blobs to
   * their storage): off the registry's origin only to HTTPS on a host name
   * (never an address, so a registry cannot turn the worker on its own
   * network), and without the token.
   */
  private async request(url: string, accept: string): Promise<Response> {
    const origin = new URL(registryBase(this.ref.registry)).origin;
    let at = new URL(url);
    for (let hops = 0; ; hops++) {
      const own = at.origin === origin;
      const res = await this.fetchImpl(at, {
        headers: { accept, ...(this.token && own ? { authorization: `Bearer ${this.token}` } : {}) },
        redirect: 'manual',
        signal: AbortSignal.timeout(FEATURE_LIMITS.timeoutMs),
      }).catch((err: Error) => {
        throw new Error(`fetching ${at.toString()} failed: ${err.message}`); // transient: the activity retries
      });
      const location = res.status >= 300 && res.status < 400 ? res.headers.get('location') : null;
      if (!location) return res;
      const next = new URL(location, at);
      const address = /^[\d.]+$|^\[/.test(next.hostname) || next.hostname === 'localhost';
      if (hops >= 5 || (next.origin !== origin && (next.protocol !== 'https:' || address)))
        throw new FeatureError(
          `${this.field}: the registry redirected to ${next.origin}, which drydock does not follow ` +
            '(only HTTPS to a host name, at most 5 times)',
        );
      at = next;
    }
  }

  /** The registry's anonymous pull token (`WWW-Authenticate: Bearer realm=…`); its realm on the registry's own domain. */
  private async anonymousToken(challenge: string): Promise<string> {
    const params = Object.fromEntries([...challenge.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (!/^bearer /i.test(challenge) || !params.realm)
      throw new FeatureError(
        `${this.field}: the registry ${this.ref.registry} asks for credentials, which drydock does not send`,
      );
    const realm = new URL(params.realm);
    // ghcr.io's is ghcr.io, Docker Hub's auth.docker.io: the same registrable domain; an address only itself.
    const address = (host: string) => /^[\d.]+$|^\[/.test(host);
    const domain = (host: string) => (address(host) ? host : host.split('.').slice(-2).join('.'));
    if (realm.protocol !== 'https:' && registryBase(this.ref.registry).startsWith('https'))
      throw new FeatureError(`${this.field}: the registry's token service ${realm.origin} is not HTTPS`);
    if (domain(realm.hostname) !== domain(this.ref.registry.replace(/:\d+$/, '')))
      throw new FeatureError(`${this.field}: the registry's token service ${realm.host} is not on its own domain`);
    realm.searchParams.set('scope', `repository:${this.ref.repository}:pull`);
    if (params.service) realm.searchParams.set('service', params.service);
    const res = await this.request(realm.toString(), 'application/json');
    if (!res.ok) throw new FeatureError(`${this.field}: the registry's token service answered ${res.status}`);
    const body = JSON.parse((await readCapped(res, 64 * 1024, this.field)).toString('utf8')) as {
      token?: string;
      access_token?: string;
    };
    const token = body.token ?? body.access_token;
    if (!token) throw new FeatureError(`${this.field}: the registry's token service gave no token`);
    return token;
  }
}

async function readCapped(res: Response, limit: number, field: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  const reader = res.body?.getReader();
  for (;;) {
    const next = await reader?.read();
    if (!next || next.done) break;
    size += next.value.length;
    if (size > limit) {
      await reader!.cancel();
      throw new FeatureError(`${field}: the registry sent more than ${limit} bytes`);
    }
    chunks.push(Buffer.from(next.value));
  }
  return Buffer.concat(chunks);
}

/** The layer's tar: some publishers gzip it (the 1f 8b magic), within the layer's size bound. */
function unzipped(blob: Buffer, field: string): Buffer {
  if (blob[0] !== 0x1f || blob[1] !== 0x8b) return blob;
  try {
    return gunzipSync(blob, { maxOutputLength: FEATURE_LIMITS.layerBytes });
  } catch (err) {
    throw new FeatureError(`${field}: the feature's layer does not unpack: ${(err as Error).message}`);
  }
}

/**
 * A feature's tar as a tree of files: regular files and folders only (a
 * link, device or anything else is refused, naming it), every path inside
 * the feature. ustar with pax or GNU long names, as npm's tar writes them.
 */
export function filesOfTar(tar: Buffer, field: string): FileTree & { kind: 'folder' } {
  const root: FileTree & { kind: 'folder' } = { kind: 'folder', entries: {} };
  let longName: string | undefined;
  let count = 0;
  for (let at = 0; at + 512 <= tar.length;) {
    const header = tar.subarray(at, at + 512);
    if (header.every((b) => b === 0)) break;
    const text = (from: number, len: number) =>
      header
        .subarray(from, from + len)
        .toString('utf8')
        .replace(/\0.*$/s, '');
    const size = parseInt(text(124, 12).trim() || '0', 8);
    const type = String.fromCharCode(header[156] || 48);
    const data = tar.subarray(at + 512, at + 512 + size);
    at += 512 + Math.ceil(size / 512) * 512;
    if (++count > FEATURE_LIMITS.entries)
      throw new FeatureError(`${field}: the feature has more than ${FEATURE_LIMITS.entries} entries`);
    if (type === 'x' || type === 'L') {
      longName =
        type === 'L'
          ? data.toString('utf8').replace(/\0.*$/s, '')
          : /(?:^|\n)\d+ path=([^\n]*)\n/.exec(data.toString('utf8'))?.[1];
      continue;
    }
    if (type === 'g') continue;
    const prefix = text(345, 155);
    const name = longName ?? (prefix ? `${prefix}/${text(0, 100)}` : text(0, 100));
    longName = undefined;
    const parts = name.split('/').filter((p) => p && p !== '.');
    if (parts.includes('..') || name.startsWith('/'))
      throw new FeatureError(`${field}: the feature's entry "${name}" is outside its folder`);
    if (type !== '0' && type !== '5' && type !== '7')
      throw new FeatureError(
        `${field}: the feature's entry "${name}" is a link or a special file, which drydock does not copy`,
      );
    if (!parts.length) continue;
    let dir = root;
    for (const part of parts.slice(0, type === '5' ? parts.length : -1)) {
      const next = (dir.entries[part] ??= { kind: 'folder', entries: {} });
      if (next.kind !== 'folder') throw new FeatureError(`${field}: the feature's "${name}" is a file and a folder`);
      dir = next;
    }
    if (type !== '5') {
      const mode = parseInt(text(100, 8).trim() || '644', 8) & 0o111 ? 0o755 : 0o644;
      dir.entries[parts[parts.length - 1]] = { kind: 'file', mode, data: Buffer.from(data) };
    }
  }
  return root;
}

/** Writes a tree into a new folder `at` (its parent exists); names are checked, nothing is written through a link. */
export async function writeFeatureTree(at: string, tree: FileTree): Promise<void> {
  if (tree.kind === 'file') {
    await writeFile(at, tree.data, { flag: 'wx', mode: tree.mode });
    return;
  }
  await mkdir(at, { mode: 0o755 });
  for (const [name, entry] of Object.entries(tree.entries)) {
    if (!name || name === '.' || name === '..' || name.includes('/')) throw new Error(`"${name}" is not a file's name`);
    await writeFeatureTree(path.join(at, name), entry);
  }
}
