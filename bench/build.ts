/**
 * bench/build: the isolated builder against `docker build` on the host, on
 * the same small Dockerfile (issue 51's goal 4: ≤ 1.5 × cold and cached).
 * FROM debian:trixie-slim (present here), one RUN, one COPY from the context:
 *
 *   cold     docker build --no-cache; the builder with an empty cache folder
 *            (each run's base saved and loaded anew)
 *   cached   docker build again (its layer cache); the builder again, under
 *            another tag, with the cache folder the cold build filled
 *            (sandbox/builder.ts: the base archives kept by image id, and the
 *            result of the same content, which is tagged, not built again)
 *   changed  the COPY's file changed (a one-file commit): docker build with its
 *            cache (FROM and RUN reused, the COPY run); the builder with the
 *            same cache folder (a new content: a whole build but the base's save)
 *
 * Each builder build has a tag of its own (as a snapshot's tag names its
 * content, a tag drydock has is never built again: this measures the builder), and is the
 * Dockerfile alone, as a snapshot without setup.root has it built (drydock's
 * layer is then made on the host in 1–2 s, no build: docs/builder.md). The
 * builder's own split (prepare: docker save or the cache; build: the
 * container; layer check: sandbox/build-archive.ts; load: docker load) is
 * printed beside. Everything it makes is removed at the end.
 *
 *   npx tsx bench/build.ts              RUNS=2 by default
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { buildIsolated, PACKAGE_REGISTRIES } from '../sandbox';
import { ensureBuilderImage } from '../sandbox-images/builder-image';
import { machineInfo, median, ratioTable, runsFromEnv, say, timingTable, type Row } from './table';

const BASE = 'debian:trixie-slim';
const DOCKERFILE = `FROM ${BASE}
RUN echo built > /built.txt && ls -la / > /listing.txt
COPY hello.txt /srv/hello.txt
`;
const made: string[] = [];

function docker(args: string[]): string {
  return execFileSync('docker', args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, DOCKER_BUILDKIT: '0' },
  })
    .toString()
    .trim();
}

/** `docker build` of the Dockerfile (a file beside the context) on the host (classic builder, no network), ms. */
function dockerBuild(dockerfile: string, context: string, cache: boolean): number {
  const tag = 'drydock-bench-build:docker';
  const started = Date.now();
  docker(['build', '-q', '--network', 'none', ...(cache ? [] : ['--no-cache']), '-f', dockerfile, '-t', tag, context]);
  made.push(tag);
  return Date.now() - started;
}

/** One build in the isolated builder, ms, and its phases as the builder logs them. */
async function builderBuild(
  builderImage: string,
  context: string,
  cacheDir: string,
  n: number,
): Promise<{ ms: number; phases: Record<string, number> }> {
  const tag = `drydock-bench-build:builder-${process.pid}-${n}`;
  let phases: Record<string, number> = {};
  const log = pino(
    { level: 'info' },
    {
      write: (line: string) => {
        const entry = JSON.parse(line) as Record<string, unknown>;
        const ms = (key: string) => (typeof entry[key] === 'number' ? entry[key] : 0);
        if (entry.msg === 'isolated build timings')
          phases = {
            prepare: ms('prepareMs'),
            build: ms('buildMs'),
            'layer check': ms('layerCheckMs'),
            load: ms('loadMs'),
          };
      },
    },
  );
  const started = Date.now();
  await buildIsolated({
    builderImage,
    tag,
    labels: { 'drydock.image': 'environment' },
    repo: { dockerfile: DOCKERFILE, context, args: {} },
    bases: [{ ref: BASE, id: docker(['image', 'inspect', '-f', '{{.Id}}', BASE]) }],
    egress: PACKAGE_REGISTRIES,
    owner: `bench ${n}`,
    log,
    cacheDir,
  });
  made.push(tag);
  return { ms: Date.now() - started, phases };
}

