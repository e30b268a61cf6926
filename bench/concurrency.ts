/**
 * bench/concurrency: N complete sessions at once (the session of
 * bench/overhead: three scripted steps, the test, the push approved by
 * policy, push to one shared bare remote, teardown), for N = 1, 2, 4, 8, 16,
 * against one worker and the Temporal dev server (SQLite). For each N, RUNS
 * batches: sessions per minute (N / the batch's wall time), p50/p95 time to
 * ready (start request to the agent's first command running) and to the
 * result, failures, leftover sandboxes, host CPU (busy cores, and CPU time
 * per session by process) and the peak of memory in use.
 *
 * A batch has a ramp-up (all N do the same phase at once) and a drain (cores
 * idle while the last session finishes). So after the batches of each N comes
 * a sustained (closed-loop) run: N sessions kept in flight, the next started as
 * soon as one ends, SUSTAINED·N sessions in all (default 8; 0 skips it). Its
 * throughput counts only a window without the first wave and the drain: from
 * the N-th completion to the (SUSTAINED·N − N)-th, after which fewer than N
 * run; the N=1 window holds SUSTAINED − 2 sessions.
 *
 * drydock's own database is the embedded PGlite (`npm start`'s default), or
 * with BENCH_DB=postgres a throwaway PostgreSQL cluster (`npm test`'s).
 * BENCH_TEMPORAL=postgres runs Temporal on PostgreSQL (infra/temporal-pg.sh)
 * instead of the dev server; BENCH_HOSTS=2 adds a second Docker host with its
 * own worker process (needs BENCH_DB=postgres).
 *
 *   npx tsx bench/concurrency.ts        NS=1,2,4,8,16 RUNS=2 SUSTAINED=8 BENCH_DB=pglite
 *   BENCH_TEMPORAL=postgres BENCH_HOSTS=2 BENCH_DB=postgres npx tsx bench/concurrency.ts
 */
import { execFile } from 'node:child_process';
import { cpus } from 'node:os';
import { promisify } from 'node:util';
import { LABELS } from '../sandbox/provider';
import { cgroupCpu, containersCpu, measureHost, pidsOf, processesCpu, type HostUsage } from './host';
import { historyProfile, makeRepo, runSession, type HistoryProfile, type SessionRun } from './session';
import { benchMain, databaseOf, hostsOf, startStack, temporalOf } from './stack';
import { fmt, markdownTable, median, percentile, ratioTable, runsFromEnv, say, type Ratio } from './table';

const run = promisify(execFile);
const BENCH_PROCESS = 'bench process: worker, PGlite, client, git';
const SECOND_WORKER = "second host's worker process";
const DOCKER_DAEMONS = 'dockerd + containerd';
const SANDBOXES = "the sessions' sandboxes";
/** The machine is shared: other people's containers. */
const THEIRS = 'other containers on the host';
const RUNS = runsFromEnv(2);
const DATABASE = databaseOf();
const NS = (process.env.NS ?? '1,2,4,8,16').split(',').map((n) => {
  const v = Number(n.trim());
  if (!Number.isInteger(v) || v < 1) throw new Error(`NS: not a positive integer: ${n}`);
  return v;
});
/** Sessions per N of the sustained run, in units of N; 0: no sustained run. */
const SUSTAINED = Number(process.env.SUSTAINED ?? 8);
if (!Number.isInteger(SUSTAINED) || (SUSTAINED !== 0 && SUSTAINED < 3)) {
  throw new Error(
    `SUSTAINED: 0 or an integer of at least 3 (a window needs a first wave and a drain), not ${process.env.SUSTAINED}`,
  );
}

/** The sustained run of one N: only its window counts. */
interface Sustained {
  perMinute: number;
  windowMs: number;
  /** Sessions completed in the window. */
  completed: number;
  failures: string[];
  sessionMs: number[];
  usage: HostUsage;
  profiles: HistoryProfile[];
}

interface Level {
  n: number;
  perMinute: number[];
  readyMs: number[];
  sessionMs: number[];
  failures: string[];
  /** Activity attempts beyond the first, over the level's sessions. */
  retries: number;
  leftovers: number;
  /** Busy cores during 3 s with no session running, just before: the machine's other load. */
  idleCores: number;
  usage: HostUsage[];
  profiles: HistoryProfile[];
  /** Completed sessions by the host their sandbox ran on. */
  byHost: Record<string, number>;
  sustained?: Sustained;
}

