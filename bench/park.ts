/**
 * bench/park: what 20 sessions waiting for review hold, before and after
 * they park (DRYDOCK_PARK_AFTER), and how fast a parked session gets its
 * sandbox back, against the `docker run` floor:
 *   held        containers labelled with the sessions, and their memory
 *               (`docker stats`), while all wait at the push gate; again once
 *               all are parked
 *   back        a follow-up to a parked session: its sandbox brought back from
 *               the checkpoint (the timeline's "re-provision: parked" entry)
 *   floor       `docker run -d --network none <the sessions' image> sleep infinity`
 *
 *   npx tsx bench/park.ts     (SESSIONS=20, RUNS=5 resumes, PARK_AFTER=120s by default:
 *                              long enough for all to reach the gate before the first parks)
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import type { WorkflowHandle } from '@temporalio/client';
import { makeFixtureRepo } from '../test/support/helpers';
import { LABELS } from '../sandbox';
import { followup, status as statusQuery, type SessionStatus } from '../workflows/api';
import { atExit, benchMain, startStack } from './stack';
import { fmt, markdownTable, median, ratioTable, runsFromEnv, say, timingTable, type Row } from './table';

const run = promisify(execFile);
const RUNS = runsFromEnv(5);
const SESSIONS = Number(process.env.SESSIONS ?? 20);
/** Long enough for all sessions to reach the gate before the first parks. */
const PARK_AFTER = process.env.PARK_AFTER ?? '120s';

/** The containers of these sessions and their memory (MiB, as `docker stats` reports it). */
async function held(ids: string[]): Promise<{ containers: number; memMiB: number }> {
  const { stdout } = await run('docker', [
    'ps',
    '--filter',
    `label=${LABELS.session}`,
    '--format',
    '{{.ID}} {{.Label "drydock.session"}}',
  ]);
  const mine = stdout
    .split('\n')
    .map((l) => l.trim().split(' '))
    .filter(([id, session]) => id && ids.includes(session))
    .map(([id]) => id);
  if (mine.length === 0) return { containers: 0, memMiB: 0 };
  const stats = await run('docker', ['stats', '--no-stream', '--format', '{{.MemUsage}}', ...mine]);
  const memMiB = stats.stdout
    .split('\n')
    .filter(Boolean)
    .reduce((sum, line) => sum + toMiB(line.split('/')[0].trim()), 0);
  return { containers: mine.length, memMiB };
}

function toMiB(text: string): number {
  const m = /^([\d.]+)\s*([KMG]i?B|B)$/.exec(text);
  if (!m) throw new Error(`docker stats: unexpected memory "${text}"`);
  const unit = { B: 1 / 1024 ** 2, KiB: 1 / 1024, KB: 1 / 1024, MiB: 1, MB: 1, GiB: 1024, GB: 1024 }[m[2]]!;
  return Number(m[1]) * unit;
}

