/**
 * The pilot workflow on the time-skipping test server with stub activities:
 * sessions at bounded concurrency (a session at its gate frees its slot),
 * stopped half-way and started again without starting a session twice,
 * faults on purpose at their moment (a sandbox killed while the agent works,
 * credentials rotated while a session waits for review, a stale snapshot),
 * and one that never came (the session ended while the pilot was stopped).
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { WorkflowBundle } from '@temporalio/worker';
import { sessionState } from '../../platform/sessions';
import {
  decide,
  PILOT_WORKFLOW_TYPE,
  pilotStatus,
  status,
  stopPilot,
  type PilotStatus,
  type SessionStatus,
  WORKFLOW_TYPE,
} from '../../workflows/api';
import type { PilotInputDraft } from '../../workflows/pilot/input';
import { watched } from '../support/waits';
import { modelAnswer, startEnvironment, stopEnvironment, withStubWorker, type Stubs } from './harness';
import { serverTime } from './server';

let harness: { env: TestWorkflowEnvironment; bundle: WorkflowBundle };
beforeAll(async () => {
  harness = await startEnvironment();
});
afterAll(async () => {
  await stopEnvironment(harness?.env);
});

/** Polls (in real time: no time is skipped meanwhile) until `ready` holds. */
async function until<T>(read: () => Promise<T>, ready: (t: T) => boolean, what: string): Promise<T> {
  for (let i = 0; i < 1000; i++) {
    const now = await read().catch(() => undefined);
    if (now !== undefined && ready(now)) return now;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`never: ${what}`);
}

/** Heartbeats until `free()` (an activity the test holds). */
async function held(free: () => boolean): Promise<void> {
  while (!free()) {
    Context.current().heartbeat();
    await Context.current().sleep(50);
  }
}

const pilotOf = (name: string): PilotInputDraft => ({
  name,
  repo: { url: 'https://github.com/acme/app.git' },
  configurations: [
    { name: 'scripted', agent: { kind: 'script' } },
    { name: 'loop', agent: { kind: 'openai', model: 'gpt-test' } },
  ],
  concurrency: 2,
  session: { verify: { test: 'npm test' } },
  faults: [
    { kind: 'sandbox_killed', task: 't1', configuration: 'scripted' },
    { kind: 'credentials_rotated', task: 't3', configuration: 'scripted' },
    { kind: 'stale_snapshot', task: 't3', configuration: 'loop' },
  ],
  tasks: ['t1', 't2', 't3'].map((id) => ({
    id,
    task: `task ${id}`,
    acceptance: `sh acceptance/${id}.sh`,
    tags: ['backend'],
    steps: [{ run: `echo ${id} > ${id}.txt` }],
  })),
});