const phaseNote = (runs: { phases: Record<string, number> }[]) =>
  ['prepare', 'build', 'layer check', 'load']
    .map((p) => `${p} ${(median(runs.map((r) => r.phases[p])) / 1000).toFixed(p === 'layer check' ? 3 : 1)} s`)
    .join(', ');

async function main(): Promise<void> {
  const runs = runsFromEnv(2);
  if (process.env.BENCH_MACHINE !== '0') console.log(`${await machineInfo()}\n`);
  const builderImage = await ensureBuilderImage((line) => say(line));
  const context = await mkdtemp(path.join(tmpdir(), 'drydock-bench-build-'));
  await writeFile(path.join(context, 'hello.txt'), 'hello\n');
  const caches = [await mkdtemp(path.join(tmpdir(), 'drydock-bench-build-file-'))];
  const dockerfile = path.join(caches[0], 'Dockerfile');
  await writeFile(dockerfile, DOCKERFILE);
  try {
    const docker = { cold: [] as number[], cached: [] as number[], changed: [] as number[] };
    type Timed = { ms: number; phases: Record<string, number> };
    const builder = { cold: [] as Timed[], cached: [] as Timed[], changed: [] as Timed[] };
    for (let i = 0; i < runs; i++) {
      await writeFile(path.join(context, 'hello.txt'), `hello ${process.pid} ${i}\n`);
      say(`run ${i + 1} of ${runs}: docker build cold, cached`);
      docker.cold.push(dockerBuild(dockerfile, context, false));
      docker.cached.push(dockerBuild(dockerfile, context, true));
      const cacheDir = await mkdtemp(path.join(tmpdir(), 'drydock-bench-build-cache-'));
      caches.push(cacheDir);
      say(`run ${i + 1} of ${runs}: the isolated builder cold (empty cache)`);
      builder.cold.push(await builderBuild(builderImage, context, cacheDir, 3 * i));
      say(`run ${i + 1} of ${runs}: the isolated builder cached`);
      builder.cached.push(await builderBuild(builderImage, context, cacheDir, 3 * i + 1));
      await writeFile(path.join(context, 'hello.txt'), `changed ${process.pid} ${i}\n`);
      say(`run ${i + 1} of ${runs}: one file of the context changed: docker build, the isolated builder`);
      docker.changed.push(dockerBuild(dockerfile, context, true));
      builder.changed.push(await builderBuild(builderImage, context, cacheDir, 3 * i + 2));
    }
    const rows: Row[] = [
      { name: '`docker build` on the host, cold (`--no-cache`)', ms: docker.cold },
      { name: '`docker build` on the host, cached', ms: docker.cached },
      { name: 'isolated builder, cold', ms: builder.cold.map((r) => r.ms), note: phaseNote(builder.cold) },
      { name: 'isolated builder, cached (the same content, another tag)', ms: builder.cached.map((r) => r.ms) },
      { name: "`docker build`, cached, the COPY's file changed", ms: docker.changed },
      {
        name: "isolated builder, the COPY's file changed",
        ms: builder.changed.map((r) => r.ms),
        note: phaseNote(builder.changed),
      },
    ];
    console.log(`## A small Dockerfile (FROM ${BASE}, a RUN, a COPY): the isolated builder vs docker build\n`);
    console.log(`${timingTable(rows, 'build')}\n`);
    const ratio = (a: number[], b: number[]) => median(a) / median(b);
    console.log(
      ratioTable([
        { name: 'builder cold / docker build cold', value: ratio(rows[2].ms, docker.cold), goal: { max: 1.5 } },
        { name: 'builder cached / docker build cached', value: ratio(rows[3].ms, docker.cached), goal: { max: 1.5 } },
        { name: 'builder cached / builder cold', value: ratio(rows[3].ms, rows[2].ms) },
        { name: 'builder, a file changed / docker build, a file changed', value: ratio(rows[5].ms, docker.changed) },
      ]),
    );
  } finally {
    for (const tag of new Set(made)) execFileSync('docker', ['rmi', '-f', tag], { stdio: 'ignore' });
    for (const dir of [context, ...caches]) await rm(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
