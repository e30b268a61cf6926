/**
 * drydock's isolated builder (docs/builder.md): builds a repo's Dockerfile
 * whole (RUN, ADD, multi-stage, COPY --from, ARG, ONBUILD) and drydock's
 * layer on top, never on the host's Docker daemon. The build runs in a
 * container of its own: buildah as root inside gVisor (the runtime
 * runsc-builder, infra/builder-runtime.sh), `--network none` (its loopback
 * only), no Docker socket, all files it sees mounted from one folder of this
 * build, read-only but its output. Its network is drydock's egress proxy
 * (sandbox/egress.ts) with the build's allowlist, through the forwarder on
 * its loopback; the extra CAs reach its RUN steps (sandbox-images/builder/
 * drydock-build). Bounded in time (the container is killed past it),
 * memory, processes and disk (its image store is a tmpfs of that size).
 *
 * Base images are given, never pulled: the worker chose each (on the host,
 * not made from a repository, or pulled from an allowed registry) and pinned
 * it by id; `docker save` hands it over and the builder checks the id it
 * loaded. The saved archives are kept between builds in the worker's cache
 * folder, keyed by image id (an id names its content), so a base is saved
 * once (baseArchive). The result comes back as a `docker-archive` that `docker load`
 * puts into the host engine under the tag the caller chose.
 */
import { spawn } from 'node:child_process';
import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import {
  access,
  chmod,
  copyFile,
  cp,
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  readlink,
  rename,
  rm,
  stat,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Logger } from '../platform/log';
import { archiveLayersProblem, archiveNamesProblem, readArchiveNames, type BaseLayers } from './build-archive';
import { withoutCopyLink } from './dockerfile-bases';
import { plainLogText } from '../platform/scrub';
import { openEgressProxy, refusedTargets, type EgressProxy, type EgressRule } from './egress';

/** The Docker runtime builds run under (infra/builder-runtime.sh registers it). */
export const BUILDER_RUNTIME = 'runsc-builder';

/** What package managers of a build need, beside the operator's rules for the repo. */
export const PACKAGE_REGISTRIES: EgressRule[] = [
  'deb.debian.org',
  'security.debian.org',
  'archive.ubuntu.com',
  'security.ubuntu.com',
  'dl-cdn.alpinelinux.org',
  'registry.npmjs.org',
  'registry.yarnpkg.com',
  'pypi.org',
  'files.pythonhosted.org',
].map((host) => ({ host }));

/** A build's bounds. */
export interface BuildLimits {
  /**
   * Wall time before the builder is killed (DRYDOCK_BUILD_TIMEOUT, at most
   * 30 min). @default 480_000 (8 min): within the 40 minutes of the activities
   * that build (startSnapshotBuild, provisionSandbox), so a build past it
   * fails named instead of being retried whole.
   */
  timeoutMs: number;
  /** Memory of the build's processes, bytes (the image store's tmpfs comes on top). @default 2 GiB */
  memoryBytes: number;
  /** Disk of the build (its image store, a tmpfs), bytes. @default 6 GiB */
  diskBytes: number;
  /** @default 2048 */
  pids: number;
  /** @default 2 */
  cpus: number;
}

export const BUILD_LIMITS: BuildLimits = {
  timeoutMs: 8 * 60_000,
  memoryBytes: 2 * 1024 ** 3,
  diskBytes: 6 * 1024 ** 3,
  pids: 2048,
  cpus: 2,
};

