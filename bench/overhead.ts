/**
 * bench/overhead: what drydock costs on top of the work itself.
 *   session    a complete session via drydock (scripted agent of three steps,
 *              the repo's test, the push approved by policy, push to a bare
 *              remote, teardown), from the start request to the result;
 *   plain      a script doing the same Docker and git operations in sequence,
 *              no Temporal: clone, create + start the sandbox with the same
 *              hardening (sandbox/docker/provider.ts, i.e. dockerode, as drydock), copy
 *              the repo in, the steps, the test, commit, bundle out, push, rm;
 * Prints medians, spreads, the ratio session/plain, and where a session's
 * time goes (from its workflow history, and the plain script's parts).
 *
 * Temporal's own cost per activity is bench/round-trip.ts's.
 *
 *   npx tsx bench/overhead.ts        RUNS=5
 */
import { sandboxOf, DockerProvider, LABELS } from '../sandbox';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { instrument, operationsTable, resetProfile } from './instrument';
import {
  AGENT_STEPS,
  git,
  historyProfile,
  type HistoryProfile,
  makeRepo,
  profileTable,
  runSession,
  TEST_COMMAND,
} from './session';
import { benchMain, startStack, tempDir } from './stack';
import { fmt, markdownTable, median, ratioTable, runsFromEnv, say, spread, timingTable, type Row } from './table';

const RUNS = runsFromEnv(5);

/** The plain script's parts, in order, with their durations. */
type Parts = [string, number][];

async function plainSession(
  sandboxes: DockerProvider,
  opts: { image: string; hostId: string; egressDir: string; bare: string; label: string },
): Promise<{ ms: number; parts: Parts }> {
  const parts: Parts = [];
  const started = performance.now();
  let last = started;
  const mark = (name: string) => {
    const now = performance.now();
    parts.push([name, now - last]);
    last = now;
  };
  const work = await tempDir('plain');
  const name = `drydock-bench-plain-${opts.label}`;
  const branch = `plain/${opts.label}`;
  await git(['clone', '--quiet', opts.bare, work]);
  const base = (await git(['rev-parse', 'HEAD'], work)).trim();
  mark('git clone (host)');
  await sandboxes.create({
    name,
    image: opts.image,
    labels: { [LABELS.host]: opts.hostId },
    // The session input's defaults.
    cpus: 2,
    memoryBytes: 2 * 1024 ** 3,
    pids: 512,
    tmpBytes: 512 * 1024 ** 2,
    diskBytes: 10 * 1024 ** 3,
    egressDir: opts.egressDir,
  });
  mark('container create + start');
  try {
    const tar = spawn('tar', ['-C', work, '--owner=1000', '--group=1000', '--numeric-owner', '-cf', '-', '.'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    await sandboxes.copyIn(name, tar.stdout, '/workspace');
    await sandboxOf(sandboxes, name).commands.run([
      'sh',
      '-c',
      'git config --global user.name bench && git config --global user.email bench@localhost && git config --global --add safe.directory /workspace',
    ]);
    mark('copy repo in + git config');
    for (const step of AGENT_STEPS) {
      if ('run' in step) await sandboxOf(sandboxes, name).commands.run(['sh', '-c', step.run]);
      else
        await sandboxOf(sandboxes, name).commands.run(
          ['sh', '-c', 'mkdir -p "$(dirname "$1")" && cat > "$1"', 'write', step.write.path],
          {
            stdin: step.write.content,
          },
        );
    }
    mark('agent steps (3 docker exec)');
    await sandboxOf(sandboxes, name).commands.run(['sh', '-c', TEST_COMMAND]);
    mark('test (docker exec)');
    await sandboxOf(sandboxes, name).commands.run([
      'sh',
      '-c',
      'set -e; git checkout -q -B "$1"; git add -A; git commit -q -m "$2"',
      'commit',
      branch,
      'bench: add a greeting',
    ]);
    const bundle = await sandboxes.exec(name, ['git', 'bundle', 'create', '-', `${base}..refs/heads/${branch}`]);
    if (bundle.exitCode !== 0) throw new Error(`git bundle: ${bundle.stderr.toString()}`);
    mark('commit + bundle out (docker exec)');
    const file = path.join(work, '.git', 'change.bundle');
    await writeFile(file, bundle.stdout);
    await git(['fetch', '--quiet', file, `refs/heads/${branch}:refs/heads/${branch}`], work);
    await git(['push', '--quiet', opts.bare, `refs/heads/${branch}`], work);
    mark('fetch bundle + git push (host)');
  } finally {
    await sandboxes.destroy(name);
    mark('container rm');
  }
  return { ms: performance.now() - started, parts };
}

async function main(): Promise<string> {
  instrument();
  const stack = await startStack({ config: { DRYDOCK_APPROVAL_REQUIRED: [] } });
  const repo = await makeRepo();
  const sandboxes = new DockerProvider();
  const egressDir = await tempDir('egress');
  const plain = (label: string) =>
    plainSession(sandboxes, {
      image: stack.image,
      hostId: stack.config.DRYDOCK_HOST_ID,
      egressDir,
      bare: repo.bare,
      label,
    });

  say('warm-up: one session and one plain run (not counted)');
  await runSession(stack, repo);
  await plain('warmup');
  resetProfile();

  const session: Row = { name: 'complete session via drydock (start → result)', ms: [] };
  const script: Row = { name: 'plain script, same Docker and git operations', ms: [] };
  const ready: Row = { name: 'session: start → first agent command runs', ms: [] };
  const profiles: HistoryProfile[] = [];
  const plainParts: Parts[] = [];
  for (let i = 0; i < RUNS; i++) {
    // Alternated, so a change in the machine's load hits both alike.
    const s = await runSession(stack, repo);
    session.ms.push(s.ms);
    ready.ms.push(s.readyMs);
    profiles.push(await historyProfile(stack.client, s.id));
    const p = await plain(`${i}-${randomBytes(2).toString('hex')}`);
    script.ms.push(p.ms);
    plainParts.push(p.parts);
    say(`run ${i + 1}/${RUNS}: session ${fmt(s.ms)}, plain ${fmt(p.ms)}`);
  }

  const meanRun = (type: string) =>
    profiles.reduce((a, p) => a + (p.activities[type]?.runMs ?? 0), 0) / profiles.length;
  const types = [...new Set(profiles.flatMap((p) => Object.keys(p.activities)))];
  const operations = operationsTable(RUNS, Object.fromEntries(types.map((t) => [t, meanRun(t)])));

  const ratio = median(session.ms) / median(script.ms);
  const partNames = plainParts[0].map(([n]) => n);
  const partsTable = markdownTable(
    ['plain script part', 'median', 'min – max'],
    [
      ...partNames.map((n, i) => {
        const xs = plainParts.map((p) => p[i][1]);
        return [n, fmt(median(xs)), spread(xs)];
      }),
      ['**total**', `**${fmt(median(script.ms))}**`, spread(script.ms)],
    ],
    [1, 2],
  );
  return [
    timingTable([session, ready, script], 'complete session'),
    '',
    ratioTable([{ name: 'session via drydock / plain script', value: ratio, goal: { max: 1.2 } }]),
    '',
    'Where a drydock session spends its time (workflow history, server timestamps):',
    '',
    profileTable(profiles),
    '',
    'The activities by kind of operation (mean per session; count per session in brackets):',
    '',
    operations,
    '',
    'The plain script, part by part:',
    '',
    partsTable,
  ].join('\n');
}

benchMain('bench/overhead', main);