async function waitAll(
  handles: WorkflowHandle[],
  ok: (s: SessionStatus) => boolean,
  what: string,
): Promise<SessionStatus[]> {
  const deadline = Date.now() + 15 * 60_000;
  for (;;) {
    const all = await Promise.all(handles.map((h) => h.query(statusQuery)));
    if (all.every(ok)) return all;
    const failed = all.find((s) => ['failed', 'timed_out', 'cancelled'].includes(s.phase));
    if (failed) throw new Error(`session ${failed.sessionId}: ${failed.phase}: ${failed.error}`);
    if (Date.now() > deadline) throw new Error(`not all sessions ${what} within 15 minutes`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** How long the session's second provisionSandbox (the one that brought the sandbox back) ran, from its history. */
async function secondProvisionMs(handle: WorkflowHandle): Promise<number> {
  const events = (await handle.fetchHistory()).events ?? [];
  const scheduled = events.filter(
    (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'provisionSandbox',
  )[1];
  const of = (kind: 'activityTaskStartedEventAttributes' | 'activityTaskCompletedEventAttributes') =>
    events.find((e) => Number(e[kind]?.scheduledEventId) === Number(scheduled.eventId))!;
  const ms = (e: (typeof events)[number]) =>
    Number(e.eventTime!.seconds) * 1000 + Math.round(e.eventTime!.nanos! / 1e6);
  return ms(of('activityTaskCompletedEventAttributes')) - ms(of('activityTaskStartedEventAttributes'));
}

async function main(): Promise<string> {
  const repo = await makeFixtureRepo();
  const stack = await startStack({
    config: { DRYDOCK_PARK_AFTER: PARK_AFTER, DRYDOCK_MAX_SANDBOXES: SESSIONS + 4 },
  });
  const prefix = `bench-park-${randomBytes(3).toString('hex')}`;
  const handles = await Promise.all(
    Array.from({ length: SESSIONS }, (_, i) =>
      stack.client.workflow.start('agentSession', {
        workflowId: `${prefix}-${i}`,
        taskQueue: stack.taskQueue,
        args: [
          {
            repo: { url: repo.url },
            task: 'bench',
            requestedBy: 'bench',
            agent: { steps: [{ run: 'echo hello >> README.md' }] },
            approval: { required: ['push'] },
            // 20 of the default 2g would hold more memory than this 24 GiB machine has, and
            // admission would queue the rest: the one-line script needs little.
            limits: { memory: '1g' },
          },
        ],
      }),
    ),
  );
  // Cancelled sessions tear their sandboxes down themselves (storage included): waited for before the stack stops.
  atExit(async () => {
    await Promise.all(handles.map((h) => h.cancel().catch(() => undefined)));
    await Promise.all(handles.map((h) => h.result().catch(() => undefined)));
  });
  const ids = handles.map((h) => h.workflowId);
  say(`${SESSIONS} sessions started; waiting for all at the gate`);
  const waiting = await waitAll(handles, (s) => s.phase === 'awaiting_approval' && !s.parked, 'at the gate');
  const before = await held(ids);
  say(`at the gate: ${before.containers} containers, ${before.memMiB.toFixed(0)} MiB; waiting for them to park`);
  await waitAll(handles, (s) => s.parked !== undefined, 'parked');
  const after = await held(ids);

  const back: Row = { name: 'bring back a parked sandbox (follow-up, from the checkpoint)', ms: [] };
  const activity: Row = { name: 'of which the provisionSandbox activity runs (started → completed)', ms: [] };
  for (const handle of handles.slice(0, RUNS)) {
    await handle.executeUpdate(followup, { args: [{ by: 'bench', steps: [{ run: 'echo bye >> README.md' }] }] });
    const [s] = await waitAll([handle], (x) => x.round === 2 && x.pendingApproval !== undefined, 'back at the gate');
    const entry = s.timeline.find((r) => r.name === 're-provision: parked')!;
    back.ms.push(entry.durationMs!);
    activity.ms.push(await secondProvisionMs(handle));
    say(`brought back in ${fmt(entry.durationMs!)} (the activity ${fmt(activity.ms.at(-1)!)})`);
  }
  const floor: Row = { name: 'floor: docker run -d --network none <image> sleep', ms: [] };
  for (let i = 0; i < RUNS; i++) {
    const t = Date.now();
    const { stdout } = await run('docker', [
      'run',
      '-d',
      '--network',
      'none',
      waiting[0].sandbox!.image,
      'sleep',
      'infinity',
    ]);
    floor.ms.push(Date.now() - t);
    await run('docker', ['rm', '-f', stdout.trim()]);
  }
  return [
    markdownTable(
      [`${SESSIONS} sessions waiting for review`, 'containers', 'memory (docker stats)'],
      [
        ['at the gate, before parking', before.containers, `${before.memMiB.toFixed(0)} MiB`],
        [`parked (DRYDOCK_PARK_AFTER=${PARK_AFTER})`, after.containers, `${after.memMiB.toFixed(0)} MiB`],
      ],
      [1, 2],
    ),
    '',
    timingTable([back, activity, floor], 'bringing a sandbox back'),
    '',
    ratioTable([
      {
        name: 'bring back a parked sandbox / floor (docker run)',
        value: median(back.ms) / median(floor.ms),
        goal: { max: 1.5 },
      },
    ]),
  ].join('\n');
}

benchMain('bench/park', main);