/**
 * Keeps `n` sessions of `runOne` in flight until `total` have started; meters
 * from the n-th completion to the (total − n)-th (the window), and returns the
 * window's sessions with their time stamps.
 */
async function closedLoop(
  n: number,
  total: number,
  runOne: () => Promise<SessionRun>,
  meter: () => { stop(): HostUsage },
): Promise<{ window: PromiseSettledResult<SessionRun>[]; windowMs: number; usage: HostUsage }> {
  const ends: { at: number; result: PromiseSettledResult<SessionRun> }[] = [];
  let started = 0;
  let metering: { stop(): HostUsage } | undefined;
  let usage: HostUsage | undefined;
  const slot = async () => {
    while (started < total) {
      started++;
      const result = await runOne().then(
        (value): PromiseSettledResult<SessionRun> => ({ status: 'fulfilled', value }),
        (reason): PromiseSettledResult<SessionRun> => ({ status: 'rejected', reason }),
      );
      ends.push({ at: performance.now(), result });
      if (ends.length === n) metering = meter();
      if (ends.length === total - n) usage = metering!.stop();
    }
  };
  await Promise.all(Array.from({ length: n }, slot));
  return {
    window: ends.slice(n, total - n).map((e) => e.result),
    windowMs: ends[total - n - 1].at - ends[n - 1].at,
    usage: usage!,
  };
}

type Stack = Awaited<ReturnType<typeof startStack>>;
type Repo = Awaited<ReturnType<typeof makeRepo>>;

/** The CPU meters of a batch, what counts as drydock's (OURS, in the table's order), and the sandboxes left behind. */
function metersOf(stack: Stack) {
  const second = stack.secondHost;
  const dockerDaemons = [...pidsOf('dockerd'), ...pidsOf('containerd')];
  /** Where drydock's CPU goes (CPU seconds per session), in the order of the table. */
  const OURS = [
    BENCH_PROCESS,
    ...Object.keys(stack.temporal.cpu),
    ...(second ? [SECOND_WORKER] : []),
    DOCKER_DAEMONS,
    SANDBOXES,
  ];
  /** CPU readers of one batch; the sandboxes' trackers sample with the memory sampler. */
  const meterBatch = () => {
    const trackers = [
      containersCpu(LABELS.host, stack.config.DRYDOCK_HOST_ID),
      ...(second ? [containersCpu(LABELS.host, second.hostId, second.dataRoot)] : []),
    ];
    const sandboxes = () => trackers.reduce((sum, t) => sum + t.read(), 0);
    const allContainers = cgroupCpu('docker');
    return measureHost(
      {
        [BENCH_PROCESS]: processesCpu([process.pid]),
        ...stack.temporal.cpu,
        ...(second ? { [SECOND_WORKER]: second.workerCpu } : {}),
        [DOCKER_DAEMONS]: processesCpu(dockerDaemons),
        [SANDBOXES]: sandboxes,
        [THEIRS]: () => allContainers() - sandboxes(),
      },
      () => trackers.forEach((t) => t.sample()),
    );
  };
  const leftOn = async (hostId: string, dockerHost = process.env.DOCKER_HOST) =>
    (
      await run('docker', ['ps', '-aq', '--filter', `label=${LABELS.host}=${hostId}`], {
        env: { ...process.env, ...(dockerHost ? { DOCKER_HOST: dockerHost } : {}) },
      })
    ).stdout
      .split('\n')
      .filter(Boolean).length;
  const sandboxesLeft = async () =>
    (await leftOn(stack.config.DRYDOCK_HOST_ID)) + (second ? await leftOn(second.hostId, second.dockerHost) : 0);

  return { OURS, meterBatch, sandboxesLeft };
}
type Meters = ReturnType<typeof metersOf>;

/** Two sessions at a time until each host ran one: a host's first session copies the image's lower layers. */
async function warmUp(stack: Stack, repo: Repo): Promise<void> {
  const second = stack.secondHost;
  const warmed = new Set<string>();
  for (let round = 0; round < 6 && (round === 0 || warmed.size < (second ? 2 : 1)); round++) {
    say(`warm-up: two sessions (not counted)${second ? `; hosts warmed so far: ${warmed.size} of 2` : ''}`);
    for (const r of await Promise.all([runSession(stack, repo), runSession(stack, repo)])) {
      warmed.add(r.status.sandbox!.host);
    }
  }
}