export interface IsolatedBuild {
  /** The builder's image (sandbox-images/builder-image.ts). */
  builderImage: string;
  /** The result's name in the host engine. */
  tag: string;
  /** Labels of the result; they win over any the Dockerfiles set. */
  labels: Record<string, string>;
  /** The repo's Dockerfile (its text), its context (a host folder), build args and stage; absent: the layer alone. */
  repo?: { dockerfile: string; context: string; args: Record<string, string>; target?: string };
  /**
   * drydock's layer over the repo's result (`FROM drydock-stage-repo`) or over a given base.
   * Absent (a repo's Dockerfile only): the result is the repo's own image, tagged `tag`.
   */
  layer?: string;
  /** A host folder of the dev container's features (sandbox/features.ts): `features/` of the layer's context. */
  features?: string;
  /** The images the build starts from, each pinned by id. */
  bases: { ref: string; id: string }[];
  egress: EgressRule[];
  /** PEM file of extra CAs (DRYDOCK_EXTRA_CA_CERTS). */
  extraCaCerts?: string;
  limits?: Partial<BuildLimits>;
  /** Names the build in logs and the egress record. */
  owner: string;
  log: Logger;
  /** Told the builder's current step and latest line as it prints them, at most every PROGRESS_EVERY_MS within a step. */
  onProgress?: (progress: BuildProgress) => void;
  /**
   * The worker's folder for what builds reuse: base images' `docker save`
   * archives, by image id (baseArchive). None: each build saves its bases anew.
   */
  cacheDir?: string;
}

/** Where a build is: its current step (`[2/3] STEP 4/6: RUN apt-get …`, or the builder's own phase) and latest line. */
export interface BuildProgress {
  step?: string;
  line?: string;
}

/** Within a step, a build's progress is told at most this often (a RUN step may print thousands of lines). */
export const PROGRESS_EVERY_MS = 1_000;
/** A line told as progress is cut to this many characters. */
const PROGRESS_LINE_CHARS = 200;

/**
 * A reader of the builder's output that tells `onProgress` each new step at
 * once and the latest line at most every PROGRESS_EVERY_MS. Steps are
 * buildah's `STEP n/m:` lines (with `[k/s]` in a multi-stage build) and
 * drydock-build's own `drydock-build:` lines.
 */
export function progressReader(onProgress: (progress: BuildProgress) => void, now = Date.now): (chunk: string) => void {
  let partial = '';
  let step: string | undefined;
  let toldAt = 0;
  return (chunk) => {
    const lines = (partial + chunk).split(/\r?\n|\r/);
    partial = lines.pop()!.slice(-PROGRESS_LINE_CHARS * 4);
    let line: string | undefined;
    let newStep = false;
    for (const raw of lines) {
      // The repo's RUN steps print it: no terminal sequence or control character reaches a person's terminal.
      const text = plainLogText(raw).replace(/\s+/g, ' ').trim().slice(0, PROGRESS_LINE_CHARS);
      if (!text) continue;
      if (/^(\[\d+\/\d+\] )?STEP \d+\/\d+: |^drydock-build: /.test(text)) {
        step = text;
        line = undefined;
        newStep = true;
      } else line = text;
    }
    if (!newStep && (line === undefined || now() - toldAt < PROGRESS_EVERY_MS)) return;
    toldAt = now();
    onProgress({ ...(step ? { step } : {}), ...(line ? { line } : {}) });
  };
}

/** A build that failed, with the end of its output. */
export class IsolatedBuildFailed extends Error {
  override name = 'IsolatedBuildFailed';
  constructor(
    message: string,
    readonly output: string,
    /** True when it was stopped at its time limit. */
    readonly timedOut = false,
    /** What the egress proxy refused it (`host:port`), the likely cause when a step could not fetch. */
    readonly refused: string[] = [],
  ) {
    super(message);
  }
}

/** The stage name the layer's FROM gives to the repo's result (drydock-build tags it so). */
export const REPO_STAGE = 'drydock-stage-repo';

/** This worker's builds by tag, each settling when its build ends (buildIsolated). */
const building = new Map<string, Promise<EgressProxy['counts']>>();

/**
 * Builds in the isolated builder and loads the result into the host engine;
 * returns the egress counts. Two builds of one content at once (a refresh
 * schedule's beside a person's `snapshot build`, two cold starts) would share
 * the builder container's name, and the second's removal of a leftover of
 * that name would kill the first: so they run one after the other, and the
 * second takes the first's image when it made one.
 */
