/**
 * `drydock pilot start|resume|stop|status|report`, `drydock pick` (parallel
 * attempts), `drydock trends` (figures over time) and `drydock defects sweep`
 * (escaped defects, now). A pilot file is YAML (or JSON) validated like the
 * workflow validates it (workflows/pilot/input.ts; its JSON Schema:
 * workflows/pilot.schema.json).
 */
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { InvalidArgumentError, Option } from 'commander';
import { parse as parseYaml } from 'yaml';
import type { Client } from '@temporalio/client';
import type { Config } from '../platform/config';
import { withDatabase } from './audit';
import { connectClient } from '../platform/temporal-connection';
import { attemptsOf, pickAttempt, startPilot, pilotOf, stopPilotRun } from '../platform/attempts';
import { buildPilotReport, pilotReportCsv, pilotReportMarkdown } from '../figures/pilot-report';
import { buildFigures, figuresCsv, type Dimension, type Period } from '../figures/trends';
import { sweepEscapedDefects } from '../figures/defects';
import { githubSettings, octokitFor } from '../github/client';
import { windowStart } from '../store/pilot-report';
import { parsePilotInput, type PilotInput } from '../workflows/pilot/input';
import type { AttemptsStatus, PilotStatus } from '../workflows/api';

/** Reads and validates a pilot file; each problem names its field. */
export async function readPilotFile(file: string): Promise<PilotInput> {
  const text = await readFile(file, 'utf8');
  let raw: unknown;
  try {
    raw = parseYaml(text, { maxAliasCount: 100 });
  } catch (err) {
    throw new Error(`${file}: not valid YAML (${(err as Error).message})`);
  }
  const parsed = parsePilotInput(raw);
  if (!parsed.ok) throw new Error(`${file}: ${parsed.problems.join('; ')}`);
  return parsed.input;
}

const positive = (v: string) => {
  if (!/^[1-9]\d*$/.test(v)) throw new InvalidArgumentError('a positive number');
  return Number(v);
};

export function describePilot(s: PilotStatus): string {
  const { planned, working, at_gate, ended } = s.counts;
  const lines = [
    `pilot ${s.pilot}: ${s.phase}${s.stoppedBy ? ` (stopped by ${s.stoppedBy})` : ''}, concurrency ${s.concurrency}`,
    `  ${ended} ended, ${at_gate} waiting for review, ${working} working, ${planned} not started`,
    ...(s.resumed ? [`  resumed: ${s.resumed.ended} had ended, ${s.resumed.underWay} were under way`] : []),
  ];
  for (const v of s.sessions) {
    lines.push(`  ${v.sessionId.padEnd(50)} ${v.state.padEnd(8)} ${v.phase ?? ''}`);
    for (const a of v.applied) lines.push(`      fault ${a}`);
    if (v.disowned) lines.push(`      ${v.disowned}`);
  }
  return lines.join('\n');
}

export function describeAttempts(s: AttemptsStatus): string {
  const lines = [
    `${s.sessionId}: ${s.phase}${s.picked ? `, attempt ${s.picked.attempt} picked by ${s.picked.by}` : ''}`,
  ];
  for (const a of s.attempts) {
    const p = a.progress;
    const seconds = p ? Math.round((Date.parse(p.at) - Date.parse(p.startedAt)) / 1000) : 0;
    lines.push(
      `  ${a.index}. ${a.sessionId} (${a.agent}): ${p?.phase ?? 'starting'}` +
        (p?.verification ? `, verification ${p.verification.passed ? 'passed' : 'failed'}` : '') +
        (p?.agent ? `, $${p.agent.costUsd.toFixed(4)}` : '') +
        `, ${seconds}s` +
        (p?.pending ? `, change ${p.pending.change}` : ''),
    );
    if (p?.change?.diffstat)
      lines.push(
        ...p.change.diffstat
          .trimEnd()
          .split('\n')
          .map((l) => `       ${l}`),
      );
  }
  return lines.join('\n');
}

