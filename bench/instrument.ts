/**
 * A profile of the worker's activities by kind of operation, for benchmarks
 * that run the worker in their own process: Docker API calls of
 * sandbox/docker/provider.ts, the worker's commands (git, mkfs, mount) and database queries are timed and
 * charged to the activity that made them (from the activity context).
 * Bench-only: it wraps DockerProvider' methods, observes platform/processes.ts and
 * pg's Client.query in this process; call `instrument()` before the worker starts.
 */
import { Context } from '@temporalio/activity';
import pg from 'pg';
import { DockerProvider } from '../sandbox';
import { processObservers } from '../platform/processes';
import { fmt, markdownTable } from './table';

export const KINDS = [
  'docker exec',
  'docker create + start',
  'docker copy in',
  'docker rm',
  'docker inspect/list',
  'git (host)',
  'other processes (host)',
  'database',
] as const;
type Kind = (typeof KINDS)[number];

/** activity type -> kind -> totals. */
const totals = new Map<string, Map<Kind, { count: number; ms: number }>>();

function activityType(): string {
  try {
    return Context.current().info.activityType;
  } catch {
    return '(not in an activity)';
  }
}

function record(activity: string, kind: Kind, ms: number): void {
  const byKind = totals.get(activity) ?? new Map<Kind, { count: number; ms: number }>();
  totals.set(activity, byKind);
  const t = byKind.get(kind) ?? { count: 0, ms: 0 };
  byKind.set(kind, t);
  t.count++;
  t.ms += ms;
}

let installed = false;

export function instrument(): void {
  if (installed) return;
  installed = true;
  const proto = DockerProvider.prototype as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
  const methods: [string, Kind][] = [
    ['exec', 'docker exec'],
    // The snapshot's exec (commitChanges) streams to a file: before it was wrapped, its time was counted as Node's.
    ['execToFile', 'docker exec'],
    ['create', 'docker create + start'],
    ['copyIn', 'docker copy in'],
    ['destroy', 'docker rm'],
    ['exists', 'docker inspect/list'],
    ['image', 'docker inspect/list'],
    ['list', 'docker inspect/list'],
  ];
  for (const [name, kind] of methods) {
    const original = proto[name];
    proto[name] = async function (this: unknown, ...args: unknown[]) {
      const activity = activityType();
      const t = performance.now();
      try {
        return await original.apply(this, args);
      } finally {
        record(activity, kind, performance.now() - t);
      }
    };
  }

  // Every short command of the worker goes through platform/processes.ts.
  processObservers.push((file, _args, ms) =>
    record(activityType(), file === 'git' ? 'git (host)' : 'other processes (host)', ms),
  );

  // Pool.query goes through Client.query too (with a callback); direct client use returns a promise.
  const clientProto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const query = clientProto.query;
  clientProto.query = function (...args: unknown[]) {
    const activity = activityType();
    const t = performance.now();
    const done = () => record(activity, 'database', performance.now() - t);
    const callback = args.at(-1);
    if (typeof callback === 'function') {
      args[args.length - 1] = (...result: unknown[]) => {
        done();
        return (callback as (...a: unknown[]) => unknown)(...result);
      };
      return query.apply(this, args);
    }
    const result = query.apply(this, args);
    if (result && typeof (result as Promise<unknown>).then === 'function') {
      (result as Promise<unknown>).then(done, done);
    }
    return result;
  };
}

/** Forgets what was recorded so far (e.g. the warm-up). */
export function resetProfile(): void {
  totals.clear();
}

/**
 * Per activity type: the time in each kind of operation per session, and
 * what is left of the activity's time (from the workflow histories).
 */
export function operationsTable(sessions: number, activityMs: Record<string, number>): string {
  const activities = Object.keys(activityMs).sort((a, b) => activityMs[b] - activityMs[a]);
  const rows = activities.map((a) => {
    const byKind = totals.get(a);
    let accounted = 0;
    const cells = KINDS.map((k) => {
      const t = byKind?.get(k);
      if (!t) return '';
      accounted += t.ms / sessions;
      return `${fmt(t.ms / sessions)} (${+(t.count / sessions).toFixed(1)}×)`;
    });
    return [a, fmt(activityMs[a]), ...cells, fmt(Math.max(0, activityMs[a] - accounted))];
  });
  return markdownTable(
    ['activity', 'run time', ...KINDS, 'rest (Node: files, bundles, JSON; event loop waits)'],
    rows,
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
  );
}
