/**
 * A snapshot build's progress: the isolated builder's output read into steps
 * (sandbox/builder.ts progressReader, on the real output of a multi-stage
 * build), the words `drydock snapshot build` prints for each activity's
 * heartbeat (cli/build-progress.ts), and the heartbeats' details merged so a
 * phase keeps what an activity recorded for its retry (platform/heartbeat.ts).
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { progressReader, PROGRESS_EVERY_MS, type BuildProgress } from '../../sandbox/builder';
import { buildProgressText } from '../../cli/build-progress';
import { heartbeatProgress, heartbeating, progressReporter } from '../../platform/heartbeat';
import { Redactor } from '../../platform/scrub';

/** What the builder printed for a two-stage Dockerfile (2026-12-07), in the pieces a pipe gives. */
const OUTPUT = [
  "drydock-build: the repo's Dockerfile\n[1/2] STEP 1/2: FROM debian:trixie-slim AS a\n[1/2] STEP 2/2: RUN echo o",
  'ne && sleep 1 && echo two\none\n',
  'two\nGetting image source signatures\nCopying blob sha256:1ce41eff0da2\n',
  '--> 5030c05bed4a\n[2/2] STEP 1/3: FROM 5030c05bed4a\n[2/2] STEP 2/3: COPY a.txt /a\n[2/2] STEP 3/3: RUN npm ci\n',
  'added 1 package\r\n',
];

test('each new step is told at once, a line within a step at most once a second', () => {
  let clock = 0;
  const told: BuildProgress[] = [];
  const read = progressReader(
    (p) => told.push(p),
    () => clock,
  );
  read(OUTPUT[0]); // the latest whole step of the piece; the next one, cut in two, waits for its end
  expect(told).toEqual([{ step: '[1/2] STEP 1/2: FROM debian:trixie-slim AS a' }]);
  clock = 10;
  read(OUTPUT[1]);
  expect(told.at(-1)).toEqual({ step: '[1/2] STEP 2/2: RUN echo one && sleep 1 && echo two', line: 'one' });
  clock = 20;
  read(OUTPUT[2]); // the same step, too soon after
  expect(told).toHaveLength(2);
  clock = 20 + PROGRESS_EVERY_MS;
  read(OUTPUT[3]);
  expect(told.at(-1)).toEqual({ step: '[2/2] STEP 3/3: RUN npm ci' });
  clock += PROGRESS_EVERY_MS;
  read(OUTPUT[4]);
  expect(told.at(-1)).toEqual({ step: '[2/2] STEP 3/3: RUN npm ci', line: 'added 1 package' });
});

test("a line is cut to 200 characters; a step's line without its end is bounded", () => {
  const told: BuildProgress[] = [];
  const read = progressReader(
    (p) => told.push(p),
    () => 0,
  );
  read(`STEP 1/1: RUN ${'x'.repeat(1000)}\n${'y'.repeat(1_000_000)}`);
  expect(told).toEqual([{ step: `STEP 1/1: RUN ${'x'.repeat(186)}` }]);
});

test.each([
  [{ activity: 'startSnapshotBuild', attempt: 1 }, 'starting', undefined],
  [
    { activity: 'startSnapshotBuild', attempt: 1, details: { phase: 'fetching the repo' } },
    'fetching the repo',
    undefined,
  ],
  [
    {
      activity: 'startSnapshotBuild',
      attempt: 1,
      details: {
        phase: "preparing the repo's environment",
        building: { source: '.devcontainer/Dockerfile', step: 'STEP 2/3: RUN apt-get update', line: 'Get:1 http://…' },
      },
    },
    'building .devcontainer/Dockerfile: STEP 2/3: RUN apt-get update',
    'Get:1 http://…',
  ],
  [
    {
      activity: 'runStep',
      attempt: 2,
      lastFailure: 'heartbeat timeout',
      details: { outputTail: 'a\nadded 3 packages\n' },
    },
    'running setup (attempt 2, after: heartbeat timeout)',
    'added 3 packages',
  ],
  [
    { activity: 'finishSnapshotBuild', attempt: 1, details: { phase: 'saving the snapshot image' } },
    'saving the snapshot image',
    undefined,
  ],
  [{ activity: 'destroySandbox', attempt: 1 }, 'removing the build container', undefined],
])('%j reads as %s', (pending, text, line) => {
  expect(buildProgressText(pending)).toEqual({ text, ...(line ? { line } : {}) });
});

test("a phase told in heartbeats keeps the activity's earlier details; outside an activity nothing is told", async () => {
  const env = new MockActivityEnvironment({}, { logger: new DefaultLogger('ERROR') });
  const beats: unknown[] = [];
  env.on('heartbeat', (d: unknown) => beats.push(d));
  const { work } = heartbeating(
    {
      work: async () => {
        heartbeatProgress({ provisioningOn: ['host-a'] });
        progressReporter()({ building: { step: 'STEP 1/2: RUN make', line: 'token=s3cret-value' } });
      },
    },
    new Redactor(['s3cret-value']),
  );
  await env.run(work);
  expect(beats.at(-1)).toEqual({
    provisioningOn: ['host-a'],
    building: { step: 'STEP 1/2: RUN make', line: expect.not.stringContaining('s3cret') },
  });
  expect(() => progressReporter()({ phase: 'x' })).not.toThrow();
});

test("what a RUN step or setup prints reaches the person's terminal without its sequences or controls", () => {
  const told: BuildProgress[] = [];
  progressReader(
    (p) => told.push(p),
    () => 0,
  )('STEP 1/1: RUN \x1b]52;c;cHduZWQ=\x07make\n\x1b[31mred\x1b[0m\tand\x07 bell\n');
  expect(told).toEqual([{ step: 'STEP 1/1: RUN make', line: 'red and bell' }]);
  expect(
    buildProgressText({
      activity: 'runStep',
      attempt: 1,
      details: { outputTail: 'ok\n\x1b[2J\x1b]0;title\x07cleared\x9b6n\n' },
    }),
  ).toEqual({ text: 'running setup', line: 'cleared' });
});