export function addPilotCommands(program: Command, config: Config, who: () => string): void {
  const pilot = program.command('pilot').description('A frozen task set against agent configurations (docs/pilot.md)');
  const client = (): Promise<Client> => connectClient(config);
  for (const resume of [false, true]) {
    pilot
      .command(`${resume ? 'resume' : 'start'} <file>`)
      .description(resume ? 'Start a stopped pilot again: what it started is not started twice' : 'Start a pilot')
      .option('--concurrency <n>', 'sessions working at once', positive)
      .option('--attempts <n>', 'sessions per task and configuration', positive)
      .action(async (file: string, opts) => {
        const input = await readPilotFile(file);
        const id = await startPilot(
          await client(),
          {
            ...input,
            requestedBy: input.requestedBy ?? who(),
            ...(opts.concurrency ? { concurrency: opts.concurrency } : {}),
            ...(opts.attempts ? { attempts: opts.attempts } : {}),
          },
          { taskQueue: config.DRYDOCK_TASK_QUEUE, resume },
        );
        console.log(`${id} ${resume ? 'resumed' : 'started'}: bin/drydock pilot status ${input.name}`);
      });
  }
  pilot
    .command('stop <name>')
    .description('Start nothing more; sessions under way go on (resume to go on)')
    .action(async (name: string) => console.log(describePilot(await stopPilotRun(await client(), name, who()))));
  pilot
    .command('status <name>')
    .option('--json', 'machine-readable output')
    .action(async (name: string, opts) => {
      const s = await pilotOf(await client(), name);
      console.log(opts.json ? JSON.stringify(s, null, 2) : describePilot(s));
    });
  pilot
    .command('report <name>')
    .description('The configurations side by side, and what each fault did')
    .addOption(new Option('--format <format>').choices(['markdown', 'csv', 'json']).default('markdown'))
    .option('--sandbox-price <usd>', 'USD per sandbox minute (default DRYDOCK_SANDBOX_MINUTE_PRICE)', Number)
    .action(async (name: string, opts) => {
      const sandboxMinutePrice = opts.sandboxPrice ?? config.DRYDOCK_SANDBOX_MINUTE_PRICE;
      const report = await withDatabase(config, (db) => buildPilotReport(db.pool, { pilot: name, sandboxMinutePrice }));
      if (opts.format === 'json') console.log(JSON.stringify(report, null, 2));
      else process.stdout.write(opts.format === 'csv' ? pilotReportCsv(report) : pilotReportMarkdown(report));
    });
  addPickCommand(program, config, who);
  addTrendsCommands(program, config);
}

function addPickCommand(program: Command, config: Config, who: () => string): void {
  program
    .command('pick <session> [attempt]')
    .description('Parallel attempts: show them side by side, or pick one to publish (the others end without a push)')
    .option('--change <hash>', "the change you reviewed: the attempt's whole change hash, as the list shows it")
    .option('--comment <text>')
    .action(async (id: string, attempt: string | undefined, opts) => {
      const c = await connectClient(config);
      if (!attempt) return console.log(describeAttempts(await attemptsOf(c, id)));
      // A pick approves a change: the one reviewed, named whole, or a change that moved meanwhile would be.
      if (!opts.change) {
        throw new InvalidArgumentError(
          `name the change you reviewed: drydock pick ${id} ${attempt} --change <hash> (drydock pick ${id} lists them)`,
        );
      }
      const picked = await pickAttempt(c, id, {
        attempt: positive(attempt),
        by: who(),
        change: opts.change,
        ...(opts.comment ? { comment: opts.comment } : {}),
      });
      console.log(
        `attempt ${picked.attempt} (${picked.sessionId}) picked by ${picked.by}: change ${picked.change.slice(0, 12)}`,
      );
    });
}

function addTrendsCommands(program: Command, config: Config): void {
  program
    .command('trends')
    .description('Figures over time per repo, agent or requester: merge rate, time to merge, escaped defects, cost...')
    .option('--since <duration>', 'window, e.g. 30d', '30d')
    .addOption(new Option('--by <dimension>').choices(['repo', 'agent', 'requester']).default('repo'))
    .addOption(new Option('--period <period>').choices(['day', 'week']).default('day'))
    .addOption(new Option('--format <format>').choices(['csv', 'json']).default('csv'))
    .action(async (opts) => {
      const since = windowStart(opts.since);
      if (!since) throw new InvalidArgumentError(`--since: expected a duration like 30d, got "${opts.since}"`);
      const figures = await withDatabase(config, (db) =>
        buildFigures(db.pool, {
          since,
          by: opts.by as Dimension,
          period: opts.period as Period,
          sandboxMinutePrice: config.DRYDOCK_SANDBOX_MINUTE_PRICE,
        }),
      );
      process.stdout.write(opts.format === 'json' ? `${JSON.stringify(figures, null, 2)}\n` : figuresCsv(figures));
    });
  program
    .command('defects')
    .description('Escaped defects: search merged drydock changes for a revert or a fix of their lines, now')
    .command('sweep')
    .action(async () => {
      const settings = githubSettings(config);
      const found = await withDatabase(config, (db) =>
        sweepEscapedDefects({
          pool: db.pool,
          octokitFor: (owner, repo) => octokitFor(settings, owner, repo, { contents: 'read', pull_requests: 'read' }),
          windowMs: config.DRYDOCK_DEFECT_WINDOW,
        }),
      );
      console.log(`${found.searched} merged changes searched, ${found.found.length} escaped defects found`);
      for (const d of found.found) console.log(`  ${d.kind} ${d.commit.slice(0, 12)} ${d.summary}`);
    });
}
