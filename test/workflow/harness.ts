/**
 * Runs agentSession against Temporal's time-skipping test server with stub
 * activities: every branch of the workflow in seconds, without Docker. The
 * stubs return what the real activities return (same names, same shapes) and
 * log each call, so a test asserts the sequence of side effects as well as
 * the final status.
 */
import { readFile } from 'node:fs/promises';
import { WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import { Context } from '@temporalio/activity';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, makeTelemetryFilterString, Runtime, Worker, type WorkflowBundle } from '@temporalio/worker';
import type { Activities } from '../../activities';
import { HEARTBEAT_INTERVAL_MS } from '../../platform/heartbeat';
import { status, type ApprovalPolicy, type SessionStatus } from '../../workflows/api';
import { parseSessionInput, type SessionInputDraft } from '../../workflows/input';
import { recordHistory } from '../support/histories';
import { eventLabel, watched, within } from '../support/waits';
import { workflowBundle } from '../../workers/workflow-bundle';
import { serverTime, startTestServer } from './server';

export { startTestServer, stopEnvironment } from './server';

export type Stubs = Partial<Activities>;
export type ModelAnswer = Awaited<ReturnType<Activities['modelCall']>>;

export const BASE_COMMIT = 'b'.repeat(40);
export const COMMIT = 'c'.repeat(40);
export const CHANGE = 'd'.repeat(64);
/** The audit chain's end that recordSessionMetrics reports; the final status keeps it. */
export const AUDIT_SEAL = { events: 9, head: 'e'.repeat(64) };

/** The JUnit report of the default test step. */
export const PASSING_REPORT = { files: ['junit.xml'], total: 3, passed: 3, failed: 0, skipped: 0, failures: [] };

/** The server's approval policy the default repoPolicy returns: nothing needs approval. */
export const OPEN_POLICY: ApprovalPolicy = {
  required: [],
  approvers: [],
  forbidSelfApproval: false,
  separateGates: false,
};

/** A repoPolicy that accepts the input as given, within limits that allow it (the rules are in test/unit/repo-rules.test.ts). */
export function acceptAsGiven(serverPolicy: ApprovalPolicy = OPEN_POLICY): Activities['repoPolicy'] {
  return async (raw) => {
    const parsed = parseSessionInput(raw);
    return parsed.ok ? { ok: true, input: parsed.input, repo: 'acme/app', approvers: [], serverPolicy } : parsed;
  };
}

export async function startEnvironment(): Promise<{ env: TestWorkflowEnvironment; bundle: WorkflowBundle }> {
  // The sessions' own warnings (a rejected session "ending early") are expected here.
  Runtime.install({
    logger: new DefaultLogger('ERROR'),
    telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: 'ERROR' }) } },
  });
  const [env, code] = await Promise.all([
    startTestServer(),
    workflowBundle().then(({ codePath }) => readFile(codePath, 'utf8')),
  ]);
  return { env, bundle: { code } };
}