export function buildIsolated(build: IsolatedBuild): Promise<EgressProxy['counts']> {
  const earlier = building.get(build.tag);
  const mine = (async () => {
    const counts = await earlier?.catch(() => undefined);
    if (counts && (await runDocker(['image', 'inspect', build.tag], 60_000)).code === 0) return counts;
    if (!build.cacheDir) return buildOnce(build);
    const key = await buildKey(build);
    if (await reuseResult(build.cacheDir, key, build.tag)) {
      build.log.info({ owner: build.owner, tag: build.tag, key }, 'isolated build reused: the same content was built');
      return { allowed: 0, refused: 0, dropped: 0 };
    }
    const made = await buildOnce(build);
    await keepResult(build.cacheDir, key, build.tag).catch((err: unknown) =>
      build.log.warn({ err, tag: build.tag }, "the build's result was not recorded for reuse"),
    );
    return made;
  })();
  building.set(build.tag, mine);
  const forget = () => {
    if (building.get(build.tag) === mine) building.delete(build.tag);
  };
  mine.then(forget, forget);
  return mine;
}

/**
 * What a build's result is made of, hashed: the builder's image (its code),
 * the Dockerfiles, build args and stage, the labels, every base's name and
 * id, the egress rules and extra CAs (what its RUN steps may fetch), and
 * the context's and features' files (path, type, mode, bytes or link
 * target). Not the tag or the owner: the same content under another name is
 * the same image. Its mtimes are left out, as `docker build`'s cache leaves
 * them out.
 */
export async function buildKey(build: IsolatedBuild): Promise<string> {
  const hash = createHash('sha256');
  const part = (text: string) => hash.update(`${Buffer.byteLength(text)}:${text}`);
  const sorted = (record: Record<string, string>) => JSON.stringify(Object.entries(record).sort());
  part('drydock isolated build 1');
  part(build.builderImage);
  part(sorted(build.labels));
  part(build.repo ? JSON.stringify([build.repo.dockerfile, sorted(build.repo.args), build.repo.target ?? '']) : '-');
  part(build.layer ?? '-');
  part(JSON.stringify(build.bases.map((b) => [b.ref, b.id])));
  part(JSON.stringify(build.egress));
  part(build.extraCaCerts ? await readFile(build.extraCaCerts, 'utf8') : '-');
  part('context');
  if (build.repo) await hashTree(hash, build.repo.context, '');
  part('features');
  if (build.features) await hashTree(hash, build.features, '');
  return hash.digest('hex');
}

/** Every entry below `dir`, in name order: its path, type and mode, a file's bytes, a link's target. */
async function hashTree(hash: Hash, dir: string, rel: string): Promise<void> {
  for (const name of (await readdir(path.join(dir, rel))).sort()) {
    const entry = path.join(rel, name);
    const full = path.join(dir, entry);
    const info = await lstat(full);
    const head = `\0${entry}\0${(info.mode & 0o7777).toString(8)}\0`;
    if (info.isSymbolicLink()) hash.update(`l${head}${await readlink(full)}`);
    else if (info.isDirectory()) {
      hash.update(`d${head}`);
      await hashTree(hash, dir, entry);
    } else if (info.isFile()) {
      hash.update(`f${head}${info.size}\0`);
      for await (const chunk of createReadStream(full)) hash.update(chunk as Buffer);
    } else hash.update(`o${head}`);
  }
}

/** How many results the cache names (the least recently used go first; the images are the reaper's). @default 256 */
export const RESULTS_KEPT = 256;

const resultFile = (cacheDir: string, key: string) => path.join(cacheDir, 'results', key);

/**
 * Tags the image an earlier build of the same content made (its record in the
 * worker's cache folder, written after that build's result was checked and
 * loaded) as `tag`: no builder starts. False when there is none, or the engine
 * no longer has it (the record goes).
 */
export async function reuseResult(cacheDir: string, key: string, tag: string): Promise<boolean> {
  const file = resultFile(cacheDir, key);
  const id = await readFile(file, 'utf8').then(
    (text) => text.trim(),
    () => '',
  );
  if (!/^sha256:[0-9a-f]{64}$/.test(id)) return false;
  if ((await runDocker(['tag', id, tag], 60_000)).code !== 0) {
    await rm(file, { force: true });
    return false;
  }
  const now = new Date();
  await utimes(file, now, now).catch(() => undefined);
  return true;
}

