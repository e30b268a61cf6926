/**
 * The workflows besides agentSession, on the time-skipping test server with
 * stub activities (see harness.ts): refreshSnapshot (a snapshot build),
 * reapSandboxes (a host's reaper run) and pullRequestClosed (the record of a
 * merged or closed pull request). Each branch: which activities run, on which
 * task queue, and how the workflow ends.
 */
import { Context } from '@temporalio/activity';
import { WorkflowFailedError } from '@temporalio/client';
import { ActivityFailure, ApplicationFailure } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker, type WorkflowBundle } from '@temporalio/worker';
import type { Activities } from '../../activities';
import type { PullRequestClosed } from '../../workflows/api';
import type { SnapshotBuildPlan, SnapshotBuildResult } from '../../sandbox/contract';
import { startEnvironment, stopEnvironment, type Stubs } from './harness';

/** The one task queue of this file's worker: a workflow's own queue and, when its input names it, the host's. */
const HERE = `wf-other-${Date.now().toString(36)}`;

/** The activities these workflows call; each test says what they do (stubs). */
const CALLED = [
  'startSnapshotBuild',
  'runStep',
  'finishSnapshotBuild',
  'fillPools',
  'destroySandbox',
  'reapHostSandboxes',
  'reapSnapshotImages',
  'recordPullRequestClosed',
] as const;

let harness: { env: TestWorkflowEnvironment; bundle: WorkflowBundle };
let worker: Worker;
let working: Promise<void>;
/** The test under way: its stubs, and the calls they got. */
let current: { stubs: Stubs; calls: string[]; args: Record<string, unknown[]> };

beforeAll(async () => {
  harness = await startEnvironment();
  const activities = Object.fromEntries(
    CALLED.map((name) => [
      name,
      (arg: unknown) => {
        const queue = Context.current().info.taskQueue;
        current.calls.push(`${name}@${queue === HERE ? 'here' : queue}`);
        (current.args[name] ??= []).push(arg);
        const stub = current.stubs[name] as ((a: unknown) => Promise<unknown>) | undefined;
        if (!stub) throw ApplicationFailure.nonRetryable(`${name}: no stub in this test`);
        return stub(arg);
      },
    ]),
  );
  const { env, bundle } = harness;
  worker = await Worker.create({
    connection: env.nativeConnection,
    taskQueue: HERE,
    workflowBundle: bundle,
    activities,
  });
  working = worker.run();
});
afterAll(async () => {
  worker?.shutdown();
  await working;
  await stopEnvironment(harness?.env);
});

interface Ended<T> {
  result?: T;
  error?: WorkflowFailedError;
  /** Each activity call as `name@queue`, where the worker's own queue is `here`. */
  calls: string[];
  args: Record<string, unknown[]>;
  /**
   * Each activity the workflow scheduled (`name@queue`) with its schedule-to-start
   * timeout in seconds (the server's default when the workflow set none).
   */
  scheduled: { call: string; scheduleToStartS: number }[];
}

let runs = 0;

/** Runs workflow `type` with `input` on this file's worker, whose activities do what `stubs` say, to its end. */
async function runWorkflow<T>(type: string, input: unknown, stubs: Stubs): Promise<Ended<T>> {
  current = { stubs, calls: [], args: {} };
  const { calls, args } = current;
  const handle = await harness.env.client.workflow.start(type, {
    taskQueue: HERE,
    workflowId: `${HERE}-${type}-${++runs}`,
    args: [input],
  });
  const ended = await handle.result().then(
    (result: T) => ({ result }),
    (error: WorkflowFailedError) => ({ error }),
  );
  const scheduled = (await handle.fetchHistory()).events!.flatMap((e) => {
    const a = e.activityTaskScheduledEventAttributes;
    if (!a) return [];
    const queue = a.taskQueue?.name === HERE ? 'here' : a.taskQueue?.name;
    return [{ call: `${a.activityType?.name}@${queue}`, scheduleToStartS: Number(a.scheduleToStartTimeout?.seconds) }];
  });
  return { ...ended, calls, args, scheduled };
}

/** The failure a failed workflow ended with (its cause). */
const failureOf = (ended: Ended<unknown>) => ended.error?.cause;