/** What each activity returns when a test does not say otherwise: a session that goes well. */
function defaultStubs(hostQueue: string): Activities {
  const stubs: Stubs = {
    repoPolicy: acceptAsGiven(),
    provisionSandbox: async ({ generation }) => ({
      name: `sandbox-${generation ?? 0}`,
      host: 'host-a',
      hostQueue,
      image: 'drydock-base:test',
      baseCommit: BASE_COMMIT,
      hostTimeoutMs: 120_000,
      ...(generation ? { generation, restored: { step: 'step-1', bytes: 10 } } : {}),
    }),
    runStep: async ({ key, testReport }) => ({
      exitCode: 0,
      timedOut: false,
      outputTail: `${key} ok`,
      artifact: `steps/${key}.log`,
      ...(testReport ? { report: PASSING_REPORT } : {}),
    }),
    commitChanges: async () => ({
      commit: COMMIT,
      changed: true,
      diffstat: ' hello.txt | 1 +',
      changeHash: CHANGE,
      author: { name: 'drydock', email: 'drydock@localhost' },
    }),
    pushBranch: async ({ commit }) => ({ commit, alreadyPushed: false }),
    openPullRequest: async ({ repo }) => ({ number: 7, url: `https://github.com/${repo}/pull/7`, created: true }),
    deploy: async () => ({ exitCode: 0, outputTail: 'deployed' }),
    destroySandbox: async () => ({ removed: true }),
    recordAudit: async () => {},
    recordSessionMetrics: async () => AUDIT_SEAL,
    operatorLimits: async () => ({ maxAttempts: 4, pilotConcurrency: 8 }),
    recordPilotSession: async () => {},
    knownSessions: async ({ sessionIds }) => sessionIds.map((sessionId) => ({ sessionId, state: 'missing' as const })),
    recordFault: async () => {},
    rotateCredentials: async () => ({ rotated: true, detail: 'exit 0: rotated' }),
    killSessionSandbox: async () => ({ killed: ['sandbox-0'] }),
    startModelAgent: async () => ({ messageCount: 2, instructions: false }),
    keepNotes: async () => ({ proposed: [] }),
    modelCall: async ({ turn }) => modelAnswer(turn, []),
    runTool: async ({ turn }) => ({
      type: 'tool',
      turn,
      tool: 'run',
      summary: 'run: npm test',
      ok: true,
      exitCode: 0,
      durationMs: 5,
      outputBytes: 10,
      truncated: false,
    }),
    addAgentMessage: async () => {},
  };
  return stubs as Activities;
}

/** A model's answer at `turn`: the tool calls it asks for (by summary), or none: it is done. */
export function modelAnswer(turn: number, tools: string[]): ModelAnswer {
  return {
    call: {
      type: 'model',
      turn,
      model: 'gpt-test',
      finishReason: tools.length ? 'tool_calls' : 'stop',
      durationMs: 5,
      reused: false,
      promptTokens: 100,
      completionTokens: 20,
      totalTokens: 120,
    },
    toolCalls: tools.map((summary, i) => ({ id: `call-${turn}-${i}`, name: 'run', summary })),
    content: tools.length ? '' : 'done',
    transcript: 'agent/transcript.jsonl',
    compactedBefore: 2,
    compacted: false,
  };
}

/** One line per activity call (retries included): its name and what tells the calls apart. */
function callLabel(name: string, arg: Record<string, unknown> | undefined): string {
  const detail = arg?.key ?? arg?.stepKey ?? arg?.turn ?? arg?.generation;
  return detail === undefined ? name : `${name} ${String(detail)}`;
}

export interface SessionRun {
  /** The workflow id, which is the session id. */
  id: string;
  /** The session's final status: the workflow's result, or the status a failed session carries. */
  status: SessionStatus;
  /** How the workflow ended when it did not return. */
  error?: Error;
  calls: string[];
  /** Activities scheduled on another task queue than the worker's (a host's that no worker polls), as `type@queue`. */
  elsewhere: string[];
  /** The arguments of each call, by activity name. */
  args: Record<string, unknown[]>;
}

/**
 * Starts a session on a fresh task queue with the default stubs overridden
 * by `stubs`, lets `drive` talk to it (approvals, cancellation), and waits
 * for its end (skipping time while it waits).
 */
export async function runSession(
  { env, bundle }: { env: TestWorkflowEnvironment; bundle: WorkflowBundle },
  name: string,
  input: SessionInputDraft,
  stubs: Stubs = {},
  drive: (handle: WorkflowHandle) => Promise<void> = async () => {},
): Promise<SessionRun> {
  return withStubWorker({ env, bundle }, name, stubs, async ({ taskQueue, calls, args }) => {
    const started = await env.client.workflow.start('agentSession', {
      taskQueue,
      workflowId: taskQueue,
      args: [input],
    });
    // Every call on the server fails with an explanation if it gets no answer (see test/support/waits.ts).
    const handle = watched(started, serverTime);
    await drive(handle);
    const ended = await handle.result().then(
      (final: SessionStatus) => ({ status: final }),
      async (error: Error) => {
        if (!(error instanceof WorkflowFailedError)) throw error; // a wait that got no answer, say
        // Answered by replaying the whole history: a replay that fails shows the history it read.
        const final = await handle.query(status).catch(async (err: Error) => {
          throw new Error(
            `${err.message}\nthe history replayed:\n${((await handle.fetchHistory()).events ?? []).map(eventLabel).join('\n')}`,
          );
        });
        return { error, status: final };
      },
    );
    const history = await handle.fetchHistory();
    await recordHistory(history, `wf-${name}`);
    const elsewhere = history
      .events!.map((e) => e.activityTaskScheduledEventAttributes)
      .filter((a) => a && a.taskQueue?.name !== taskQueue)
      .map((a) => `${a!.activityType?.name}@${a!.taskQueue?.name}`);
    return { ...ended, id: taskQueue, calls, elsewhere, args };
  });
}

