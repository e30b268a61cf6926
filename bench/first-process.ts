/**
 * bench/first-process: what running a sandbox's first command as its own
 * first process (SandboxSpec.first: the workspace's preparation on a warm
 * start) saves against the exec after the start it replaces, on the Docker
 * provider alone (no workflow, no database), interleaved round by round with
 * the `docker run` floor so that the three see the same load:
 *   exec after the start   create + start, then the command as an exec
 *   first process          create + start with the command as the first process
 *   floor                  `docker run -d --network none <image> sleep infinity`
 *
 *   npx tsx bench/first-process.ts     (RUNS=15 by default; IMAGE: drydock-base's newest)
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { DockerProvider, LABELS, type SandboxSpec } from '../sandbox';
import { atExit, benchMain } from './stack';
import { median, ratioTable, runsFromEnv, say, timingTable, type Row } from './table';

const run = promisify(execFile);
const RUNS = runsFromEnv(15);
const MiB = 1024 ** 2;
/** A first command of the preparation's kind: a few files written by the shell in the home folder. */
const COMMAND = ['sh', '-c', 'd=$HOME/.drydock; [ -d "$d" ] || mkdir -p "$d"; : > "$d/provisioned"'];

async function main(): Promise<string> {
  const image = process.env.IMAGE ?? (await newestBase());
  const root = await mkdtemp(path.join(tmpdir(), 'drydock-bench-first-'));
  const sandboxes = new DockerProvider(undefined, path.join(root, 'storage'));
  atExit(() => rm(root, { recursive: true, force: true }));
  const spec = (name: string): SandboxSpec => ({
    name,
    image,
    labels: { [LABELS.session]: name, [LABELS.host]: 'bench', [LABELS.expires]: new Date().toISOString() },
    cpus: 1,
    memoryBytes: 512 * MiB,
    pids: 256,
    tmpBytes: 64 * MiB,
    diskBytes: 1024 * MiB,
    egressDir: root,
  });
  const exec: Row = { name: 'create + start, then the command as an exec', ms: [] };
  const first: Row = { name: 'create + start, the command as the first process', ms: [] };
  const floor: Row = { name: 'floor: docker run -d --network none <image> sleep infinity', ms: [] };
  const timed = async (row: Row, fn: () => Promise<unknown>) => {
    const t = Date.now();
    await fn();
    row.ms.push(Date.now() - t);
  };
  for (let i = 0; i < RUNS; i++) {
    const name = `drydock-bench-first-${randomBytes(3).toString('hex')}`;
    atExit(() => sandboxes.destroy(name).then(() => sandboxes.destroy(`${name}-f`)));
    await timed(exec, async () => {
      await sandboxes.create(spec(name));
      const done = await sandboxes.exec(name, COMMAND);
      if (done.exitCode !== 0) throw new Error(`the exec exited ${done.exitCode}: ${done.stderr.toString()}`);
    });
    await timed(first, async () => {
      const made = await sandboxes.create({ ...spec(`${name}-f`), first: { argv: COMMAND } });
      if (made.first?.exitCode !== 0) throw new Error(`the first process: ${JSON.stringify(made.first)}`);
    });
    let id = '';
    await timed(floor, async () => {
      id = (await run('docker', ['run', '-d', '--network', 'none', image, 'sleep', 'infinity'])).stdout.trim();
    });
    // No removal is timed.
    await run('docker', ['rm', '-f', id]);
    await sandboxes.destroy(name);
    await sandboxes.destroy(`${name}-f`);
    say(`round ${i + 1}: exec ${exec.ms[i]} ms, first process ${first.ms[i]} ms, floor ${floor.ms[i]} ms`);
  }
  return [
    `Image ${image}; the command: \`${COMMAND[2]}\`.`,
    '',
    timingTable([exec, first, floor], 'sandbox up, its first command done'),
    '',
    ratioTable([
      { name: 'first process / exec after the start', value: median(first.ms) / median(exec.ms) },
      { name: 'exec after the start / floor (docker run)', value: median(exec.ms) / median(floor.ms) },
      { name: 'first process / floor (docker run)', value: median(first.ms) / median(floor.ms) },
    ]),
  ].join('\n');
}

async function newestBase(): Promise<string> {
  const { stdout } = await run('docker', ['images', '--format', '{{.Repository}}:{{.Tag}}', 'drydock-base']);
  const found = stdout.split('\n').find(Boolean);
  if (!found) throw new Error('no drydock-base image on this host: set IMAGE');
  return found;
}

benchMain('bench/first-process', main);
