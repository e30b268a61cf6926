// Runs a TypeScript entry of drydock (bin/drydock's cli/main.ts, a test's worker) from one
// esbuild bundle of it and the sources it imports (node_modules stay outside), built on first
// use and again whenever one of those sources changed. There is still no build step: a bundle
// is a cache, like tsx's. A process starts on about half the CPU time that tsx's per-file
// loading took (1.5 against 3.2 CPU-seconds for `drydock --help`), and the suites start many.
// Stack traces name the bundle: NODE_OPTIONS=--enable-source-maps maps them to the sources.
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..');
/**
 * Where bundles are kept: the project's cache; where that cannot be written (drydock's image runs
 * as a user with a read-only root, and has its bundle made at its build), a folder of this user's
 * own in the temp dir, trusted only while it is this user's and no one else can write to it.
 */
const PROJECT_CACHE = path.join(ROOT, 'node_modules', '.cache', 'drydock-bundles');
const USER_CACHE = path.join(os.tmpdir(), `drydock-bundles-${process.getuid()}`);

/** Runs `entry` (a path from the project's root) as the main module; process.argv is left as it is. */
async function runBundled(entry) {
  require(await bundleOf(entry));
}

/** The path of a bundle of `entry` that holds its sources as they are now: one kept, else a new one. */
async function bundleOf(entry) {
  const name = entry.replace(/\.ts$/, '').replace(/[^\w-]+/g, '-');
  for (const cache of caches()) {
    const meta = readJson(path.join(cache, `${name}.json`));
    const bundle = meta && path.join(cache, meta.bundle);
    // Another checkout's bundle (worktrees sharing one node_modules, two installs sharing the
    // user's cache) holds that checkout's sources, however unchanged they are.
    const ours = meta && meta.root === ROOT;
    if (ours && meta.stamp === stampOf(meta.inputs) && fs.existsSync(bundle)) return bundle;
  }
  const cache = cacheToWrite();
  return path.join(cache, await build(entry, name, cache));
}

/** The caches to read, the project's first. */
function caches() {
  return ownedAlone(USER_CACHE) ? [PROJECT_CACHE, USER_CACHE] : [PROJECT_CACHE];
}

/** A file kept under `name` in a cache (the workers' workflow bundle is kept here too): its path, else undefined. */
function keptFile(name) {
  return caches()
    .map((cache) => path.join(cache, name))
    .find((file) => fs.existsSync(file));
}

/** The cache a new file goes to: the project's where it can be written, else the user's own. */
function cacheToWrite() {
  return writable(PROJECT_CACHE) ? PROJECT_CACHE : userCache();
}

function writable(dir) {
  try {
    fs.mkdirSync(dir, { recursive: true });
    fs.accessSync(dir, fs.constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/** The user's cache in the temp dir, made if missing; refused if another user made it or can write to it. */
function userCache() {
  fs.mkdirSync(USER_CACHE, { recursive: true, mode: 0o700 });
  if (!ownedAlone(USER_CACHE)) throw new Error(`${USER_CACHE}: not this user's alone; remove it or make it so`);
  return USER_CACHE;
}

function ownedAlone(dir) {
  try {
    const s = fs.lstatSync(dir);
    return s.isDirectory() && s.uid === process.getuid() && (s.mode & 0o022) === 0;
  } catch {
    return false;
  }
}

/** Bundles `entry`; records its inputs' stamp unless one changed while it was built (the next start builds again). */
async function build(entry, name, cache) {
  const esbuild = require('esbuild');
  const started = Date.now();
  // A name of its own: a process starting beside this one uses a bundle only once the meta names it.
  const bundle = `${name}-${started.toString(36)}-${process.pid}.js`;
  const result = await esbuild.build({
    absWorkingDir: ROOT,
    entryPoints: [entry],
    outfile: path.join(cache, bundle),
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    packages: 'external',
    sourcemap: 'linked',
    keepNames: true,
    metafile: true,
    logLevel: 'error',
    plugins: [ownPaths],
    // The project's packages, wherever the bundle is kept (the user's cache is outside the project).
    banner: { js: `module.paths.unshift(${JSON.stringify(path.join(ROOT, 'node_modules'))});` },
  });
  await esbuild.stop(); // its service process would live as long as this one
  const inputs = [__filename, ...Object.keys(result.metafile.inputs).map((file) => path.join(ROOT, file))];
  const changedMeanwhile = inputs.some((file) => fs.statSync(file).mtimeMs >= started);
  if (!changedMeanwhile)
    writeAtomically(
      path.join(cache, `${name}.json`),
      JSON.stringify({ root: ROOT, inputs, stamp: stampOf(inputs), bundle }),
    );
  removeOldBundles(cache, name, bundle);
  return bundle;
}

/** Bundles of `name` but `current` older than ten minutes (a process started from one read it at its start). */
function removeOldBundles(cache, name, current) {
  for (const file of fs.readdirSync(cache)) {
    if (!file.startsWith(`${name}-`) || file.startsWith(current)) continue;
    const full = path.join(cache, file);
    try {
      if (Date.now() - fs.statSync(full).mtimeMs > 600_000) fs.rmSync(full, { force: true });
    } catch {
      // another start removed it
    }
  }
}

/**
 * Each source sees its own __dirname and __filename, as it does under tsx (the sources find their
 * migrations, images and helpers beside them). All share the bundle's `module`, so a source that
 * asks `require.main === module` would think itself the entry: refused, with what to write.
 */
const ownPaths = {
  name: 'drydock-own-paths',
  setup(build) {
    build.onLoad({ filter: /\.ts$/ }, (args) => {
      if (args.path.includes(`${path.sep}node_modules${path.sep}`)) return undefined;
      const source = fs.readFileSync(args.path, 'utf8');
      if (/require\.main\s*===?\s*module/.test(source)) {
        return {
          errors: [
            { text: 'a bundled source cannot ask require.main === module: write process.argv[1] === __filename' },
          ],
        };
      }
      if (!/__dirname|__filename/.test(source)) return { contents: source, loader: 'ts' };
      // On the first line, so the source map's lines stay the source's.
      const own = `const __dirname = ${JSON.stringify(path.dirname(args.path))}, __filename = ${JSON.stringify(args.path)}; `;
      return { contents: own + source, loader: 'ts' };
    });
  },
};

/** What a change to any input changes: each one's modification time and size. */
function stampOf(inputs) {
  try {
    return inputs
      .map((file) => {
        const s = fs.statSync(file);
        return `${file}:${s.mtimeMs}:${s.size}`;
      })
      .join('\n');
  } catch {
    return undefined; // an input is gone: build again
  }
}

function readJson(file) {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch {
    return undefined;
  }
}

function writeAtomically(file, text) {
  const temp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(temp, text);
  fs.renameSync(temp, file);
}

module.exports = { runBundled, bundleOf, keptFile, cacheToWrite, writeAtomically, removeOldBundles };

// `node bin/bundled.js <entry.ts> [args]`: the entry sees its args from process.argv[2].
if (require.main === module) {
  const [entry] = process.argv.splice(2, 1);
  runBundled(path.relative(ROOT, path.resolve(entry))).catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