/** What a stub worker saw: its task queue, every activity call (labelled) and their arguments. */
export interface StubWorker {
  taskQueue: string;
  calls: string[];
  args: Record<string, unknown[]>;
}

/**
 * Runs `fn` while a worker with the default stubs overridden by `stubs`
 * polls a fresh task queue (workflows started there, children included, run on it).
 */
export async function withStubWorker<T>(
  { env, bundle }: { env: TestWorkflowEnvironment; bundle: WorkflowBundle },
  name: string,
  stubs: Stubs,
  fn: (worker: StubWorker) => Promise<T>,
): Promise<T> {
  const taskQueue = `wf-${name}-${Date.now().toString(36)}`;
  const calls: string[] = [];
  const args: Record<string, unknown[]> = {};
  const activities = Object.fromEntries(
    Object.entries({ ...defaultStubs(taskQueue), ...stubs }).map(([activity, fn]) => [
      activity,
      async (arg: Record<string, unknown>) => {
        calls.push(callLabel(activity, arg));
        (args[activity] ??= []).push(arg);
        // Heartbeats as the worker's activities do (platform/heartbeat.ts): on a busy machine a stub
        // that waits on the workflow (a child, an update) past the heartbeat timeout would be run again.
        const ctx = Context.current();
        const timer = setInterval(() => ctx.heartbeat(), HEARTBEAT_INTERVAL_MS);
        try {
          return await (fn as (a: unknown) => Promise<unknown>)(arg);
        } finally {
          clearInterval(timer);
        }
      },
    ]),
  );
  const worker = await Worker.create({
    connection: env.nativeConnection,
    taskQueue,
    workflowBundle: bundle,
    activities,
  });
  return worker.runUntil(fn({ taskQueue, calls, args }));
}

/** Waits (in real time: no time is skipped meanwhile) until the session asks for approval of `action`. */
export function awaitApproval(handle: WorkflowHandle, action: string): Promise<SessionStatus> {
  return awaitStatus(handle, (s) => s.pendingApproval?.action === action, `it asks for approval of ${action}`);
}

/** The status without its clock readings, which depend on the run. */
export function withoutTimes(value: unknown): unknown {
  return JSON.parse(
    JSON.stringify(value, (key, v) =>
      ['startedAt', 'at', 'deadline'].includes(key) ? '<time>' : key === 'durationMs' ? '<ms>' : v,
    ),
  );
}

/**
 * Waits (in real time) until the session's status satisfies `ready`, polling
 * the status query; without it within WAIT_MS, fails naming `what`, the last
 * status seen and the workflow's state on the server.
 */
export async function awaitStatus(
  handle: WorkflowHandle,
  ready: (s: SessionStatus) => boolean,
  what: string,
): Promise<SessionStatus> {
  let last: SessionStatus | undefined;
  let waiting = true;
  const poll = async () => {
    while (waiting) {
      last = await handle.query(status);
      if (ready(last)) return last;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return last!;
  };
  const until = () => `the session's status until: ${what}; last seen: ${lastSeen(last)}`;
  try {
    return await within(handle, until, poll(), { serverTime });
  } finally {
    waiting = false;
  }
}

const lastSeen = (s: SessionStatus | undefined) =>
  s
    ? `phase ${s.phase}, round ${s.round ?? 1}, pending approval ${s.pendingApproval?.action ?? 'none'}, last step ${
        s.timeline.at(-1)?.name ?? 'none'
      }`
    : 'none (no query answered)';
