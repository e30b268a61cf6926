/**
 * What a killed test run leaves behind (PostgreSQL clusters, Temporal dev
 * servers, worker processes, sandboxes, temp folders), found and removed by
 * the next run. Each temp folder a run creates names its owner, the jest
 * process (`own`); each server or worker a run starts is listed in the run's
 * folder (`ownProcess`). Global setup reaps the folders whose owner is gone.
 * A process is named by its pid and start time, so a reused pid is never killed.
 */
import { execFileSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Docker from 'dockerode';
import { LABELS } from '../../sandbox/provider';

const OWNER_FILE = '.drydock-owner';
const PROCESSES_FILE = '.drydock-processes';

interface Proc {
  pid: number;
  /** Start time in clock ticks since boot (/proc/<pid>/stat, field 22). */
  start: string;
}

function procOf(pid: number): Proc | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces) start at field 3.
    return { pid, start: stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] };
  } catch {
    return undefined;
  }
}

const alive = (p: Proc) => procOf(p.pid)?.start === p.start;

/** The test run's owner: the jest process that ran global setup. */
function owner(): Proc {
  return procOf(Number(process.env.DRYDOCK_TEST_OWNER ?? process.pid))!;
}

/** Marks a temp folder as this run's: the next run removes it once this run's owner is gone. */
export function own(dir: string): void {
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, OWNER_FILE);
  if (!existsSync(file)) writeFileSync(file, JSON.stringify({ owner: owner(), run: process.env.DRYDOCK_TEST_RUN }));
}

/** Lists a process this run started, to be killed by the next run if it outlives this one. */
export function ownProcess(pid: number | undefined): void {
  const dir = process.env.DRYDOCK_TEST_DIR;
  const proc = pid === undefined ? undefined : procOf(pid);
  if (dir && proc) appendFileSync(path.join(dir, PROCESSES_FILE), `${JSON.stringify(proc)}\n`);
}

/**
 * A run id (DRYDOCK_TEST_RUN) no other run on this machine has: the time in
 * base 36, taken by creating a file of that name exclusively. npm test's lanes
 * start their runs at once, two once in the same millisecond, and a run's
 * teardown removes every sandbox under its id as leaked: the drills' lane so
 * removed the first lane's live sandbox in multi-host.test (session 34's run 37).
 */
export function reserveRunId(now = Date.now()): string {
  const dir = path.join(tmpdir(), 'drydock-run-ids');
  mkdirSync(dir, { recursive: true });
  for (let t = now; ; t++) {
    const id = `test-${t.toString(36)}`;
    try {
      writeFileSync(path.join(dir, id), '', { flag: 'wx' });
      return id;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
}

/**
 * Removes what runs whose owner is gone left behind: kills their processes,
 * removes their sandboxes (by the run's session prefix) and their temp
 * folders. Returns what it removed, for the log. npm test's lanes start at
 * once and each reaps (global setup), so each step takes "already gone" as
 * done: a process that ended, a sandbox another reaper removed or is
 * removing, a mount another unmounted (a lane's setup failed on that after a
 * killed run, session 26).
 */
export async function reapLeftovers(docker = new Docker()): Promise<string[]> {
  const done: string[] = [];
  const orphans: { dir: string; run?: string }[] = [];
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith('drydock-')) continue;
    const dir = path.join(tmpdir(), name);
    let mark: { owner: Proc; run?: string };
    try {
      mark = JSON.parse(readFileSync(path.join(dir, OWNER_FILE), 'utf8')) as typeof mark;
    } catch {
      continue; // not a test run's folder, or not marked
    }
    if (!alive(mark.owner)) orphans.push({ dir, run: mark.run });
  }
  // Processes first, so no server still writes into a folder being removed.
  for (const { dir } of orphans) {
    const listed = existsSync(path.join(dir, PROCESSES_FILE))
      ? readFileSync(path.join(dir, PROCESSES_FILE), 'utf8').split('\n').filter(Boolean)
      : [];
    for (const proc of listed.map((l) => JSON.parse(l) as Proc).filter(alive)) {
      if (killIfAlive(proc.pid)) done.push(`process ${proc.pid}`);
    }
  }
  const runs = new Set(orphans.map((o) => o.run).filter((r): r is string => Boolean(r)));
  if (runs.size) {
    for (const c of await docker.listContainers({ all: true, filters: { label: [LABELS.session] } })) {
      const session = c.Labels[LABELS.session] ?? '';
      if (![...runs].some((run) => session.startsWith(`${run}-`))) continue;
      const removed = await docker
        .getContainer(c.Id)
        .remove({ force: true, v: true })
        .then(
          () => true,
          (err: { statusCode?: number }) => {
            // 404: another reaper removed it; 409: another is removing it.
            if (err.statusCode === 404 || err.statusCode === 409) return false;
            throw err;
          },
        );
      if (removed) done.push(`sandbox ${c.Names[0]}`);
    }
  }
  for (const { dir } of orphans) {
    removeTree(dir);
    done.push(dir);
  }
  return done;
}

/**
 * Unmounts what is mounted under `dir`, deepest first: a sandbox's storage
 * (sandbox/docker/storage.ts) is an ext4 image loop-mounted in the worker's data
 * dir, and removing the folder over it fails with EBUSY.
 */
export function unmountUnder(dir: string): void {
  for (const point of mountsUnder(dir).sort((a, b) => b.length - a.length)) {
    try {
      execFileSync('umount', ['--lazy', point], { stdio: 'pipe' });
    } catch (err) {
      if (mountsUnder(point).includes(point)) throw err; // else another reaper unmounted it first
    }
  }
}

function mountsUnder(dir: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter((point): point is string => point?.startsWith(`${dir}/`) || point === dir);
}

/** SIGKILL to `pid`; false when it had ended already (ESRCH). */
function killIfAlive(pid: number): boolean {
  try {
    process.kill(pid, 'SIGKILL');
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw err;
  }
}

/** Removes DIR and all under it, unmounting first (see unmountUnder). */
export function removeTree(dir: string): void {
  unmountUnder(dir);
  rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
}
