/**
 * The workflow code, bundled once per change of it. webpack takes 10-20 s on
 * two cores, and every file of test/workflow and the end-to-end setup loads
 * the same bundle, so it is kept in data/cache/ under a hash of what goes into
 * it: every file under workflows/ (whose imports from elsewhere are types
 * only, which the lint enforces) and the lockfile (the SDK and libraries it
 * bundles). A run after a change elsewhere bundles nothing.
 */
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { bundleWorkflowCode, type WorkflowBundle } from '@temporalio/worker';

const root = path.resolve(__dirname, '..', '..');
const CACHE = path.join(root, 'data', 'cache');
const PREFIX = 'workflow-bundle-';

export async function workflowBundle(): Promise<WorkflowBundle> {
  const file = path.join(CACHE, `${PREFIX}${await inputsHash()}.js`);
  const cached = await readFile(file, 'utf8').catch(() => undefined);
  if (cached) return { code: cached };
  const bundle = await bundleWorkflowCode({
    workflowsPath: require.resolve('../../workflows'),
    logger: { trace() {}, debug() {}, info() {}, warn() {}, error: console.error, log() {} },
  });
  await mkdir(CACHE, { recursive: true });
  for (const old of (await readdir(CACHE)).filter((f) => f.startsWith(PREFIX))) {
    await rm(path.join(CACHE, old), { force: true });
  }
  // Written whole, then renamed: a reader never sees half a bundle.
  const partial = `${file}.${process.pid}.partial`;
  await writeFile(partial, bundle.code);
  await rename(partial, file);
  return bundle;
}

async function inputsHash(): Promise<string> {
  const hash = createHash('sha256');
  const files = [...(await filesUnder(path.join(root, 'workflows'))), path.join(root, 'package-lock.json')].sort();
  for (const f of files) hash.update(`${path.relative(root, f)}\0`).update(await readFile(f));
  return hash.digest('hex').slice(0, 16);
}

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const nested = await Promise.all(
    entries.map((e) => (e.isDirectory() ? filesUnder(path.join(dir, e.name)) : [path.join(dir, e.name)])),
  );
  return nested.flat();
}
