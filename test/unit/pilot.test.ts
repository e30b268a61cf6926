/**
 * The pilot's pure parts: its file's validation and shipped JSON Schema, its
 * sessions and their inputs, concurrency and faults as decisions, parallel
 * attempts' rules, the report's arithmetic, the charts, and the acceptance
 * script run against a real git work tree.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import pino from 'pino';
import { pilotJsonSchema } from '../../cli/schema';
import { barChart, lineChart, yTicks } from '../../figures/charts';
import { groupFigures, type PilotSessionRecord } from '../../figures/pilot-report';
import { periodsOf } from '../../figures/trends';
import type { AttemptsStatus, PilotSessionView, SessionProgress } from '../../workflows/api';
import { parseSessionInput } from '../../workflows/input';
import { parsePilotInput, type PilotInputDraft } from '../../workflows/pilot/input';
import { acceptanceScript } from '../../workflows/rules/acceptance';
import { createFaultActivities } from '../../sandbox/activities/faults';
import { LABELS, type SandboxProvider } from '../../sandbox/provider';
import { finalOutcome, plannedAttempts, refusePick } from '../../workflows/rules/attempts';
import {
  dueFaults,
  missedFaults,
  nextToStart,
  plannedSessions,
  sessionInputOf,
  stateOf,
} from '../../workflows/rules/pilot';

const pilot: PilotInputDraft = {
  name: 'checkout',
  repo: { url: 'https://github.com/acme/app.git' },
  configurations: [
    { name: 'scripted', agent: { kind: 'script' } },
    { name: 'loop', agent: { kind: 'openai', model: 'gpt-test' } },
  ],
  attempts: 2,
  tasks: [
    {
      id: 'greet',
      task: 'Add a greeting',
      acceptance: 'sh acc.sh',
      tags: ['ui'],
      steps: [{ run: 'echo hi > hi.txt' }],
    },
    { id: 'fix', task: 'Fix the total', repo: { url: 'https://github.com/acme/cart.git' } },
  ],
  faults: [{ kind: 'stale_snapshot', task: 'fix', configuration: 'loop', attempt: 2 }],
};
const parsed = () => {
  const p = parsePilotInput(pilot);
  if (!p.ok) throw new Error(p.problems.join('; '));
  return p.input;
};

test('a pilot file is refused naming each bad field', () => {
  const bad = parsePilotInput({
    ...pilot,
    repo: undefined,
    tasks: [pilot.tasks[0], { ...pilot.tasks[0], task: 'again' }],
    faults: [
      { kind: 'sandbox_killed', task: 'nope' },
      { kind: 'flood', task: 'greet' },
    ],
    configurations: [{ name: 'Bad Name', agent: {} }],
  });
  expect(bad.ok).toBe(false);
  expect(!bad.ok && bad.problems).toEqual(
    expect.arrayContaining([
      expect.stringMatching(/^configurations\.0\.name: lower-case letters/),
      expect.stringMatching(/^faults\.1\.kind: /),
    ]),
  );
  const dup = parsePilotInput({
    ...pilot,
    tasks: [pilot.tasks[0], { ...pilot.tasks[0] }],
    faults: [{ kind: 'sandbox_killed', task: 'nope' }],
  });
  expect(!dup.ok && dup.problems).toEqual(['tasks.1.id: greet appears twice', 'faults.0.task: no task nope']);
  const noRepo = parsePilotInput({ ...pilot, repo: undefined });
  expect(!noRepo.ok && noRepo.problems).toEqual(['tasks.0.repo: required when the pilot names no repo']);
});

test('the shipped JSON Schema of a pilot file is the one generated from the zod schema (npm run schema)', () => {
  const shipped = JSON.parse(readFileSync(path.join(__dirname, '../../workflows/pilot.schema.json'), 'utf8'));
  expect(shipped).toEqual(pilotJsonSchema());
});

test('sessions: task by task, each configuration attempt by attempt; inputs that end at the gate', () => {
  const input = parsed();
  const planned = plannedSessions(input);
  expect(planned.map((p) => [p.sessionId, p.faults])).toEqual([
    ['checkout.greet.scripted.1', []],
    ['checkout.greet.scripted.2', []],
    ['checkout.greet.loop.1', []],
    ['checkout.greet.loop.2', []],
    ['checkout.fix.scripted.1', []],
    ['checkout.fix.scripted.2', []],
    ['checkout.fix.loop.1', []],
    ['checkout.fix.loop.2', ['stale_snapshot']],
  ]);
  const scripted = sessionInputOf(input, planned[0]);
  expect(scripted).toMatchObject({
    repo: { url: 'https://github.com/acme/app.git' },
    task: 'Add a greeting',
    agent: { kind: 'script', name: 'scripted', steps: [{ run: 'echo hi > hi.txt' }] },
    publish: { push: false },
    acceptance: { command: 'sh acc.sh' },
  });
  const stale = sessionInputOf(input, planned[7]);
  expect(stale).toMatchObject({ repo: { url: 'https://github.com/acme/cart.git' }, drill: { staleSnapshot: true } });
  expect(stale.acceptance).toBeUndefined();
  // Every session input is valid as it is.
  for (const p of planned) expect(parseSessionInput(sessionInputOf(input, p)).ok).toBe(true);
  // Publishing pilots keep the session settings' publishing.
  const publishing = sessionInputOf(
    { ...input, publish: true, session: { publish: { pullRequest: true } } },
    planned[0],
  );
  expect(publishing.publish).toEqual({ pullRequest: true });
  // Repo memory is a configuration's switch: without it, a session is given no notes and keeps none.
  expect(scripted.memory).toBeUndefined(); // on, as a session's default
  const withoutMemory = { ...input, configurations: input.configurations.map((c) => ({ ...c, memory: false })) };
  const bare = sessionInputOf(withoutMemory, planned[0]);
  expect(bare.memory).toEqual({ use: false, propose: false });
  expect(parseSessionInput(bare).ok).toBe(true);
});

const view = (
  id: string,
  state: PilotSessionView['state'],
  faults: string[] = [],
  applied: string[] = [],
): PilotSessionView => ({
  sessionId: id,
  task: 't',
  configuration: 'c',
  attempt: 1,
  faults,
  state,
  applied,
});

test('concurrency: working sessions take slots, one at its gate frees its own', () => {
  const sessions = [
    view('a', 'working'),
    view('b', 'at_gate'),
    view('c', 'planned'),
    view('d', 'planned'),
    view('e', 'planned'),
  ];
  expect(nextToStart(sessions, 3).map((s) => s.sessionId)).toEqual(['c', 'd']);
  expect(nextToStart(sessions, 1)).toEqual([]);
  expect([
    stateOf('agent'),
    stateOf('awaiting_approval'),
    stateOf('attached'),
    stateOf('rejected'),
    stateOf(undefined),
  ]).toEqual(['working', 'at_gate', 'at_gate', 'ended', 'working']);
});

test('faults at their moment, each once; one whose moment never came is missed', () => {
  const progress = (phase: SessionProgress['phase'], hostQueue?: string) =>
    ({ sessionId: 'a', phase, seq: 1, at: '', startedAt: '', ...(hostQueue ? { hostQueue } : {}) }) as SessionProgress;
  const killing = view('a', 'working', ['sandbox_killed', 'credentials_rotated']);
  expect(dueFaults(killing, progress('provisioning'))).toEqual([]);
  expect(dueFaults(killing, progress('agent', 'drydock@h'))).toEqual(['sandbox_killed']);
  expect(dueFaults({ ...killing, state: 'at_gate' }, progress('awaiting_approval', 'drydock@h'))).toEqual([
    'sandbox_killed',
    'credentials_rotated',
  ]);
  const done = { ...killing, applied: ['sandbox_killed: killed x'] };
  expect(dueFaults(done, progress('agent', 'drydock@h'))).toEqual([]);
  expect(dueFaults(view('b', 'planned', ['stale_snapshot']), undefined)).toEqual([]);
  expect(dueFaults(view('b', 'working', ['stale_snapshot']), undefined)).toEqual(['stale_snapshot']);
  expect(missedFaults({ ...done, state: 'ended' })).toEqual(['credentials_rotated']);
  expect(missedFaults(done)).toEqual([]);
});

test('attempts: each its own input (its agent, the parent named, the parent branch); picks refused with why', () => {
  const raw = {
    repo: { url: 'https://github.com/acme/app.git' },
    task: 'Greet',
    requestedBy: 'carol',
    attempts: [{ agent: { kind: 'script', steps: [{ run: 'true' }] } }, { agent: { kind: 'openai' } }],
  };
  const input = parseSessionInput(raw);
  if (!input.ok) throw new Error(input.problems.join());
  const refused = plannedAttempts('s1', raw, input.input);
  expect(!refused.ok && refused.problems).toEqual(['attempts.1: agent.model: required for agent.kind "openai"']);
  const ok = plannedAttempts('s1', { ...raw, attempts: 2 }, { ...input.input, attempts: 2 });
  expect(ok.ok && ok.attempts.map((a) => [a.sessionId, a.input.attemptOf, a.input.publish?.branch])).toEqual([
    ['s1.1', { session: 's1', index: 1, count: 2 }, 'drydock/s1'],
    ['s1.2', { session: 's1', index: 2, count: 2 }, 'drydock/s1'],
  ]);
  const pending = {
    action: 'push' as const,
    change: 'a'.repeat(64),
    approvers: ['alice'],
    deadline: '',
    evidence: {} as never,
  };
  const status: AttemptsStatus = {
    sessionId: 's1',
    repo: '',
    task: '',
    phase: 'awaiting_pick',
    startedAt: '',
    refusedPicks: [],
    attempts: [
      {
        index: 1,
        sessionId: 's1.1',
        agent: 'a',
        progress: { sessionId: 's1.1', phase: 'agent', seq: 2, at: '', startedAt: '' },
      },
      {
        index: 2,
        sessionId: 's1.2',
        agent: 'b',
        progress: {
          sessionId: 's1.2',
          phase: 'awaiting_approval',
          seq: 5,
          at: '',
          startedAt: '',
          pending,
          policy: { approvers: ['alice'], forbidSelfApproval: true },
          requestedBy: 'carol',
        },
      },
    ],
  };
  expect(refusePick(status, { attempt: 1, by: 'alice' })).toBe('attempt 1 is not waiting for review (phase: agent)');
  expect(refusePick(status, { attempt: 3, by: 'alice' })).toBe('no attempt 3: pick 1 to 2');
  expect(refusePick(status, { attempt: 2, by: 'bob', change: 'a'.repeat(64) })).toMatch(/bob is not an approver/);
  expect(refusePick(status, { attempt: 2, by: 'alice', change: 'b'.repeat(64) })).toMatch(/^stale: /);
  expect(refusePick(status, { attempt: 2, by: 'alice', change: 'a'.repeat(64) })).toBeUndefined();
  // T4-L1: a pick is an approval, so it names the change, whole.
  expect(refusePick(status, { attempt: 2, by: 'alice' } as never)).toBe(
    "a pick names the change it approves: 'change', the attempt's pending change",
  );
  expect(refusePick(status, { attempt: 2, by: 'alice', change: 'a'.repeat(12) })).toMatch(/must be the whole hash/);
  expect(
    refusePick(
      { ...status, picked: { attempt: 2, sessionId: 's1.2', by: 'dan', change: '', at: '' } },
      { attempt: 1, by: 'alice' },
    ),
  ).toBe('attempt 2 was already picked by dan');
  const ended = (phase: SessionProgress['phase']) => ({ sessionId: '', phase, seq: 9, at: '', startedAt: '' });
  const outcome = (phases: SessionProgress['phase'][], picked?: number) =>
    finalOutcome({
      attempts: phases.map((phase, i) => ({ index: i + 1, sessionId: '', agent: '', progress: ended(phase) })),
      ...(picked ? { picked: { attempt: picked, sessionId: '', by: '', change: '', at: '' } } : {}),
    });
  expect(outcome(['cancelled', 'completed'], 2)).toBe('completed');
  expect(outcome(['rejected', 'rejected'])).toBe('rejected');
  expect(outcome(['rejected', 'failed'])).toBe('failed');
});

test("the report's figures of a group: acceptance, review minutes, cost per accepted change, failures", () => {
  const session = (ended?: Partial<NonNullable<PilotSessionRecord['ended']>>): PilotSessionRecord => ({
    sessionId: 's',
    task: 't',
    configuration: 'c',
    attempt: 1,
    faults: [],
    ...(ended
      ? {
          ended: {
            outcome: 'completed',
            failureCause: null,
            timeToReviewMs: 60_000,
            acceptancePassed: true,
            approved: true,
            costUsd: 0.5,
            sandboxMs: 120_000,
            reviewActiveMs: 30_000,
            decisionsUnmeasured: 0,
            retries: 1,
            restarts: 0,
            ...ended,
          },
        }
      : {}),
  });
  const figures = groupFigures(
    'c',
    [
      session({}),
      session({ reviewActiveMs: 90_000, timeToReviewMs: 180_000, acceptancePassed: false }),
      session({ approved: false, outcome: 'rejected', failureCause: 'rejected', reviewActiveMs: 60_000, costUsd: 1 }),
      session({ approved: true, reviewActiveMs: null, decisionsUnmeasured: 1 }),
      session({
        outcome: 'failed',
        failureCause: 'verification_failed',
        approved: false,
        timeToReviewMs: null,
        acceptancePassed: null,
      }),
      session(),
    ],
    0.1,
  );
  expect(figures).toEqual({
    name: 'c',
    sessions: 6,
    ended: 5,
    reachedReview: 4,
    acceptanceRun: 4,
    acceptancePassed: 3,
    approved: 3,
    rejected: 1,
    approvalRate: 75,
    reviewMinutes: 3.5,
    // Two accepted changes measured over 0.5 + 1.5 minutes; the unmeasured one is counted apart.
    acceptedPerReviewMinute: 1,
    acceptedUnmeasured: 1,
    modelCostUsd: 3,
    sandboxMinutes: 10,
    // (3 USD of model + 10 sandbox minutes at 0.1) / 3 accepted
    costPerAcceptedUsd: 1.333333,
    medianSecondsToReview: 60,
    retries: 5,
    restarts: 0,
    failures: { rejected: 1, verification_failed: 1 },
  });
});

test('charts: SVG with a title and a description, text escaped, no script; round axes', () => {
  expect(yTicks(7)).toEqual([0, 2, 4, 6, 8]);
  expect(yTicks(0.3)).toEqual([0, 0.1, 0.2, 0.3]);
  expect(yTicks(0)).toEqual([0, 1]);
  const svg = lineChart({
    title: 'Merge rate <by repo>',
    labels: ['2026-11-30', '2026-12-01'],
    series: [{ name: 'acme/app', values: [50, null] }],
    unit: '%',
  });
  expect(svg).toMatch(/^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  expect(svg).toContain('<title id="chart1-t">Merge rate &lt;by repo&gt;</title>');
  expect(svg).toContain('acme/app: 2026-11-30 50, 2026-12-01 none');
  expect(svg).not.toMatch(/<script|javascript:|https?:\/\/(?!www\.w3\.org)/);
  expect(barChart({ title: 'x', bars: [{ label: 'a', value: null }] })).toContain('a none');
  expect(periodsOf(new Date('2026-11-27T10:00:00Z'), new Date('2026-12-01T00:00:00Z'), 'day')).toEqual([
    '2026-11-27',
    '2026-11-28',
    '2026-11-29',
    '2026-11-30',
    '2026-12-01',
  ]);
  expect(periodsOf(new Date('2026-11-27T10:00:00Z'), new Date('2026-12-01T00:00:00Z'), 'week')).toEqual([
    '2026-11-23',
    '2026-11-30',
  ]);
});

test("the acceptance command runs, and the workspace is the change again afterwards: its exit code is the command's", () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'drydock-acceptance-'));
  const git = (...args: string[]) =>
    execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@x', ...args], { cwd: dir, encoding: 'utf8' });
  git('init', '--quiet');
  writeFileSync(path.join(dir, 'a.txt'), 'base\n');
  writeFileSync(path.join(dir, '.gitignore'), 'node_modules/\n');
  git('add', '.');
  git('commit', '--quiet', '-m', 'base');
  // The agent's change (a modified file and a new one, untracked), snapshot as drydock does.
  writeFileSync(path.join(dir, 'a.txt'), 'changed\n');
  writeFileSync(path.join(dir, 'new.txt'), 'new\n');
  const index = path.join(dir, '.git', 'scratch');
  const tree = execFileSync(
    'sh',
    ['-c', `GIT_INDEX_FILE=${index} git add -A && GIT_INDEX_FILE=${index} git write-tree`],
    { cwd: dir, encoding: 'utf8' },
  ).trim();
  const commit = git('commit-tree', tree, '-p', 'HEAD', '-m', 'snapshot').trim();
  git('update-ref', 'refs/drydock/change', commit);
  const run = (command: string) => {
    try {
      execFileSync('sh', ['-c', acceptanceScript(command)], { cwd: dir, stdio: 'pipe' });
      return 0;
    } catch (err) {
      return (err as { status: number }).status;
    }
  };
  expect(
    run(
      'grep -q changed a.txt && echo junk > junk.txt && echo x >> a.txt && rm new.txt && mkdir -p node_modules && touch node_modules/kept',
    ),
  ).toBe(0);
  expect(readFileSync(path.join(dir, 'a.txt'), 'utf8')).toBe('changed\n');
  expect(readFileSync(path.join(dir, 'new.txt'), 'utf8')).toBe('new\n');
  expect(existsSync(path.join(dir, 'junk.txt'))).toBe(false);
  expect(existsSync(path.join(dir, 'node_modules', 'kept'))).toBe(true); // ignored: left, as verification's would be
  expect(run('exit 3')).toBe(3);
  expect(run('echo more > junk2.txt; false')).toBe(1);
  expect(existsSync(path.join(dir, 'junk2.txt'))).toBe(false);
});

test("a sandbox killed on purpose: a retry of the fault kills only what was there when it was asked for, never the session's replacement", async () => {
  const asked = Date.parse('2026-12-06T16:07:10Z');
  const destroyed: string[] = [];
  const sandbox = (name: string, session: string, createdMs: number) => ({
    id: name,
    name,
    labels: { [LABELS.session]: session },
    createdMs,
  });
  const made = [
    sandbox('s-0', 's', asked - 5_000), // the session's sandbox when the pilot asked
    sandbox('s-0-svc-db', 's', asked - 5_000), // its service
    sandbox('s-0-r1', 's', asked + 400), // the replacement made after a first attempt killed s-0
    sandbox('other', 'o', asked - 5_000),
  ];
  const sandboxes = {
    // As Docker's list says it: to the second (the replacement's second is the ask's).
    list: async () => made.map((c) => ({ ...c, createdMs: Math.floor(c.createdMs / 1000) * 1000 })),
    info: async (name: string) => made.find((c) => c.name === name),
    destroy: async (name: string) => Boolean(destroyed.push(name)),
  } as unknown as SandboxProvider;
  const { killSessionSandbox } = createFaultActivities({ sandboxes, hostId: 'h', log: pino({ level: 'silent' }) });
  const retry = new MockActivityEnvironment({ attempt: 2, scheduledTimestampMs: asked });
  expect(await retry.run(killSessionSandbox, { sessionId: 's' })).toEqual({ killed: ['s-0', 's-0-svc-db'] });
  expect(destroyed).toEqual(['s-0', 's-0-svc-db']);
});