/** Records the image `tag` names as the result of `key` (written whole, then renamed). */
export async function keepResult(cacheDir: string, key: string, tag: string): Promise<void> {
  const id = (await docker(['image', 'inspect', '-f', '{{.Id}}', tag], 60_000)).trim();
  const file = resultFile(cacheDir, key);
  await mkdir(path.dirname(file), { recursive: true });
  const partial = `${file}.${process.pid}.${Date.now()}.partial`;
  await writeFile(partial, `${id}\n`);
  await rename(partial, file);
  const names = (await readdir(path.dirname(file))).filter((f) => /^[0-9a-f]{64}$/.test(f));
  if (names.length <= RESULTS_KEPT) return;
  const entries = names.map((f) => path.join(path.dirname(file), f));
  const used = await Promise.all(entries.map(async (f) => ({ f, ms: (await stat(f)).mtimeMs })));
  used.sort((x, y) => y.ms - x.ms);
  for (const { f } of used.slice(RESULTS_KEPT)) if (f !== file) await rm(f, { force: true });
}

async function buildOnce(build: IsolatedBuild): Promise<EgressProxy['counts']> {
  const limits = { ...BUILD_LIMITS, ...build.limits };
  // Short: the egress socket's path must stay under 107 bytes.
  const work = await mkdtemp(path.join(tmpdir(), 'dd-build-'));
  let proxy: EgressProxy | undefined;
  const timings: Record<string, number> = {};
  const timed = async <T>(phase: string, fn: () => Promise<T>): Promise<T> => {
    const started = Date.now();
    try {
      return await fn();
    } finally {
      timings[phase] = Date.now() - started;
    }
  };
  try {
    const dirs = await timed('prepareMs', () => prepare(work, build));
    proxy = await openEgressProxy({
      socketPath: path.join(dirs.run, 'egress.sock'),
      sessionId: build.owner,
      step: 'build',
      rules: build.egress,
      log: build.log,
    });
    await timed('buildMs', () =>
      runBuilder(build, limits, dirs).catch((err: unknown) => {
        if (!(err instanceof IsolatedBuildFailed) || !proxy) throw err;
        throw new IsolatedBuildFailed(err.message, err.output, err.timedOut, refusedTargets(proxy.records));
      }),
    );
    build.onProgress?.({ step: "checking the result and loading it into the host's engine" });
    const archive = path.join(dirs.out, 'image.tar');
    // Written by root in the builder: it may name only this build's tag (sandbox/build-archive.ts).
    const problem = archiveNamesProblem(await readArchiveNames(archive), build.tag);
    if (problem) throw new IsolatedBuildFailed(`the build's result was not loaded: ${problem}, not ${build.tag}`, '');
    // Each layer the engine would take without reading its file must be a given base's (sandbox/build-archive.ts).
    const layers = await timed('layerCheckMs', async () =>
      archiveLayersProblem(archive, await Promise.all(build.bases.map(baseLayers))),
    );
    if (layers) throw new IsolatedBuildFailed(`the build's result was not loaded: ${layers}`, '');
    // Its base layers are empty files (drydock-build's export_image): the engine takes each from the
    // base it holds, so a base removed during the build fails the load, named.
    await timed('loadMs', () => docker(['load', '-q', '-i', archive], 10 * 60_000)).catch((err: Error) => {
      throw new IsolatedBuildFailed(
        `the build's result was not loaded (a base image it was given must still be in the engine): ${err.message}`,
        '',
      );
    });
    build.log.info({ owner: build.owner, tag: build.tag, ...timings }, 'isolated build timings');
    // buildah's own name for it (localhost/…) comes along: only the caller's tag stays.
    await docker(['rmi', `localhost/${build.tag}`], 60_000).catch(() => undefined);
    return proxy.counts;
  } finally {
    await proxy?.close();
    await rm(work, { recursive: true, force: true });
  }
}

