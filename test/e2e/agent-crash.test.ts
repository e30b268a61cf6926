/**
 * kill -9 of the worker in the middle of the agent loop: a new worker resumes
 * at the last completed call; no model call is paid for twice and the tool
 * call that was running ran once. And a provider that rate-limits for longer
 * than Temporal's usual retries last is waited out, as its Retry-After says.
 */
import { toolResults } from '../support/fake-providers';
import {
  approvePush,
  containersOf,
  git,
  makeFixtureRepo,
  newSessionId,
  startSession,
  waitForStatus,
} from '../support/helpers';
import { modelDrill, startWorkerProcess } from '../support/workers';
import { gate, heldCommand, stopGates } from '../support/drills';
import { testTimeLeft, within } from '../support/waits';

afterEach(stopGates);

test('kill -9 the worker during a tool call of the loop → resumed without re-paying completed model calls', async () => {
  const { model, env, client, close } = await modelDrill('agentcrash', 'anthropic');
  model.script((req) => {
    const done = toolResults(req).length;
    if (done === 0) return { toolCalls: [{ name: 'read_file', arguments: { path: 'README.md' } }] };
    if (done === 1) {
      return {
        toolCalls: [
          {
            name: 'run',
            // EXECUTOR.txt: whether the persistent executor (drydock-exec) is what runs the call.
            arguments: {
              command:
                'echo ran >> RUNS.txt; ps -eo args | grep -c "^/opt/drydock/lib/node /opt/drydock/lib/drydock-exec.js" > EXECUTOR.txt; ' +
                heldCommand('tool', 'echo hello >> README.md'),
            },
          },
        ],
      };
    }
    return { text: 'greeted' };
  });
  const repo = await makeFixtureRepo();
  const id = newSessionId('agentcrash');
  let worker = startWorkerProcess(env, { cli: true });
  try {
    const handle = await startSession({ client, config: env }, id, {
      repo: { url: repo.url },
      task: 'greet in the README',
      agent: { kind: 'openai', model: 'fake-1' },
      verify: { test: 'sh check.sh' },
    });
    // The second model call asked for the long command, which now waits in the sandbox until the kill.
    const tool = gate(id, 'tool');
    await tool.reached;
    expect(model.requests).toHaveLength(2);
    await worker.kill();
    tool.open();

    worker = startWorkerProcess(env, { cli: true });
    const final = await approvePush(handle, 'ops');

    expect(final.phase).toBe('completed');
    // Three model calls in all: the two before the crash were not made again.
    expect(model.requests).toHaveLength(3);
    expect(final.agent).toMatchObject({ turn: 3, stopReason: 'done' });
    expect(git(['show', `drydock/${id}:RUNS.txt`], repo.bare)).toBe('ran\n');
    expect(git(['show', `drydock/${id}:EXECUTOR.txt`], repo.bare)).toBe('1\n');
    expect(git(['show', `drydock/${id}:README.md`], repo.bare)).toBe('# fixture\nhello\n');
    expect(await containersOf(id)).toHaveLength(0);

    // The tool call's activity really was cut off and retried on the new worker.
    const events = (await handle.fetchHistory()).events!;
    const scheduled = events.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'runTool');
    const retried = events.filter(
      (e) =>
        e.activityTaskStartedEventAttributes &&
        scheduled.some((s) => String(s.eventId) === String(e.activityTaskStartedEventAttributes!.scheduledEventId)) &&
        (e.activityTaskStartedEventAttributes.attempt ?? 1) >= 2,
    );
    expect(retried).toHaveLength(1);
  } finally {
    await worker.kill();
    await close();
  }
});

test('kill -9 the worker right after a model call was paid, before Temporal heard of it → the answer is reused, not bought again', async () => {
  const { model, env, client, close } = await modelDrill('modelcrash', 'openai');
  model.script((req) =>
    toolResults(req).length === 0
      ? { toolCalls: [{ name: 'run', arguments: { command: 'echo hello >> README.md' } }] }
      : { text: 'greeted' },
  );
  const repo = await makeFixtureRepo();
  const id = newSessionId('modelcrash');
  let worker = startWorkerProcess(env, { holdAfter: 'modelCall' });
  try {
    const handle = await startSession({ client, config: env }, id, {
      repo: { url: repo.url },
      task: 'greet in the README',
      agent: { kind: 'openai', model: 'fake-1' },
      verify: { test: 'sh check.sh' },
    });
    await worker.held; // the first model call is answered and stored; the activity has not reported
    expect(model.requests).toHaveLength(1);
    await worker.kill();

    worker = startWorkerProcess(env, { cli: true });
    const final = await approvePush(handle, 'ops');
    expect(final.phase).toBe('completed');
    // Two model calls paid in all: the retried first call reused the stored answer.
    expect(model.requests).toHaveLength(2);
    expect(final.agent!.calls!.filter((c) => c.type === 'model').map((c) => (c as { reused: boolean }).reused)).toEqual(
      [true, false],
    );
    expect(git(['show', `drydock/${id}:README.md`], repo.bare)).toBe('# fixture\nhello\n');
  } finally {
    await worker.kill();
    await close();
  }
});

