/**
 * What a /workspace volume filled from the image costs at sandbox start:
 * container create + start of the hardened sandbox (anonymous volumes for
 * /workspace and the home folder, which Docker fills from the image) for an
 * image whose /workspace holds FILES small files, against the same image with
 * an empty /workspace, and with DRYDOCK_READONLY_ROOTFS=false (no volumes).
 * Prints the medians and their ratios.
 *
 *   npx tsx bench/workspace-volume.ts [FILES=20000] [RUNS=5]
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DockerProvider } from '../sandbox';
import { ensureBaseImage } from '../sandbox-images/base-image';

const FILES = Number(process.argv[2] ?? 20_000);
const RUNS = Number(process.argv[3] ?? 5);

async function imageWithFiles(base: string, files: number): Promise<string> {
  const tag = `drydock-bench-workspace:${files}`;
  const context = await mkdtemp(path.join(tmpdir(), 'drydock-bench-'));
  await writeFile(
    path.join(context, 'Dockerfile'),
    `FROM ${base}\nRUN cd /workspace && for d in $(seq 1 $((${files} / 100))); do mkdir -p d$d && for f in $(seq 1 100); do echo "file $d $f" > d$d/f$f.txt; done; done\n`,
  );
  execFileSync('docker', ['build', '--network', 'none', '-q', '-t', tag, context], { stdio: 'ignore' });
  await rm(context, { recursive: true });
  return tag;
}

async function startTimes(sandboxes: DockerProvider, image: string, readonlyRoot = true): Promise<number[]> {
  const egressDir = await mkdtemp(path.join(tmpdir(), 'drydock-bench-egress-'));
  const times: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const name = `drydock-bench-${process.pid}-${i}`;
    const started = process.hrtime.bigint();
    await sandboxes.create({
      name,
      image,
      labels: {},
      cpus: 1,
      memoryBytes: 512 * 1024 ** 2,
      pids: 128,
      tmpBytes: 64 * 1024 ** 2,
      diskBytes: 10 * 1024 ** 3,
      egressDir,
      readonlyRoot,
    });
    times.push(Number(process.hrtime.bigint() - started) / 1e6);
    await sandboxes.destroy(name);
  }
  await rm(egressDir, { recursive: true });
  return times;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main(): Promise<void> {
  const base = await ensureBaseImage();
  const sandboxes = new DockerProvider();
  const full = await imageWithFiles(base, FILES);
  const empty = await startTimes(sandboxes, base);
  const filled = await startTimes(sandboxes, full);
  const writable = await startTimes(sandboxes, full, false);
  console.log(
    `create+start, empty /workspace:        median ${median(empty).toFixed(0)} ms (${empty.map((t) => t.toFixed(0)).join(', ')})`,
  );
  console.log(
    `create+start, ${FILES} files in /workspace: median ${median(filled).toFixed(0)} ms (${filled.map((t) => t.toFixed(0)).join(', ')})`,
  );
  console.log(
    `create+start, ${FILES} files, writable root (DRYDOCK_READONLY_ROOTFS=false): median ${median(writable).toFixed(0)} ms (${writable.map((t) => t.toFixed(0)).join(', ')})`,
  );
  console.log(`ratio filled/empty: ${(median(filled) / median(empty)).toFixed(2)}`);
  console.log(`ratio filled volume/writable root: ${(median(filled) / median(writable)).toFixed(2)}`);
  execFileSync('docker', ['rmi', '-f', full], { stdio: 'ignore' });
}

void main();