/** A given base's layers as the engine holds it (by the id the worker pinned, which names its config and so its layers). */
async function baseLayers(base: { ref: string; id: string }): Promise<BaseLayers> {
  const inspect = await runDocker(['image', 'inspect', '-f', '{{json .RootFS.Layers}}', base.id], 60_000);
  let layers: unknown;
  try {
    layers = inspect.code === 0 && !inspect.timedOut ? JSON.parse(inspect.output) : undefined;
  } catch {
    layers = undefined;
  }
  if (!Array.isArray(layers) || !layers.every((l) => typeof l === 'string'))
    throw new IsolatedBuildFailed(
      `the build's result was not loaded: the engine has no layers of its base image ${base.ref} (${base.id}); ` +
        `a base image it was given must still be in the engine: ${inspect.output.trim().slice(-500)}`,
      '',
    );
  return { ref: base.ref, layers };
}

interface BuildDirs {
  bases: string;
  /** The base archives from the cache, each mounted read-only at /bases/<i>.tar. */
  archives: string[];
  dockerfile: string;
  run: string;
  out: string;
  context?: string;
}

/** The build's folder: the base images saved, the Dockerfiles, the egress folder, the output folder. */
async function prepare(work: string, build: IsolatedBuild): Promise<BuildDirs> {
  const dirs: BuildDirs = {
    bases: path.join(work, 'bases'),
    archives: [],
    dockerfile: path.join(work, 'dockerfile'),
    run: path.join(work, 'run'),
    out: path.join(work, 'out'),
    ...(build.repo ? { context: build.repo.context } : {}),
  };
  for (const dir of [dirs.bases, dirs.dockerfile, dirs.run, dirs.out]) await mkdir(dir);
  const list: string[] = [];
  for (const [i, base] of build.bases.entries()) {
    // By id: the archive holds exactly the pinned image; the builder names it as the Dockerfile does.
    if (build.cacheDir) {
      dirs.archives.push(await baseArchive(build.cacheDir, base.id));
      // The mount point of the cached archive (the folder itself is mounted read-only).
      await writeFile(path.join(dirs.bases, `${i}.tar`), '');
    } else await docker(['save', '-o', path.join(dirs.bases, `${i}.tar`), base.id], 10 * 60_000);
    list.push(`${i}.tar ${base.id} ${base.ref}`);
  }
  await writeFile(path.join(dirs.bases, 'list'), list.map((l) => `${l}\n`).join(''));
  if (build.layer !== undefined) await writeFile(path.join(dirs.dockerfile, 'Layer.Dockerfile'), build.layer);
  // drydock-build copies it into the layer's context; files and folders only (sandbox/feature-registry.ts wrote them).
  if (build.features) await cp(build.features, path.join(dirs.dockerfile, 'features'), { recursive: true });
  if (build.repo) {
    // BuildKit's COPY --link, which buildah refuses, is a plain COPY here (dockerfile-bases.ts).
    await writeFile(path.join(dirs.dockerfile, 'Dockerfile'), withoutCopyLink(build.repo.dockerfile));
    if (build.repo.target) await writeFile(path.join(dirs.dockerfile, 'target'), build.repo.target);
    const args = Object.entries(build.repo.args).map(([k, v]) => `${k}=${v.replace(/\n/g, ' ')}\n`);
    await writeFile(path.join(dirs.dockerfile, 'build-args'), args.join(''));
  }
  if (build.extraCaCerts) await copyFile(build.extraCaCerts, path.join(dirs.run, 'extra-ca.pem'));
  // The builder runs as root in gVisor; its only writable host folder is out/.
  await chmod(dirs.out, 0o777);
  return dirs;
}

/** How many base archives the cache keeps (the least recently used go first). @default 8 */
export const BASE_ARCHIVES_KEPT = 8;

/**
 * The `docker save` archive of image `id` in the cache, saved on first use:
 * written under a temporary name and renamed, so a build never sees half an
 * archive and two builds saving the same base at once both end with a whole
 * one. An id names its content, so the archive never goes stale; the least
 * recently used beyond BASE_ARCHIVES_KEPT are removed.
 */