test('kill -9 the worker right after a compacting model call → the compaction and the answer are reused, counted once', async () => {
  const left = testTimeLeft();
  const { model, env, client, close } = await modelDrill('compactcrash', 'openai', { contextWindow: 4000 });
  // Long outputs until the window forces a compaction, then done.
  model.script((req) =>
    toolResults(req).length < 8
      ? { toolCalls: [{ name: 'run', arguments: { command: `seq 1 600 # ${toolResults(req).length}` } }] }
      : { text: 'counted' },
  );
  const repo = await makeFixtureRepo();
  const id = newSessionId('compactcrash');
  let worker = startWorkerProcess(env, { holdAfter: 'modelCall:compacted' });
  try {
    const handle = await startSession({ client, config: env }, id, {
      repo: { url: repo.url },
      task: 'count to 600 eight times',
      agent: { kind: 'openai', model: 'fake-1', contextWindow: 4000, toolOutputLimit: 2000 },
    });
    // The compacting call is answered and stored; the activity has not reported.
    await within(handle, 'the worker to hold after a compacting model call', worker.held, { ms: left() });
    const paid = model.requests.length;
    await worker.kill();

    // The same worker with the run's workflow bundle: bin/drydock would bundle it again first
    // (a minute and more of a busy machine's CPU), and test 1 restarts that one already.
    worker = startWorkerProcess(env);
    const settled = await waitForStatus(handle, (s) => s.agent?.stopReason === 'done', left());
    expect(settled.error).toBeUndefined();
    // Each compaction counted once (the reused one not again): as many as the timeline shows, each further on.
    const steps = settled.timeline.flatMap((t) => /compacted before message (\d+)/.exec(t.detail ?? '')?.[1] ?? []);
    expect(steps.length).toBeGreaterThanOrEqual(1);
    expect(settled.agent!.compactions).toBe(steps.length);
    expect(new Set(steps).size).toBe(steps.length);
    expect(model.requests.every((r) => r.status === 200)).toBe(true);
    // Nothing bought twice: one request per turn, the held one reused.
    expect(model.requests).toHaveLength(settled.agent!.turn!);
    expect(model.requests.length).toBeGreaterThan(paid);
    const reused = settled.agent!.calls!.filter((c) => c.type === 'model' && c.reused);
    expect(reused).toHaveLength(1);
    await handle.cancel();
    await handle.result().catch(() => undefined); // teardown runs before the cancelled session ends
    expect(await containersOf(id)).toHaveLength(0);
  } finally {
    await worker.kill();
    await close();
  }
});

test('a provider rate-limiting 8 times in a row (Retry-After: 3) is waited out, within the wall-time budget', async () => {
  const { model, env, client, close } = await modelDrill('ratelimit', 'compatible');
  const limited = Array.from({ length: 8 }, () => ({
    error: { status: 429, message: 'Rate limit reached', headers: { 'retry-after': '3' } },
  }));
  model.script([
    ...limited,
    { toolCalls: [{ name: 'run', arguments: { command: 'echo hello >> README.md' } }] },
    { text: 'greeted' },
  ]);
  const repo = await makeFixtureRepo();
  const worker = startWorkerProcess(env, { cli: true });
  try {
    const handle = await startSession({ client, config: env }, newSessionId('ratelimit'), {
      repo: { url: repo.url },
      task: 'greet in the README',
      agent: { kind: 'openai', model: 'fake-1', budget: { maxWallTime: '10m' } },
      verify: { test: 'sh check.sh' },
    });
    const final = await approvePush(handle, 'ops');
    expect(final.phase).toBe('completed');
    expect(model.requests.map((r) => r.status)).toEqual([...limited.map(() => 429), 200, 200]);
    // One activity, retried past the five attempts other failures get.
    const events = (await handle.fetchHistory()).events!;
    const attempts = events
      .filter((e) => e.activityTaskStartedEventAttributes)
      .map((e) => e.activityTaskStartedEventAttributes!.attempt ?? 1);
    expect(Math.max(...attempts)).toBe(9);
  } finally {
    await worker.kill();
    await close();
  }
});
