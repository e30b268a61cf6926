/**
 * Admission: whether this host takes one more session's sandbox. A host
 * bounds its sandboxes (DRYDOCK_MAX_SANDBOXES), the sum of their memory and
 * CPU limits (DRYDOCK_HOST_MEMORY, DRYDOCK_HOST_CPUS) and keeps free space
 * on its sandbox storage (DRYDOCK_HOST_DISK_FREE). A refusal is HostFull,
 * not retried here: the workflow queues and asks any host again
 * (workflows/session/queue.ts). Nothing running is ever evicted.
 */
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../../workflows/api';
import type { HostResources, SandboxInfo } from '../provider';
import { POOL_LABEL } from '../pool-registry';
import { LABELS } from '../provider';

/** On a session's sandbox: what its session holds of the host ("<cpus>/<memory bytes>"), sandbox and services together. */
export const RESERVED_LABEL = 'drydock.reserved';

/** What a session holds of its host while its sandbox lives. */
export interface Reservation {
  cpus: number;
  memoryBytes: number;
}

export interface HostLimits {
  hostId: string;
  /** DRYDOCK_MAX_SANDBOXES; absent: no bound. */
  sandboxes?: number;
  /** DRYDOCK_HOST_CPUS; absent: no bound (CPU is shared, not held: a busy host slows down, it does not fail). */
  cpus?: number;
  /** DRYDOCK_HOST_MEMORY; absent: the engine's memory. */
  memoryBytes?: number;
  /** DRYDOCK_HOST_DISK_FREE: below this much free space on the sandbox storage, no new sandbox. */
  diskFreeBytes: number;
}

export function reservationOf(limits: Reservation): Reservation {
  return { cpus: limits.cpus, memoryBytes: limits.memoryBytes };
}

export function reservedLabel(r: Reservation): Record<string, string> {
  return { [RESERVED_LABEL]: `${r.cpus}/${r.memoryBytes}` };
}

/**
 * The sessions holding a sandbox on the host, with what each holds (its
 * sandbox's label; companions carry none). Pool spares are not counted:
 * POOL_LIMITS bounds them.
 */
export function holdersOf(live: SandboxInfo[]): Map<string, Reservation> {
  const holders = new Map<string, Reservation>();
  for (const s of live) {
    const session = s.labels[LABELS.session];
    if (POOL_LABEL in s.labels || !session) continue;
    const reserved = s.labels[RESERVED_LABEL];
    if (reserved === undefined && holders.has(session)) continue;
    const [cpus, memoryBytes] = (reserved ?? '0/0').split('/').map(Number);
    holders.set(session, { cpus: cpus || 0, memoryBytes: memoryBytes || 0 });
  }
  return holders;
}

const GiB = 1024 ** 3;
const gib = (bytes: number) => `${(bytes / GiB).toFixed(1)} GiB`;

/**
 * Why the host cannot take `want` beside `held` (the sessions holding or being
 * given a sandbox), `ahead` more sessions queued before this one; undefined
 * when it can. Free slots are kept for those ahead in line; memory and CPU
 * are not (their sizes are unknown here), so a smaller session may start
 * before a larger one that waits for memory.
 */
export function refusalOf(
  limits: HostLimits,
  resources: HostResources | undefined,
  held: Map<string, Reservation>,
  want: Reservation,
  ahead: number,
): string | undefined {
  const host = `host ${limits.hostId}`;
  if (limits.sandboxes !== undefined && held.size + ahead >= limits.sandboxes) {
    const kept =
      held.size < limits.sandboxes ? `; the free ones are kept for ${ahead} queued sessions ahead in line` : '';
    return `${host} holds ${held.size} of ${limits.sandboxes} sandboxes${kept}`;
  }
  const sum = (key: keyof Reservation) => [...held.values()].reduce((n, r) => n + r[key], 0);
  const memory = limits.memoryBytes ?? resources?.memoryBytes;
  if (memory !== undefined && held.size > 0 && sum('memoryBytes') + want.memoryBytes > memory) {
    const of = limits.memoryBytes === undefined ? "the engine's memory" : 'DRYDOCK_HOST_MEMORY';
    return `${host}: its sandboxes hold ${gib(sum('memoryBytes'))} of ${gib(memory)} of memory (${of}); this session needs ${gib(want.memoryBytes)}`;
  }
  if (limits.cpus !== undefined && held.size > 0 && sum('cpus') + want.cpus > limits.cpus) {
    return `${host}: its sandboxes hold ${sum('cpus')} of ${limits.cpus} CPUs (DRYDOCK_HOST_CPUS); this session needs ${want.cpus}`;
  }
  const free = resources?.diskFreeBytes;
  if (free !== undefined && free < limits.diskFreeBytes) {
    return `${host} has ${gib(free)} free on its sandbox storage, under the ${gib(limits.diskFreeBytes)} it keeps (DRYDOCK_HOST_DISK_FREE)`;
  }
  return undefined;
}

export function hostFull(message: string): ApplicationFailure {
  return ApplicationFailure.create({ message, type: ErrorType.HostFull, nonRetryable: true });
}
