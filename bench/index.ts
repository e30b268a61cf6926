/**
 * `npm run bench`: every benchmark in turn, each in a process of its own
 * (its own dev server, worker and clean-up), the machine table once on top.
 * Tables go to stdout, progress to stderr:
 *
 *   npm run bench > results.md                  all of them
 *   npm run bench -- overhead exec              some of them
 *   npx tsx bench/<name>.ts                     one, with its own machine table
 *
 * bench/concurrency runs twice: against the embedded PGlite (npm start's
 * default) and, when Debian's PostgreSQL is installed (npm test installs it),
 * against a throwaway PostgreSQL cluster.
 *
 * RUNS sets the repetitions of each (each has its own default); see the
 * header of each file for its other variables.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { machineInfo, say } from './table';

/** name -> extra environment; concurrency also against PostgreSQL when it is installed (as for npm test). */
const ALL: [string, Record<string, string>][] = [
  ['start', {}],
  ['pool', {}],
  ['services', {}],
  ['overhead', {}],
  ['round-trip', {}],
  ['park', {}],
  ['exec', {}],
  ['desktop', {}],
  ['people', {}],
  ['build', {}],
  ['concurrency', { BENCH_DB: 'pglite' }],
  ...(existsSync('/usr/lib/postgresql')
    ? [['concurrency', { BENCH_DB: 'postgres' }] as [string, Record<string, string>]]
    : []),
];

let current: ChildProcess | undefined;
let interrupted = false;
// Stop after the running benchmark has cleaned up (it gets the signal too).
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    interrupted = true;
    if (current?.exitCode === null) current.kill(signal);
  });
}

function runOne(name: string, env: Record<string, string>): Promise<number> {
  return new Promise((resolve) => {
    current = spawn(process.execPath, ['--import', 'tsx', path.join(__dirname, `${name}.ts`)], {
      stdio: ['ignore', 'inherit', 'inherit'],
      env: { ...process.env, BENCH_MACHINE: '0', ...env },
    });
    current.on('exit', (code) => resolve(code ?? 1));
  });
}

async function main(): Promise<number> {
  const names = process.argv.slice(2);
  const known = [...new Set(ALL.map(([n]) => n))];
  const unknown = names.filter((n) => !known.includes(n));
  if (unknown.length) throw new Error(`unknown benchmark(s): ${unknown.join(', ')}; known: ${known.join(', ')}`);
  const started = Date.now();
  process.stdout.write(`# drydock benchmarks\n\n${await machineInfo()}\n\n`);
  const failed: string[] = [];
  for (const [name, env] of ALL.filter(([n]) => !names.length || names.includes(n))) {
    const label = [name, ...Object.values(env)].join(' ');
    say(`bench/${label}`);
    if ((await runOne(name, env)) !== 0) failed.push(label);
    process.stdout.write('\n');
    if (interrupted) return 130;
  }
  const minutes = ((Date.now() - started) / 60_000).toFixed(1);
  process.stdout.write(`_All benchmarks: ${minutes} min${failed.length ? `; failed: ${failed.join(', ')}` : ''}._\n`);
  return failed.length ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err: Error) => {
    console.error(`bench: ${err.message}`);
    process.exit(1);
  },
);
