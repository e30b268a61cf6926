/**
 * The host's CPU and memory while a benchmark runs, from /proc: busy CPU
 * between two readings of /proc/stat, CPU time of named processes from
 * /proc/<pid>/stat (children they waited for included), and the peak of
 * memory in use (MemTotal - MemAvailable) sampled every 200 ms.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

const TICKS = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** Busy and total CPU time of the host, in ms summed over cores. */
function hostCpu(): { busy: number; total: number } {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal (guest time is inside user)
  const [user, nice, system, idle, iowait, irq, softirq, steal] = fields;
  const busy = user + nice + system + irq + softirq + steal;
  return { busy: (busy * 1000) / TICKS, total: ((busy + idle + iowait) * 1000) / TICKS };
}

/** CPU ms of a process and its waited-for children; 0 when it is gone. */
function processCpu(pid: number): number {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
    // after "pid (comm) ": state=0 ... utime=11 stime=12 cutime=13 cstime=14
    return ((Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * 1000) / TICKS;
  } catch {
    return 0;
  }
}

/** A reader of CPU ms: the processes `pids` (with their waited-for children). */
export const processesCpu =
  (pids: number[]): (() => number) =>
  () =>
    pids.reduce((sum, pid) => sum + processCpu(pid), 0);

/**
 * A reader of CPU ms: a process and all its descendants alive at the reading
 * (PostgreSQL forks a backend per connection; one that exited is in its
 * parent's waited-for children).
 */
export const processTreeCpu =
  (root: number): (() => number) =>
  () => {
    const children = new Map<number, number[]>();
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const text = readFileSync(`/proc/${entry}/stat`, 'utf8');
        const ppid = Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[1]);
        children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
      } catch {
        // gone meanwhile
      }
    }
    let sum = 0;
    const stack = [root];
    while (stack.length) {
      const pid = stack.pop()!;
      sum += processCpu(pid);
      stack.push(...(children.get(pid) ?? []));
    }
    return sum;
  };

/** A reader of CPU ms: a cgroup v1 cpuacct group (hierarchical: removed children's time stays counted). */
export const cgroupCpu =
  (group: string): (() => number) =>
  () => {
    try {
      return Number(readFileSync(`/sys/fs/cgroup/cpuacct/${group}/cpuacct.usage`, 'utf8')) / 1e6;
    } catch {
      return 0;
    }
  };

/** Pids whose command name is `comm`. */
export function pidsOf(comm: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === comm) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

const DOCKER_CGROUP = '/sys/fs/cgroup/cpuacct/docker';

/**
 * CPU ms of the containers carrying `label=value` (e.g. drydock.host=<the
 * bench's host id>), sampled: a container's last reading before it is
 * removed counts, so up to one sampling period of each may be missed; of a
 * container already running at the first sample (made now), only the CPU after it. Reads
 * cgroup v1 cpuacct and Docker's own container configs; 0 where unavailable.
 */
export function containersCpu(
  label: string,
  value: string,
  /** The engine's data root, where its container configs are (another engine of infra/docker-host.sh). */
  dataRoot = '/var/lib/docker',
): { sample(): void; read(): number } {
  const mine = new Map<string, { first: number; last: number }>();
  const foreign = new Set<string>();
  const usage = (id: string) => Number(readFileSync(`${DOCKER_CGROUP}/${id}/cpuacct.usage`, 'utf8')) / 1e6;
  /** The first sample takes the containers already running as a baseline: only their CPU from then on counts. */
  let baseline = true;
  const sample = () => {
    let ids: string[];
    try {
      ids = readdirSync(DOCKER_CGROUP).filter((d) => /^[0-9a-f]{64}$/.test(d));
    } catch {
      return;
    }
    for (const id of ids) {
      if (foreign.has(id)) continue;
      try {
        let seen = mine.get(id);
        if (!seen) {
          const config = JSON.parse(readFileSync(`${dataRoot}/containers/${id}/config.v2.json`, 'utf8')) as {
            Config?: { Labels?: Record<string, string> };
          };
          if (config.Config?.Labels?.[label] !== value) {
            foreign.add(id);
            continue;
          }
          seen = { first: baseline ? usage(id) : 0, last: 0 };
          mine.set(id, seen);
        }
        seen.last = usage(id);
      } catch {
        // created or removed meanwhile
      }
    }
    baseline = false;
  };
  sample();
  return { sample, read: () => [...mine.values()].reduce((a, v) => a + v.last - v.first, 0) };
}

function memUsedBytes(): number {
  const info = readFileSync('/proc/meminfo', 'utf8');
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(info)?.[1] ?? 0);
  return (kb('MemTotal') - kb('MemAvailable')) * 1024;
}

export interface HostUsage {
  wallMs: number;
  /** Average busy cores over the interval. */
  busyCores: number;
  /** CPU ms of each named reader over the interval. */
  processes: Record<string, number>;
  /** CPU ms of the host not in any named reader. */
  otherMs: number;
  /** Memory in use before, and its peak during the interval (bytes). */
  memBefore: number;
  memPeak: number;
}

/** Starts measuring; `stop()` returns the usage since. `readers` must not overlap. */
export function measureHost(
  readers: Record<string, () => number>,
  /** Called with every memory sample (every 200 ms). */
  onSample?: () => void,
): { stop(): HostUsage } {
  const t0 = performance.now();
  const cpu0 = hostCpu();
  const proc0 = Object.fromEntries(Object.entries(readers).map(([k, read]) => [k, read()]));
  const memBefore = memUsedBytes();
  let memPeak = memBefore;
  const timer = setInterval(() => {
    memPeak = Math.max(memPeak, memUsedBytes());
    onSample?.();
  }, 200);
  return {
    stop() {
      clearInterval(timer);
      onSample?.();
      memPeak = Math.max(memPeak, memUsedBytes());
      const cpu1 = hostCpu();
      const wallMs = performance.now() - t0;
      const processes = Object.fromEntries(
        Object.entries(readers).map(([k, read]) => [k, Math.max(0, read() - proc0[k])]),
      );
      const busy = cpu1.busy - cpu0.busy;
      const named = Object.values(processes).reduce((a, b) => a + b, 0);
      return {
        wallMs,
        busyCores: busy / wallMs,
        processes,
        otherMs: Math.max(0, busy - named),
        memBefore,
        memPeak,
      };
    },
  };
}