/** One N: RUNS batches of N sessions at once, then (with SUSTAINED) a closed loop of N in flight. */
async function measureLevel(n: number, stack: Stack, repo: Repo, meters: Meters): Promise<Level> {
  const second = stack.secondHost;
  const { meterBatch, sandboxesLeft } = meters;
  const level: Level = {
    n,
    perMinute: [],
    readyMs: [],
    sessionMs: [],
    failures: [],
    retries: 0,
    leftovers: 0,
    idleCores: 0,
    usage: [],
    profiles: [],
    byHost: {},
  };
  const idle = measureHost({});
  await new Promise((r) => setTimeout(r, 3_000));
  level.idleCores = idle.stop().busyCores;
  for (let b = 0; b < RUNS; b++) {
    const meter = meterBatch();
    const t = performance.now();
    const results = await Promise.allSettled(Array.from({ length: n }, () => runSession(stack, repo)));
    const wall = performance.now() - t;
    level.usage.push(meter.stop());
    level.perMinute.push((results.filter((r) => r.status === 'fulfilled').length * 60_000) / wall);
    for (const r of results) {
      if (r.status === 'fulfilled') {
        level.readyMs.push(r.value.readyMs);
        const host = r.value.status.sandbox!.host === second?.hostId ? 'second' : 'first';
        level.byHost[host] = (level.byHost[host] ?? 0) + 1;
        level.sessionMs.push(r.value.ms);
        const profile = await historyProfile(stack.client, r.value.id);
        level.profiles.push(profile);
        level.retries += profile.retries;
      } else {
        level.failures.push((r.reason as Error).message);
      }
    }
    level.leftovers += await sandboxesLeft();
    say(
      `N=${n} batch ${b + 1}/${RUNS}: ${fmt(wall)}, ${level.perMinute.at(-1)!.toFixed(1)} sessions/min, ` +
        `${results.filter((r) => r.status === 'rejected').length} failed`,
    );
  }
  if (SUSTAINED) {
    const { window, windowMs, usage } = await closedLoop(n, SUSTAINED * n, () => runSession(stack, repo), meterBatch);
    const done = window.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    level.sustained = {
      perMinute: (done.length * 60_000) / windowMs,
      windowMs,
      completed: done.length,
      failures: window.flatMap((r) => (r.status === 'rejected' ? [(r.reason as Error).message] : [])),
      sessionMs: done.map((r) => r.ms),
      usage,
      // Read after the run: fetching histories must not load the window.
      profiles: await Promise.all(done.map((r) => historyProfile(stack.client, r.id))),
    };
    say(
      `N=${n} sustained: ${SUSTAINED * n} sessions, ${done.length} in a window of ${fmt(windowMs)}: ` +
        `${level.sustained.perMinute.toFixed(1)} sessions/min, ${level.sustained.failures.length} failed`,
    );
    level.leftovers += await sandboxesLeft();
  }
  for (const f of [...level.failures, ...(level.sustained?.failures ?? [])]) say(`N=${n} failure: ${f}`);
  return level;
}

/** Throughput, latency, failures and memory at each N. */
function summaryTable(levels: Level[]): string {
  const gib = (bytes: number) => `${(bytes / 1024 ** 3).toFixed(2)} GiB`;
  return markdownTable(
    [
      'N',
      'sessions/min (median)',
      'min – max',
      'ready p50',
      'ready p95',
      'session p50',
      'session p95',
      'failures',
      'activity retries',
      'leftover sandboxes',
      'busy cores (idle before)',
      'peak memory in use (+ over idle)',
    ],
    levels.map((l) => [
      l.n,
      median(l.perMinute).toFixed(1),
      `${Math.min(...l.perMinute).toFixed(1)} – ${Math.max(...l.perMinute).toFixed(1)}`,
      fmt(percentile(l.readyMs, 50)),
      fmt(percentile(l.readyMs, 95)),
      fmt(percentile(l.sessionMs, 50)),
      fmt(percentile(l.sessionMs, 95)),
      `${l.failures.length} of ${l.n * RUNS}`,
      l.retries,
      l.leftovers,
      `${median(l.usage.map((u) => u.busyCores)).toFixed(2)} (${l.idleCores.toFixed(2)})`,
      `${gib(Math.max(...l.usage.map((u) => u.memPeak)))} (+${gib(Math.max(...l.usage.map((u) => u.memPeak - u.memBefore)))})`,
    ]),
    [0, 1, 2, 3, 4, 5, 6, 8, 9, 10],
  );
}