describe('refreshSnapshot', () => {
  const repo = 'https://github.com/acme/app.git';
  /** The activities of a build that gets to its end, in order. */
  const WHOLE_BUILD = [
    'startSnapshotBuild@here',
    'runStep@here',
    'finishSnapshotBuild@here',
    'fillPools@here',
    'destroySandbox@here',
  ];
  /** A build planned on the worker's own queue (the "host" the build runs on). */
  const planOn =
    (hostQueue: () => string): Activities['startSnapshotBuild'] =>
    async ({ buildId, repo: url }) => ({
      buildId,
      repo: url,
      sandbox: `snapshot-${buildId}`,
      image: 'drydock-base:test',
      host: 'host-a',
      hostQueue: hostQueue(),
      commit: 'b'.repeat(40),
      setup: 'npm ci',
      setupHash: 's'.repeat(64),
      setupTimeoutMs: 60_000,
      egress: [{ host: 'registry.npmjs.org' }],
      keep: 2,
      setupSource: 'the operator (--setup)',
      setupEnv: {},
      services: [],
    });
  const here = () => Context.current().info.taskQueue;
  const built = (plan: SnapshotBuildPlan, status: SnapshotBuildResult['status']): SnapshotBuildResult => ({
    buildId: plan.buildId,
    repo: plan.repo,
    status,
    commit: plan.commit,
    removed: [],
    ...(status === 'ready' ? { image: 'drydock-snapshot:1', sizeBytes: 1024 } : { error: 'setup exited with 1' }),
  });
  const stubs = (more: Stubs = {}): Stubs => ({
    startSnapshotBuild: planOn(here),
    runStep: async ({ key }) => ({ exitCode: 0, timedOut: false, outputTail: `${key} ok` }),
    finishSnapshotBuild: async ({ plan }) => built(plan, 'ready'),
    fillPools: async ({ repo: url } = {}) => [{ repo: url ?? '', added: ['pool-1'], retired: [] }],
    destroySandbox: async () => ({ removed: true }),
    ...more,
  });

  test('builds on the host that planned it: setup as a step with the egress allowlist, the pool refilled, the build container removed', async () => {
    const ended = await runWorkflow<SnapshotBuildResult>('refreshSnapshot', { repo }, stubs());
    expect(ended.calls).toEqual(WHOLE_BUILD);
    const [plan] = ended.args.startSnapshotBuild as { buildId: string }[];
    expect(ended.args.runStep).toEqual([
      {
        sandbox: `snapshot-${plan.buildId}`,
        sessionId: plan.buildId,
        key: 'setup',
        nonce: expect.any(String),
        step: { run: 'npm ci', timeout: 60_000 },
        timeoutMs: 60_000,
        egress: [{ host: 'registry.npmjs.org' }],
        recordsSetup: true, // what setup wrote is kept out of the agent's change
      },
    ]);
    expect(ended.args.fillPools).toEqual([{ repo }]);
    // Any host may plan it, whenever one is free.
    expect(ended.scheduled[0].scheduleToStartS).toBeGreaterThan(600);
    expect(ended.args.destroySandbox).toEqual([{ sessionId: plan.buildId }]);
    expect(ended.result).toMatchObject({ status: 'ready', image: 'drydock-snapshot:1', repo });
  });

  test('a failed setup fails the build, names why, and still removes the build container; the pool is left alone', async () => {
    const ended = await runWorkflow(
      'refreshSnapshot',
      { repo },
      stubs({ finishSnapshotBuild: async ({ plan }) => built(plan, 'failed') }),
    );
    expect(ended.calls).toEqual([
      'startSnapshotBuild@here',
      'runStep@here',
      'finishSnapshotBuild@here',
      'destroySandbox@here',
    ]);
    const failure = failureOf(ended) as ApplicationFailure;
    expect(failure).toBeInstanceOf(ApplicationFailure);
    expect(failure).toMatchObject({
      type: 'SnapshotSetupFailed',
      nonRetryable: true,
      message: `snapshot of ${repo} failed: setup exited with 1`,
    });
    expect(failure.details).toEqual([expect.objectContaining({ status: 'failed', error: 'setup exited with 1' })]);
  });

  test('a step that fails as an activity fails the build; the build container is removed all the same', async () => {
    const ended = await runWorkflow(
      'refreshSnapshot',
      { repo },
      stubs({
        runStep: async () => {
          throw ApplicationFailure.nonRetryable('no such container', 'SandboxNotFound');
        },
      }),
    );
    expect(ended.calls).toEqual(['startSnapshotBuild@here', 'runStep@here', 'destroySandbox@here']);
    expect(failureOf(ended)).toBeInstanceOf(ActivityFailure);
    expect((failureOf(ended) as ActivityFailure).cause).toMatchObject({ type: 'SandboxNotFound' });
  });

  test("a pool that cannot be refilled does not fail the build (the reaper's run refills it)", async () => {
    const ended = await runWorkflow<SnapshotBuildResult>(
      'refreshSnapshot',
      { repo },
      stubs({
        fillPools: async () => {
          throw ApplicationFailure.nonRetryable('pool registry unavailable');
        },
      }),
    );
    expect(ended.calls).toEqual(WHOLE_BUILD);
    expect(ended.result).toMatchObject({ status: 'ready' });
  });

  test("a host's own schedule builds there, and gives up on a host that does not pick it up within 10 minutes", async () => {
    const ended = await runWorkflow<SnapshotBuildResult>('refreshSnapshot', { repo, hostQueue: HERE }, stubs());
    expect(ended.calls).toEqual(WHOLE_BUILD);
    // The test server skips no time while an activity waits for a worker: the timeout is read from the history.
    expect(ended.scheduled[0]).toEqual({ call: 'startSnapshotBuild@here', scheduleToStartS: 600 });
    expect(ended.result).toMatchObject({ status: 'ready' });
  });

  test('a build that cannot start (the repo is not registered) fails, and its container is removed by name on any host', async () => {
    const ended = await runWorkflow(
      'refreshSnapshot',
      { repo },
      stubs({
        startSnapshotBuild: async () => {
          throw ApplicationFailure.nonRetryable(`${repo} is not registered`, 'RepoNotRegistered');
        },
      }),
    );
    expect(ended.calls).toEqual(['startSnapshotBuild@here', 'destroySandbox@here']);
    expect(ended.args.destroySandbox).toEqual([{ sessionId: expect.stringMatching(/-refreshSnapshot-\d+$/) }]);
    expect((failureOf(ended) as ActivityFailure).cause).toMatchObject({ type: 'RepoNotRegistered' });
  });

  test.each([
    [{}, 'repo: required (the registered URL)'],
    [{ repo: '' }, 'repo: required (the registered URL)'],
    [{ repo, hostQueue: '' }, 'hostQueue: a host task queue, or absent'],
    [{ repo, hostQueue: 7 }, 'hostQueue: a host task queue, or absent'],
  ])('an invalid input %j fails at once, naming the field, before any activity', async (input, message) => {
    const ended = await runWorkflow('refreshSnapshot', input, stubs());
    expect(ended.calls).toEqual([]);
    expect(failureOf(ended)).toMatchObject({ type: 'InvalidSessionInput', nonRetryable: true, message });
  });
});

