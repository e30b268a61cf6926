/**
 * How a step failed because a sandbox limit stopped it (memory, processes,
 * disk, time) rather than by the code's own verdict: read from the cgroup
 * counters drydock-run records around the step and from the step's output.
 * Pure functions, unit-tested.
 */

/** How a step failed because the sandbox's limits stopped it, not the code's own verdict. */
export type SandboxFault = 'oom' | 'pids' | 'disk_full' | 'timeout';

/** The sandbox cgroup's counters that drydock-run records around a step. */
export interface CgroupCounters {
  /** Processes the kernel killed for want of memory (memory.oom_control / memory.events `oom_kill`). */
  oomKills: number;
  /** Forks refused at the pids limit (pids.events `max`). */
  pidsMax: number;
}

export function parseCounters(text: string): CgroupCounters {
  const count = (name: string) => Number(new RegExp(`^${name} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
  return { oomKills: count('oom_kill'), pidsMax: count('max') };
}

/**
 * Names the limit that stopped a step: an OOM kill or a refused fork during
 * the step (cgroup counters; whatever the exit code), or, for a failed step,
 * a full disk (the error message every tool prints for ENOSPC) or the step's
 * time limit (timeout's 124).
 */
export function sandboxFault(step: {
  exitCode: number;
  output: string;
  before: CgroupCounters;
  after: CgroupCounters;
}): SandboxFault | undefined {
  // A limit the cgroup enforced during the step counts even when the step exits 0
  // (a fork bomb's shell returns at once; a killed child may go unnoticed).
  if (step.after.oomKills > step.before.oomKills) return 'oom';
  if (step.after.pidsMax > step.before.pidsMax) return 'pids';
  if (step.exitCode === 0) return undefined;
  if (/fork: (retry: )?Resource temporarily unavailable|Cannot fork|EAGAIN.*spawn|spawn.*EAGAIN/i.test(step.output)) {
    return 'pids';
  }
  if (/No space left on device|ENOSPC|Disk quota exceeded/i.test(step.output)) return 'disk_full';
  if (step.exitCode === 124) return 'timeout';
  return undefined;
}
