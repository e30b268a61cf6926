/**
 * The workers' workflow code, bundled by the SDK (webpack: about 3 CPU-seconds and 4 MB) once per
 * change of what goes into it, and kept beside bin/bundled.js's bundles: every worker process
 * (serve's, `drydock worker`, a pod's, a test's) starts from the same file instead of bundling
 * again. What goes in, and so the file's name: every file under workflows/ (whose imports from
 * elsewhere are types only, which the lint enforces) and the lockfile (the SDK and the libraries
 * it bundles), and the plugins whose workflow interceptors go into it (a traced worker's tracing
 * plugin): each set of plugins has its own kept file, so a traced worker and a plain one beside it
 * do not remove each other's.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { bundleWorkflowCode, type BundlerPlugin } from '@temporalio/worker';

interface BundleCache {
  keptFile(name: string): string | undefined;
  cacheToWrite(): string;
  writeAtomically(file: string, text: string): void;
  removeOldBundles(cache: string, name: string, current: string): void;
}

const ROOT = path.resolve(__dirname, '..');
// Required at run time, not bundled into the CLI's bundle: bin/bundled.js finds the project (and
// so its cache) from its own folder.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const bundleCache = require(path.join(ROOT, 'bin', 'bundled.js')) as BundleCache;
const PREFIX = 'workflows';

/**
 * The kept bundle of workflows/ as they are now, with `plugins`' workflow interceptors, made if
 * missing. A worker given it must have the same plugins (their sinks receive what the
 * interceptors send).
 */
export async function workflowBundle(plugins: BundlerPlugin[] = []): Promise<{ codePath: string }> {
  // A plugin's interceptor modules are files of an installed package: the lockfile, in the hash,
  // fixes them; its name tells the sets apart ("workflows+OpenTelemetryPlugin-…").
  const prefix = [PREFIX, ...plugins.map((p) => p.name.replace(/[^A-Za-z0-9]/g, ''))].join('+');
  const name = `${prefix}-${await inputsHash()}.js`;
  const kept = bundleCache.keptFile(name);
  if (kept) return { codePath: kept };
  const { code } = await bundleWorkflowCode({
    workflowsPath: path.join(ROOT, 'workflows', 'index.ts'),
    plugins,
    logger: { trace() {}, debug() {}, info() {}, warn() {}, error: console.error, log() {} },
  });
  const cache = bundleCache.cacheToWrite();
  // Written whole, then renamed: a worker starting beside this one never reads half a bundle.
  bundleCache.writeAtomically(path.join(cache, name), code);
  bundleCache.removeOldBundles(cache, prefix, name);
  return { codePath: path.join(cache, name) };
}

/** Every file under workflows/ and the lockfile: their paths and contents. */
async function inputsHash(): Promise<string> {
  const hash = createHash('sha256');
  const files = [...(await filesUnder(path.join(ROOT, 'workflows'))), path.join(ROOT, 'package-lock.json')].sort();
  for (const f of files) hash.update(`${path.relative(ROOT, f)}\0`).update(await readFile(f));
  return hash.digest('hex').slice(0, 16);
}

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const nested = await Promise.all(
    entries.map((e) => (e.isDirectory() ? filesUnder(path.join(dir, e.name)) : [path.join(dir, e.name)])),
  );
  return nested.flat();
}
