/**
 * How a session's limits are shared between its sandbox and its services
 * (docs/services.md, "Limits"): memory and processes are counted, a
 * service's share taken out of the session's, so a session with services
 * uses no more of the host than one without (and the operator's maxima,
 * which bound the session's limits, bound the whole). CPU is time, not room:
 * each container is capped at its own CPUs, at most the session's. A
 * declared share that leaves the sandbox too little is refused, naming the
 * field; an undeclared one is made to fit.
 */
import type { ServiceSpec } from '../services';

const MiB = 1024 ** 2;
/** A service's share when it declares none, before fitting. */
export const SERVICE_DEFAULTS = { memoryBytes: 256 * MiB, pids: 128, cpus: 1 };
/** What the sandbox keeps at least, whatever the services ask. */
export const SANDBOX_FLOOR = { memoryBytes: 256 * MiB, pids: 64 };
/** Below this a service gets no share (a PostgreSQL needs tens of MiB). */
const SERVICE_FLOOR = { memoryBytes: 32 * MiB, pids: 16 };

export interface Share {
  cpus: number;
  memoryBytes: number;
  pids: number;
}

export type SharedLimits =
  { ok: true; sandbox: Share; services: Record<string, Share> } | { ok: false; problems: string[] };

/** The session's `limits` split between its sandbox and `services`. */
export function shareLimits(session: Share, services: ServiceSpec[]): SharedLimits {
  if (!services.length) return { ok: true, sandbox: session, services: {} };
  const memory = share(session.memoryBytes, SANDBOX_FLOOR.memoryBytes, services, 'memoryBytes');
  const pids = share(session.pids, SANDBOX_FLOOR.pids, services, 'pids');
  const problems = [...memory.problems, ...pids.problems];
  if (problems.length) return { ok: false, problems };
  const shares: Record<string, Share> = {};
  for (const s of services) {
    shares[s.name] = {
      cpus: Math.min(s.limits.cpus ?? SERVICE_DEFAULTS.cpus, session.cpus),
      memoryBytes: memory.each[s.name],
      pids: pids.each[s.name],
    };
  }
  return {
    ok: true,
    sandbox: { cpus: session.cpus, memoryBytes: memory.left, pids: pids.left },
    services: shares,
  };
}

/** One resource: declared shares as they are, undeclared ones the default or an equal part of what is left. */
function share(total: number, floor: number, services: ServiceSpec[], key: 'memoryBytes' | 'pids') {
  const what = key === 'memoryBytes' ? 'memory' : 'pids';
  const show = (n: number) => (key === 'memoryBytes' ? `${Math.floor(n / MiB)}m` : String(n));
  const declared = services.filter((s) => s.limits[key] !== undefined);
  const asked = declared.reduce((sum, s) => sum + s.limits[key]!, 0);
  const undeclared = services.filter((s) => s.limits[key] === undefined);
  const room = total - floor - asked;
  const each: Record<string, number> = {};
  for (const s of declared) each[s.name] = s.limits[key]!;
  const part = undeclared.length ? Math.min(SERVICE_DEFAULTS[key], Math.floor(room / undeclared.length)) : 0;
  const problems: string[] = [];
  if (room < (undeclared.length ? SERVICE_FLOOR[key] * undeclared.length : 0)) {
    const biggest = [...declared].sort((a, b) => b.limits[key]! - a.limits[key]!)[0] ?? undeclared[0];
    problems.push(
      `${biggest.source}.limits.${what}: the services need ${show(asked + SERVICE_FLOOR[key] * undeclared.length)} of the ` +
        `session's ${show(total)} ${what}, leaving the sandbox less than ${show(floor)}: lower it, or raise limits.${what} ` +
        `(within the operator's maximum)`,
    );
  }
  for (const s of undeclared) each[s.name] = part;
  const used = Object.values(each).reduce((a, b) => a + b, 0);
  return { each, left: total - used, problems };
}