test('stopped half-way and started again: finished sessions are not run again; faults at their moment', async () => {
  const killed = new Set<string>();
  let t2free = false;
  const stubs: Stubs = {
    killSessionSandbox: async ({ sessionId }) => {
      killed.add(sessionId);
      return { killed: ['sandbox-0'] };
    },
    runStep: async ({ key, sessionId }) => {
      // t1's scripted session works until its sandbox is killed, then finds it gone; t2's until the test frees it.
      if (sessionId.endsWith('.t1.scripted.1') && key === 'step-1' && !killed.has(`${sessionId}/seen`)) {
        await held(() => killed.has(sessionId));
        killed.add(`${sessionId}/seen`);
        throw ApplicationFailure.nonRetryable('no such container', 'SandboxNotFound');
      }
      if (sessionId.includes('.t2.') && key === 'step-1') await held(() => t2free);
      return {
        exitCode: key === 'acceptance' && sessionId.includes('.loop.') ? 1 : 0,
        timedOut: false,
        outputTail: `${key} ok`,
        artifact: `steps/${key}.log`,
      };
    },
    modelCall: async ({ turn, sessionId }) => {
      if (sessionId.includes('.t2.')) await held(() => t2free);
      return modelAnswer(turn, []);
    },
    knownSessions: async ({ sessionIds }) =>
      Promise.all(
        sessionIds.map(async (sessionId) => ({ sessionId, ...(await sessionState(harness.env.client, sessionId)) })),
      ),
  };
  await withStubWorker(harness, 'pilot', stubs, async ({ taskQueue, args }) => {
    const name = taskQueue.toLowerCase();
    const input = pilotOf(name);
    const id = (task: string, config: string) => `${name}.${task}.${config}.1`;
    const child = (task: string, config: string) => harness.env.client.workflow.getHandle(id(task, config));
    const decideOn = (task: string, config: string, decision: 'approve' | 'reject') =>
      until(
        () => child(task, config).query(status),
        (s) => s.phase === 'awaiting_approval',
        `${task} ${config} at its gate`,
      ).then(() => child(task, config).executeUpdate(decide, { args: [{ decision, action: 'push', by: 'alice' }] }));
    // The pilot's result and queries fail with an explanation if they get no answer (see test/support/waits.ts).
    const start = async () =>
      watched(
        await harness.env.client.workflow.start(PILOT_WORKFLOW_TYPE, {
          taskQueue,
          workflowId: `pilot-${name}`,
          args: [input],
        }),
        serverTime,
      );
    const closed = async (handle: WorkflowHandle) => {
      await until(
        () => handle.describe(),
        (d) => d.status.name !== 'RUNNING',
        'the pilot closed',
      );
      return (await handle.result()) as PilotStatus;
    };

    // First run: t1's two sessions reach their gates, t2's two start and work (held); t3 waits for a slot.
    const first = await start();
    await until(
      () => first.query(pilotStatus),
      (s) => s.counts.working === 2 && s.counts.at_gate === 2,
      't2 working',
    );
    const midway = await first.query(pilotStatus);
    expect(midway.sessions.filter((s) => s.state === 'planned').map((s) => s.sessionId)).toEqual([
      id('t3', 'scripted'),
      id('t3', 'loop'),
    ]);
    await decideOn('t1', 'scripted', 'approve');
    await decideOn('t1', 'loop', 'reject');
    await until(
      () => first.query(pilotStatus),
      (s) => s.counts.ended === 2,
      't1 decided',
    );
    await first.executeUpdate(stopPilot, { args: [{ by: 'ops' }] });
    const stopped = await closed(first);
    expect([stopped.phase, stopped.stoppedBy, stopped.counts]).toEqual([
      'stopped',
      'ops',
      { planned: 2, working: 2, at_gate: 0, ended: 2 },
    ]);
    expect(stopped.sessions.find((s) => s.sessionId === id('t1', 'scripted'))?.applied).toEqual([
      expect.stringMatching(/^sandbox_killed: killed sandbox-0 during (agent|verifying)$/),
    ]);

    // The sessions under way go on without the pilot; they are decided meanwhile.
    t2free = true;
    await decideOn('t2', 'scripted', 'approve');
    await decideOn('t2', 'loop', 'approve');
    // Both end before the pilot starts again: one still publishing would be found under way.
    await Promise.all(['scripted', 'loop'].map((config) => watched(child('t2', config), serverTime).result()));

    // Started again: what exists is found, only t3's sessions start; its faults come at their moment.
    const second = await start();
    await decideOn('t3', 'scripted', 'approve');
    await decideOn('t3', 'loop', 'approve');
    const done = await closed(second);
    expect([done.phase, done.resumed, done.counts]).toEqual([
      'completed',
      { ended: 4, underWay: 0 },
      { planned: 0, working: 0, at_gate: 0, ended: 6 },
    ]);
    const applied = Object.fromEntries(done.sessions.map((s) => [s.sessionId.slice(name.length + 1), s.applied]));
    expect(applied['t3.scripted.1']).toEqual(['credentials_rotated: while it waited for review: exit 0: rotated']);
    expect(applied['t3.loop.1']).toEqual(['stale_snapshot: started from the oldest snapshot of its repo on the host']);

    // Each session was recorded and started once; t1's scripted one was provisioned again after the kill.
    const recorded = (args.recordPilotSession as { sessionId: string }[]).map((r) => r.sessionId);
    expect(recorded.sort()).toEqual(done.sessions.map((s) => s.sessionId).sort());
    const provisions = (args.provisionSandbox as { sessionId: string; generation?: number; snapshot?: string }[]).map(
      (p) => `${p.sessionId.slice(name.length + 1)}/${p.generation ?? 0}${p.snapshot ? `/${p.snapshot}` : ''}`,
    );
    expect(provisions.sort()).toEqual([
      't1.loop.1/0',
      't1.scripted.1/0',
      't1.scripted.1/1',
      't2.loop.1/0',
      't2.scripted.1/0',
      't3.loop.1/0/oldest',
      't3.scripted.1/0',
    ]);
    const finals: SessionStatus[] = await Promise.all(
      done.sessions.map((s) => harness.env.client.workflow.getHandle(s.sessionId).query(status)),
    );
    expect(
      finals.map((s) => [s.sessionId.slice(name.length + 1), s.phase, s.acceptance?.passed, s.restarts ?? 0]),
    ).toEqual([
      ['t1.scripted.1', 'completed', true, 1],
      ['t1.loop.1', 'rejected', false, 0],
      ['t2.scripted.1', 'completed', true, 0],
      ['t2.loop.1', 'completed', false, 0],
      ['t3.scripted.1', 'completed', true, 0],
      ['t3.loop.1', 'completed', false, 0],
    ]);
    // Nothing was published: each session ended at its gate with the decision.
    expect(args.pushBranch).toBeUndefined();
  });
});