export async function baseArchive(cacheDir: string, id: string): Promise<string> {
  const dir = path.join(cacheDir, 'bases');
  await mkdir(dir, { recursive: true });
  const archive = path.join(dir, `${id.replace(/^sha256:/, '').replace(/[^0-9a-f]/g, '')}.tar`);
  const kept = await access(archive).then(
    () => true,
    () => false,
  );
  if (kept) {
    const now = new Date();
    await utimes(archive, now, now);
    return archive;
  }
  const partial = `${archive}.${process.pid}.${Date.now()}.partial`;
  try {
    await docker(['save', '-o', partial, id], 10 * 60_000);
    await rename(partial, archive);
  } finally {
    await rm(partial, { force: true });
  }
  await pruneArchives(dir, archive);
  return archive;
}

/** Removes the least recently used archives beyond BASE_ARCHIVES_KEPT (never `keep`, nor a partial one). */
export async function pruneArchives(dir: string, keep: string): Promise<void> {
  const archives = (await readdir(dir)).filter((f) => f.endsWith('.tar')).map((f) => path.join(dir, f));
  const used = await Promise.all(archives.map(async (a) => ({ a, ms: (await stat(a)).mtimeMs })));
  used.sort((x, y) => y.ms - x.ms);
  for (const { a } of used.slice(BASE_ARCHIVES_KEPT)) if (a !== keep) await rm(a, { force: true });
}

/** Runs the builder container to its end, killing it past the time limit. */
async function runBuilder(build: IsolatedBuild, limits: BuildLimits, dirs: BuildDirs): Promise<void> {
  const name = `drydock-build-${createHash('sha256').update(`${build.owner}\0${build.tag}`).digest('hex').slice(0, 16)}`;
  await docker(['rm', '-f', name], 60_000).catch(() => undefined);
  const mounts = [
    `${dirs.bases}:/bases:ro`,
    `${dirs.dockerfile}:/dockerfile:ro`,
    `${dirs.run}:/run/drydock:ro`,
    `${dirs.out}:/out`,
    ...(dirs.context ? [`${dirs.context}:/context:ro`] : []),
    // Only this build's bases of the cache, one file each: never the others.
    ...dirs.archives.map((archive, i) => `${archive}:/bases/${i}.tar:ro`),
  ].flatMap((m) => ['-v', m]);
  const labels = Object.entries(build.labels).flatMap(([k, v]) => ['--label', `${k}=${v}`]);
  const args = [
    'run',
    '--rm',
    '--name',
    name,
    '--label',
    `drydock.builder=${build.owner}`,
    ...builderIsolation(limits),
    ...mounts,
    build.builderImage,
    build.tag,
    ...labels,
  ];
  build.log.info({ owner: build.owner, tag: build.tag, container: name }, 'building in the isolated builder');
  const onOutput = build.onProgress && progressReader(build.onProgress);
  let result = await runDocker(args, limits.timeoutMs, onOutput);
  if (!result.timedOut && result.code !== 0 && runtimeStartInterrupted(result.output)) {
    build.log.warn({ owner: build.owner, tag: build.tag }, "a RUN step's container did not start: building once more");
    await docker(['rm', '-f', name], 60_000).catch(() => undefined);
    result = await runDocker(args, limits.timeoutMs, onOutput);
  }
  if (result.timedOut) {
    await removeBuilderContainer(name, build.log);
    throw new IsolatedBuildFailed(
      `the build ran past its time limit of ${Math.round(limits.timeoutMs / 1000)} s and was stopped: ` +
        `the worker's DRYDOCK_BUILD_TIMEOUT sets it (at most 30m)`,
      result.output,
      true,
    );
  }
  if (result.code !== 0) {
    throw new IsolatedBuildFailed(`the build failed (exit code ${result.code})`, result.output);
  }
}

/**
 * A RUN step whose container the builder's runc could not start, before any of the repo's code
 * ran: runc's init opens its exec FIFO, and gVisor fails a blocking FIFO open that a signal
 * interrupts with EINTR where Linux restarts it (google/gvisor#14849), which a busy machine's
 * signals hit now and then. The build is tried once more.
 */