/** The batches and the sustained window of each N, as rows of the CPU and profile tables. */
function partsOf(levels: Level[]) {
  /** A row label: the batches of N, or N's sustained window. */
  return levels.flatMap((l) => [
    {
      label: SUSTAINED ? `${l.n} batches` : String(l.n),
      usage: l.usage,
      sessions: l.n * RUNS - l.failures.length,
      profiles: l.profiles,
    },
    ...(l.sustained
      ? [
          {
            label: `${l.n} sustained`,
            usage: [l.sustained.usage],
            sessions: l.sustained.completed,
            profiles: l.sustained.profiles,
          },
        ]
      : []),
  ]);
}
type Part = ReturnType<typeof partsOf>[number];

/** CPU seconds per completed session of one part, by what `f` reads of each meter. */
function perSession(p: Part, f: (u: HostUsage) => number): number {
  return p.usage.reduce((a, u) => a + f(u), 0) / 1000 / p.sessions;
}

/** Issue 51's goal 5: drydock's CPU seconds per session at the largest N (its sustained window when run). */
function cpuGoal(parts: Part[], OURS: string[]): Ratio {
  const last = parts[parts.length - 1];
  return {
    name: `drydock's CPU seconds per session, ${last.label}`,
    value: OURS.reduce((a, k) => a + perSession(last, (u) => u.processes[k]), 0),
    goal: { max: 0.7 },
  };
}

/** Host CPU per completed session, by process. */
function cpuTable(parts: Part[], OURS: string[]): string {
  return markdownTable(
    ['N', ...OURS, "**drydock's in all**", 'sessions/min if CPU-bound on idle cores', THEIRS, 'rest of the host'],
    parts.map((p) => {
      const sum = (f: (u: HostUsage) => number) => perSession(p, f);
      const ours = OURS.map((k) => sum((u) => u.processes[k]));
      const total = ours.reduce((a, b) => a + b, 0);
      return [
        p.label,
        ...ours.map((v) => v.toFixed(2)),
        `**${total.toFixed(2)}**`,
        ((cpus().length * 60) / total).toFixed(1),
        sum((u) => u.processes[THEIRS]).toFixed(2),
        sum((u) => u.otherMs).toFixed(2),
      ];
    }),
    Array.from({ length: OURS.length + 4 }, (_, i) => i + 1),
  );
}

/** Where a session spends its time (median per session, from its history). */
function profileTable(parts: Part[]): string {
  const profileRows = parts.map(({ label, profiles: p }) => {
    const m = (f: (x: HistoryProfile) => number) => fmt(median(p.map(f)));
    const act = (x: HistoryProfile) => Object.values(x.activities).reduce((a, v) => a + v.runMs, 0);
    const one = (type: string) => (x: HistoryProfile) => x.activities[type]?.runMs ?? 0;
    return [
      label,
      m((x) => x.totalMs),
      m(act),
      m(one('provisionSandbox')),
      m(one('runStep')),
      m(one('commitChanges')),
      m(one('pushBranch')),
      m(one('destroySandbox')),
      m((x) => x.activityQueueMs),
      m((x) => x.workflowTaskMs),
    ];
  });
  return markdownTable(
    [
      'N',
      'workflow',
      'activities running',
      'provisionSandbox',
      'runStep ×4',
      'commitChanges',
      'pushBranch',
      'destroySandbox',
      'activity queue wait',
      'workflow tasks',
    ],
    profileRows,
    [1, 2, 3, 4, 5, 6, 7, 8, 9],
  );
}

/** Each N's sustained throughput beside its batches'. */
function sustainedTable(levels: Level[]): string {
  return markdownTable(
    [
      'N',
      'batches: sessions/min (median)',
      'sustained: sessions/min',
      'sustained: sessions in the window / its length',
      'session p50',
      'session p95',
      'failures in the window',
      'busy cores',
    ],
    levels.flatMap(({ n, perMinute, sustained: s }) =>
      s
        ? [
            [
              n,
              median(perMinute).toFixed(1),
              s.perMinute.toFixed(1),
              `${s.completed} / ${fmt(s.windowMs)}`,
              fmt(percentile(s.sessionMs, 50)),
              fmt(percentile(s.sessionMs, 95)),
              s.failures.length,
              s.usage.busyCores.toFixed(2),
            ],
          ]
        : [],
    ),
    [0, 1, 2, 3, 4, 5, 6, 7],
  );
}