test('a stop while the pilot records its next session: that session is not started, and the stop answers with every session started', async () => {
  let recording = false;
  let free = false;
  const stubs: Stubs = {
    recordPilotSession: async ({ sessionId }) => {
      if (!sessionId.endsWith('.t1.loop.1')) return;
      recording = true;
      await held(() => free);
    },
  };
  await withStubWorker(harness, 'pilot-stop', stubs, async ({ taskQueue }) => {
    const name = taskQueue.toLowerCase();
    const handle = watched(
      await harness.env.client.workflow.start(PILOT_WORKFLOW_TYPE, {
        taskQueue,
        workflowId: `pilot-${name}`,
        args: [pilotOf(name)],
      }),
      serverTime,
    );
    await until(async () => recording, Boolean, 'the second session being recorded');
    const answer = await handle.executeUpdate(stopPilot, { args: [{ by: 'ops' }] });
    free = true;
    const final = (await handle.result()) as PilotStatus;
    const started = (s: PilotStatus) => s.sessions.filter((v) => v.state !== 'planned').map((v) => v.sessionId);
    expect(started(answer)).toEqual([`${name}.t1.scripted.1`]);
    expect(started(final)).toEqual(started(answer));
    expect(await sessionState(harness.env.client, `${name}.t1.loop.1`)).toEqual({ state: 'missing' });
  });
});

test('a workflow someone else started at a session’s id is not adopted: that session fails, saying why (T4-L6)', async () => {
  const stubs: Stubs = {
    knownSessions: async ({ sessionIds }) =>
      Promise.all(
        sessionIds.map(async (sessionId) => ({ sessionId, ...(await sessionState(harness.env.client, sessionId)) })),
      ),
  };
  await withStubWorker(harness, 'pilot-foreign', stubs, async ({ taskQueue, args }) => {
    const name = taskQueue.toLowerCase();
    const input = { ...pilotOf(name), configurations: [pilotOf(name).configurations[0]], faults: [] };
    input.tasks = input.tasks.slice(0, 1);
    // Made first at the pilot's id, as an API caller could (before "." was refused there).
    const foreign = await harness.env.client.workflow.start(WORKFLOW_TYPE, {
      taskQueue,
      workflowId: `${name}.t1.scripted.1`,
      args: [{ repo: { url: 'https://github.com/acme/app.git' }, task: 'not the pilot’s' }],
    });
    try {
      const pilot = watched(
        await harness.env.client.workflow.start(PILOT_WORKFLOW_TYPE, {
          taskQueue,
          workflowId: `pilot-${name}`,
          args: [input],
        }),
        serverTime,
      );
      const final = (await pilot.result()) as PilotStatus;
      expect([final.phase, final.counts.ended]).toEqual(['completed', 1]);
      expect(final.sessions[0]).toMatchObject({
        state: 'ended',
        phase: 'failed',
        disowned: `${name}.t1.scripted.1 was started by a client, not by this pilot: not adopted`,
      });
      expect(args.recordPilotSession).toBeUndefined();
      expect(args.killSessionSandbox).toBeUndefined();
    } finally {
      await foreign.terminate('test over').catch(() => undefined); // ended already, if time skipped past its timeout
    }
  });
});
