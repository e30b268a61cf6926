/**
 * What every benchmark prints: medians and spreads of repeated runs as
 * markdown tables, ratios against their goals, and the machine they ran on.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { findTemporalCli } from '../platform/temporal';

const run = promisify(execFile);

/** Progress on stderr, so stdout holds only the tables. */
export const say = (line: string): void => void process.stderr.write(`==> ${line}\n`);

/** Repetitions: env RUNS, else the benchmark's default. */
export function runsFromEnv(fallback: number): number {
  const n = Number(process.env.RUNS ?? fallback);
  if (!Number.isInteger(n) || n < 1) throw new Error(`RUNS must be a positive integer, got ${process.env.RUNS}`);
  return n;
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

/** Nearest-rank percentile (p in 0..100). */
export function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}

/** Milliseconds, with the precision that matters at that size. */
export function fmt(ms: number): string {
  if (!Number.isFinite(ms)) return '–';
  if (ms >= 10_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms >= 100) return `${Math.round(ms)} ms`;
  if (ms >= 10) return `${ms.toFixed(1)} ms`;
  return `${ms.toFixed(2)} ms`;
}

export const spread = (xs: number[]): string => `${fmt(Math.min(...xs))} – ${fmt(Math.max(...xs))}`;

export function markdownTable(headers: string[], rows: (string | number)[][], rightAligned: number[] = []): string {
  const line = (cells: (string | number)[]) => `| ${cells.map((c) => String(c).replace(/\|/g, '\\|')).join(' | ')} |`;
  const rule = headers.map((_, i) => (rightAligned.includes(i) ? '---:' : '---'));
  return [line(headers), `| ${rule.join(' | ')} |`, ...rows.map(line)].join('\n');
}

/** One measured thing: a sample per run (ms). */
export interface Row {
  name: string;
  ms: number[];
  note?: string;
}

/** | what | median | min – max | runs | (and a note column when any row has one). */
export function timingTable(rows: Row[], what = 'what'): string {
  const notes = rows.some((r) => r.note);
  return markdownTable(
    [what, 'median', 'min – max', 'runs', ...(notes ? ['note'] : [])],
    rows.map((r) => [r.name, fmt(median(r.ms)), spread(r.ms), r.ms.length, ...(notes ? [r.note ?? ''] : [])]),
    [1, 2, 3],
  );
}

export interface Ratio {
  name: string;
  value: number;
  /** The goal as a bound on the value. */
  goal?: { max?: number; min?: number };
  digits?: number;
}

export const goalText = (g: Ratio['goal']): string =>
  !g ? '' : g.max !== undefined ? `≤ ${g.max}` : g.min !== undefined ? `≥ ${g.min}` : '';

export function goalMet(r: Pick<Ratio, 'value' | 'goal'>): boolean | undefined {
  if (!r.goal) return undefined;
  if (r.goal.max !== undefined && !(r.value <= r.goal.max)) return false;
  if (r.goal.min !== undefined && !(r.value >= r.goal.min)) return false;
  return true;
}

/** | ratio | value | goal | met | */
export function ratioTable(ratios: Ratio[]): string {
  return markdownTable(
    ['ratio', 'value', 'goal', 'met'],
    ratios.map((r) => {
      const met = goalMet(r);
      return [
        r.name,
        r.value.toFixed(r.digits ?? 2),
        goalText(r.goal),
        met === undefined ? '' : met ? 'yes' : '**no**',
      ];
    }),
    [1, 2],
  );
}

async function firstLine(cmd: string, args: string[]): Promise<string> {
  try {
    const { stdout } = await run(cmd, args, { timeout: 15_000 });
    return stdout.trim().split('\n')[0];
  } catch {
    return 'unknown';
  }
}

/** Cores, memory, CPU model, Docker and Temporal versions, Node, date and load, as markdown. */
export async function machineInfo(): Promise<string> {
  const docker = await firstLine('docker', ['version', '--format', '{{.Server.Version}}']);
  const storage = await firstLine('docker', ['info', '--format', '{{.Driver}}, cgroup v{{.CgroupVersion}}']);
  const cli = findTemporalCli();
  const temporal = cli ? await firstLine(cli, ['--version']) : 'not found';
  const model = cpus()[0]?.model.trim() ?? 'unknown';
  return markdownTable(
    ['machine', ''],
    [
      ['date', new Date().toISOString()],
      ['cores', String(cpus().length)],
      ['CPU', model],
      ['memory', `${(totalmem() / 1024 ** 3).toFixed(1)} GiB`],
      ['Docker server', `${docker} (${storage})`],
      [
        'Temporal CLI',
        process.env.BENCH_TEMPORAL === 'postgres'
          ? `${temporal}; not used: Temporal ${temporalServerVersion()} on PostgreSQL (infra/temporal-pg.sh)`
          : `${temporal}; dev server (SQLite, in memory)`,
      ],
      ['Node.js', process.version],
      [
        'load average at start (1/5/15 min)',
        loadavg()
          .map((l) => l.toFixed(2))
          .join(' / '),
      ],
    ],
  );
}

/** The Go-built server's version, from infra/temporal-server/go.mod. */
function temporalServerVersion(): string {
  const mod = readFileSync(path.join(__dirname, '..', 'infra', 'temporal-server', 'go.mod'), 'utf8');
  return /^require go\.temporal\.io\/server (v\S+)$/m.exec(mod)?.[1] ?? 'unknown';
}
