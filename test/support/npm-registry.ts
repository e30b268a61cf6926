/**
 * A local stand-in for the npm registry, on loopback, for tests and
 * benchmarks (which may send traffic only to loopback): it serves the
 * tarballs of one folder, with packuments made from them, so `npm ci` in a
 * sandbox installs through drydock's egress proxy without the internet.
 * Tarball paths follow the registry's (`/<name>/-/<file>.tgz`), so the
 * `resolved` URLs of a real lockfile work with `--registry` pointing here
 * (npm rewrites registry.npmjs.org to the configured registry).
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

interface Tarball {
  name: string;
  version: string;
  file: string;
  manifest: Record<string, unknown>;
  integrity: string;
  shasum: string;
}

export interface NpmRegistryStandIn {
  /** e.g. http://127.0.0.1:41234/ */
  url: string;
  port: number;
  /** "GET /path status" of every request, in order. */
  requests: string[];
  close(): Promise<void>;
}

/**
 * The package.json at the top of a package tarball. Its folder is usually
 * `package/`, but not always (DefinitelyTyped's @types tarballs use the
 * package's own name).
 */
async function manifestOf(file: string): Promise<unknown> {
  const { stdout: entries } = await run('tar', ['-tzf', file], { maxBuffer: 64 * 1024 ** 2 });
  const entry = entries.split('\n').find((e) => /^[^/]+\/package\.json$/.test(e));
  if (!entry) throw new Error(`${file}: no package.json at the top of the tarball`);
  const { stdout } = await run('tar', ['-xzOf', file, entry], { maxBuffer: 16 * 1024 ** 2 });
  return JSON.parse(stdout);
}

/** Reads each .tgz of `dir` (its package.json) and serves them on 127.0.0.1. */
export async function startNpmRegistry(dir: string): Promise<NpmRegistryStandIn> {
  const tarballs = new Map<string, Tarball>();
  for (const file of (await readdir(dir)).filter((f) => f.endsWith('.tgz'))) {
    const full = path.join(dir, file);
    const manifest = (await manifestOf(full)) as Record<string, unknown> & { name: string; version: string };
    const bytes = await readFile(full);
    tarballs.set(`${manifest.name}@${manifest.version}`, {
      name: manifest.name,
      version: manifest.version,
      file: full,
      manifest,
      integrity: `sha512-${createHash('sha512').update(bytes).digest('base64')}`,
      shasum: createHash('sha1').update(bytes).digest('hex'),
    });
  }
  const requests: string[] = [];
  let base = '';

  const tarballPath = (t: Tarball) => `/${t.name}/-/${t.name.split('/').pop()}-${t.version}.tgz`;

  const server = createServer((req, res) => {
    const url = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname);
    const answer = (status: number, body: Buffer | string, type = 'application/json') => {
      requests.push(`${req.method} ${url} ${status}`);
      res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
      res.end(req.method === 'HEAD' ? undefined : body);
    };
    const tarball = /^\/((?:@[^/]+\/)?[^/@]+)\/-\/(.+)\.tgz$/.exec(url);
    if (tarball) {
      const [, name, fileBase] = tarball;
      const version = fileBase.slice(name.split('/').pop()!.length + 1);
      const found = tarballs.get(`${name}@${version}`);
      if (!found) return answer(404, JSON.stringify({ error: 'not found' }));
      void readFile(found.file).then((bytes) => answer(200, bytes, 'application/octet-stream'));
      return;
    }
    const name = url.slice(1);
    const versions = [...tarballs.values()].filter((t) => t.name === name);
    if (versions.length === 0) return answer(404, JSON.stringify({ error: 'not found' }));
    const packument = {
      name,
      'dist-tags': { latest: versions.at(-1)!.version },
      versions: Object.fromEntries(
        versions.map((t) => [
          t.version,
          {
            ...t.manifest,
            dist: { tarball: `${base}${tarballPath(t).slice(1)}`, integrity: t.integrity, shasum: t.shasum },
          },
        ]),
      ),
    };
    answer(200, JSON.stringify(packument));
  });
  // The client closes idle connections, never the server: a server closing one as the client
  // reused it (its 5 s keep-alive timeout, on a busy machine) failed a request with ECONNRESET.
  server.keepAliveTimeout = 0;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  base = `http://127.0.0.1:${port}/`;
  return {
    url: base,
    port,
    requests,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** Makes a tiny package tarball (`npm pack`, local, no registry) in `dir`; returns its file. */
export async function packTinyPackage(dir: string, name: string, version: string, main: string): Promise<string> {
  const { mkdir, writeFile, mkdtemp } = await import('node:fs/promises');
  const src = await mkdtemp(path.join(dir, 'src-'));
  await writeFile(path.join(src, 'package.json'), JSON.stringify({ name, version, main: 'index.js' }, null, 2));
  await writeFile(path.join(src, 'index.js'), main);
  await mkdir(dir, { recursive: true });
  const { stdout } = await run('npm', ['pack', '--silent', '--pack-destination', dir], { cwd: src });
  return path.join(dir, stdout.trim().split('\n').pop()!);
}

/** The lockfile entry npm ci needs for a tarball served by the stand-in. */
export async function lockEntryOf(file: string): Promise<{ version: string; resolved: string; integrity: string }> {
  const bytes = await readFile(file);
  const { name, version } = (await manifestOf(file)) as { name: string; version: string };
  return {
    version,
    // As a lockfile made against the public registry says it; npm rewrites the host to --registry.
    resolved: `https://registry.npmjs.org/${name}/-/${name.split('/').pop()}-${version}.tgz`,
    integrity: `sha512-${createHash('sha512').update(bytes).digest('base64')}`,
  };
}