/** The ratios with goals: throughput at 4 over 1, and no failure or retry at 16. */
function ratiosOf(levels: Level[]): Ratio[] {
  const at = (n: number) => levels.find((l) => l.n === n);
  const ratios: Ratio[] = [];
  if (at(1) && at(4)) {
    ratios.push({
      name: `throughput N=4 / N=1${SUSTAINED ? ', batches (as the reference run)' : ''}`,
      value: median(at(4)!.perMinute) / median(at(1)!.perMinute),
      goal: { min: 1.6 },
    });
    if (SUSTAINED) {
      ratios.push({
        name: 'throughput N=4 / N=1, sustained',
        value: at(4)!.sustained!.perMinute / at(1)!.sustained!.perMinute,
        goal: { min: 1.6 },
      });
    }
  }
  if (at(16)) {
    ratios.push({ name: 'failed sessions at N=16', value: at(16)!.failures.length, goal: { max: 0 }, digits: 0 });
    ratios.push({ name: 'activity retries at N=16', value: at(16)!.retries, goal: { max: 0 }, digits: 0 });
  }
  return ratios;
}

async function main(): Promise<string> {
  const stack = await startStack({ config: { DRYDOCK_APPROVAL_REQUIRED: [] }, database: DATABASE });
  const second = stack.secondHost;
  const repo = await makeRepo();
  const meters = metersOf(stack);
  await warmUp(stack, repo);
  const levels: Level[] = [];
  for (const n of NS) levels.push(await measureLevel(n, stack, repo, meters));
  const parts = partsOf(levels);
  const summary = summaryTable(levels);
  const ratios = [...ratiosOf(levels), ...(parts.length ? [cpuGoal(parts, meters.OURS)] : [])];
  const temporalText =
    Object.keys(stack.temporal.cpu).length > 1
      ? 'the server built from Go modules on its own PostgreSQL (infra/temporal-pg.sh, fsync off)'
      : 'the CLI dev server (SQLite, in memory)';
  const hostsText = second
    ? ` Two Docker hosts: this machine's engine (the bench process's worker) and a second dockerd (infra/docker-host.sh, \`drydock worker\` as a process); a session's sandbox goes to whichever worker takes its provisioning.`
    : '';
  return [
    `Each batch starts N sessions at once and waits for all; ${RUNS} batch(es) per N. Temporal: ${temporalText}.${hostsText} drydock's database: ${DATABASE === 'postgres' ? 'PostgreSQL (Debian, throwaway cluster, fsync off)' : 'embedded PGlite served by the worker process (as `npm start`)'}.`,
    '',
    summary,
    '',
    ...(second
      ? [
          `Sessions by host (first engine / second): ${levels.map((l) => `N=${l.n}: ${l.byHost.first ?? 0}/${l.byHost.second ?? 0}`).join(', ')}.`,
          '',
        ]
      : []),
    ...(SUSTAINED
      ? [
          `Sustained (closed loop), after the batches of each N: N sessions kept in flight, the next started as soon as one ends, ${SUSTAINED}·N in all. Counted: the sessions completed between the N-th completion (the first wave, started together, is over) and the ${SUSTAINED - 1}·N-th (the last session starts then; after it fewer than N run), over that window's length; its CPU is metered over the same window. The batch figure (the reference run's measure) beside it:`,
          '',
          sustainedTable(levels),
          '',
        ]
      : []),
    ratioTable(ratios),
    '',
    `Host CPU per completed session (CPU seconds over all batches of that N / sessions${SUSTAINED ? "; sustained: over the window / the window's sessions" : ''}). dockerd and containerd serve every client of the shared Docker engine, so they include some of other users' work; "rest of the host" is containerd shims, runc and other users' processes:`,
    '',
    cpuTable(parts, meters.OURS),
    '',
    `Where a session spends its time at each N (median per session, from its workflow history${SUSTAINED ? "; sustained: the window's sessions" : ''}):`,
    '',
    profileTable(parts),
  ].join('\n');
}

benchMain(
  `bench/concurrency (drydock's database: ${DATABASE === 'postgres' ? 'PostgreSQL' : 'PGlite'}${
    temporalOf() === 'postgres' ? '; Temporal on PostgreSQL' : ''
  }${hostsOf() === 2 ? '; two Docker hosts' : ''})`,
  main,
);