export function runtimeStartInterrupted(output: string): boolean {
  return /open exec fifo [^\n]*: interrupted system call/.test(output);
}

/** How often removeBuilderContainer asks the engine to remove a builder, and the pause after each failure. */
export const BUILDER_REMOVAL = { tries: 6, pauseMs: 2_000 };

/**
 * Removes the builder container `name` (one past its time limit) until the engine no
 * longer knows it: `docker rm -f` can fail under load (gVisor's kill past the engine's
 * deadline, a removal already in progress) and leave the build running, so each removal
 * is checked with `docker container inspect` and tried again, at most BUILDER_REMOVAL.tries
 * times. Returns whether it is gone; when it gives up, the log says so with the engine's
 * last words (the container may still run: `docker rm -f <name>` by hand).
 */
export async function removeBuilderContainer(name: string, log: Logger, bounds = BUILDER_REMOVAL): Promise<boolean> {
  let said = '';
  for (let attempt = 1; attempt <= bounds.tries; attempt++) {
    const removal = await runDocker(['rm', '-f', name], 60_000);
    const inspect = await runDocker(['container', 'inspect', '-f', '{{.State.Status}}', name], 60_000);
    if (!inspect.timedOut && inspect.code !== 0 && /no such (container|object)/i.test(inspect.output)) return true;
    said = removal.timedOut ? 'docker rm -f did not finish within 60 s' : removal.output.trim().slice(-500);
    log.warn(
      { container: name, attempt, said, state: inspect.output.trim().slice(-200) },
      'the builder was not removed yet',
    );
    if (attempt < bounds.tries) await new Promise((resolve) => setTimeout(resolve, bounds.pauseMs));
  }
  log.error(
    { container: name, tries: bounds.tries, said },
    'gave up removing the builder container: it may still run (docker rm -f it by hand)',
  );
  return false;
}

/**
 * The builder container's isolation: gVisor, no network but its loopback,
 * Docker's default capabilities plus SYS_ADMIN (buildah's mounts and chroots;
 * they act on gVisor's kernel, not the host's), no new privileges, limits.
 */
export function builderIsolation(limits: BuildLimits): string[] {
  const disk = Math.floor(limits.diskBytes / 1024 ** 2);
  return [
    '--runtime',
    BUILDER_RUNTIME,
    '--network',
    'none',
    '--cap-add',
    'SYS_ADMIN',
    '--security-opt',
    'no-new-privileges',
    '--memory',
    String(limits.memoryBytes + limits.diskBytes),
    '--pids-limit',
    String(limits.pids),
    '--cpus',
    String(limits.cpus),
    '--ulimit',
    'nofile=65536:65536',
    '--tmpfs',
    `/var/lib/containers:rw,exec,suid,dev,size=${disk}m`,
  ];
}

/** Runs `docker` and throws with its output when it fails. */
async function docker(args: string[], timeoutMs: number): Promise<string> {
  const result = await runDocker(args, timeoutMs);
  if (result.timedOut) throw new Error(`docker ${args[0]} did not finish within ${timeoutMs / 1000} s`);
  if (result.code !== 0) throw new Error(`docker ${args[0]} failed: ${result.output.slice(-2000)}`);
  return result.output;
}

/** The last 64 KiB of a command's output (stdout and stderr together). */
const OUTPUT_KEPT = 64 * 1024;

/** `onOutput`: told each piece of output as it comes (stdout and stderr alike). */
function runDocker(
  args: string[],
  timeoutMs: number,
  onOutput?: (chunk: string) => void,
): Promise<{ code: number; output: string; timedOut: boolean }> {
  return new Promise((resolve, reject) => {
    // process.env as it is now, said outright: under jest a test's PATH is not the real process's.
    const child = spawn('docker', args, { stdio: ['ignore', 'pipe', 'pipe'], env: process.env });
    let output = '';
    let timedOut = false;
    const keep = (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-OUTPUT_KEPT);
      onOutput?.(chunk.toString());
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, output, timedOut });
    });
  });
}