describe('reapSandboxes', () => {
  const reaped = [{ sandbox: 'drydock-old', sessionId: 'old', reason: 'session closed' }];
  const stubs = (more: Stubs = {}): Stubs => ({
    reapHostSandboxes: async () => reaped,
    reapSnapshotImages: async () => ['drydock-snapshot:0'],
    fillPools: async () => [],
    ...more,
  });

  test("on the host's queue: its sandboxes, then its snapshot images, then its warm pools; returns the sandboxes removed", async () => {
    const ended = await runWorkflow<typeof reaped>('reapSandboxes', { hostQueue: HERE }, stubs());
    expect(ended.calls).toEqual(['reapHostSandboxes@here', 'reapSnapshotImages@here', 'fillPools@here']);
    // A host that does not pick its reaper run up within 5 minutes fails it; the next scheduled run tries again.
    expect(ended.scheduled.map((a) => a.scheduleToStartS)).toEqual([300, 300, 300]);
    expect(ended.args.fillPools).toEqual([{}]);
    expect(ended.result).toEqual(reaped);
  });

  test('a reap that keeps failing fails the run after 3 attempts; images and pools wait for the next run', async () => {
    const ended = await runWorkflow(
      'reapSandboxes',
      { hostQueue: HERE },
      stubs({
        reapHostSandboxes: async () => {
          throw new Error('Docker is not answering');
        },
      }),
    );
    expect(ended.calls).toEqual(Array(3).fill('reapHostSandboxes@here'));
    expect((failureOf(ended) as ActivityFailure).cause?.message).toBe('Docker is not answering');
  });
});

describe('pullRequestClosed', () => {
  const record: PullRequestClosed = {
    sessionId: 'session-1',
    repo: 'acme/app',
    number: 7,
    url: 'https://github.com/acme/app/pull/7',
    merged: true,
    by: 'bob',
  };

  test('records the event and returns the record', async () => {
    const ended = await runWorkflow<PullRequestClosed>('pullRequestClosed', record, {
      recordPullRequestClosed: async () => {},
    });
    expect(ended.calls).toEqual(['recordPullRequestClosed@here']);
    expect(ended.args.recordPullRequestClosed).toEqual([record]);
    expect(ended.result).toEqual(record);
  });

  test('waits while Postgres is away: the record is retried until it is written', async () => {
    let attempts = 0;
    const ended = await runWorkflow<PullRequestClosed>('pullRequestClosed', record, {
      recordPullRequestClosed: async () => {
        if (++attempts < 4) throw new Error('connect ECONNREFUSED 127.0.0.1:5432');
      },
    });
    expect(ended.calls).toEqual(Array(4).fill('recordPullRequestClosed@here'));
    expect(ended.result).toEqual(record);
  });

  test('gives up after 10 attempts: the workflow fails with the last error', async () => {
    const ended = await runWorkflow('pullRequestClosed', record, {
      recordPullRequestClosed: async () => {
        throw new Error('connect ECONNREFUSED 127.0.0.1:5432');
      },
    });
    expect(ended.calls).toHaveLength(10);
    expect((failureOf(ended) as ActivityFailure).cause?.message).toBe('connect ECONNREFUSED 127.0.0.1:5432');
  });
});
