/** Starting and reading sessions in Temporal, shared by the CLI and the HTTP server. */
import {
  WorkflowExecutionAlreadyStartedError,
  WorkflowFailedError,
  WorkflowNotFoundError,
  WorkflowIdConflictPolicy,
  WorkflowIdReusePolicy,
  WorkflowUpdateFailedError,
  type Client,
} from '@temporalio/client';
import { createHash } from 'node:crypto';
import { temporal } from '@temporalio/proto';
import {
  MEMO_KEY,
  OUTCOMES,
  PHASE_ATTRIBUTE,
  followup,
  REPO_ATTRIBUTE,
  RUNNING_PHASES,
  startChildForStep,
  status,
  WORKFLOW_TYPE,
  type StepChildAnswer,
  type StepChildRequest,
  type FollowupAccepted,
  type FollowupInput,
  type LastKnown,
  type Phase,
  type SessionStatus,
  type Unanswered,
} from '../workflows/api';
import type { SessionInputDraft } from '../workflows/input';
import { asksForAttempts, followupTarget, startAttempts } from './attempts';
import { redactUrl } from '../workflows/rules/repo-url';

export const PHASES: readonly string[] = [...RUNNING_PHASES, ...OUTCOMES];

/** A session id that is taken, by a running or a closed session. */
export class SessionExists extends Error {
  constructor(readonly sessionId: string) {
    super(`session ${sessionId} already exists`);
    this.name = 'SessionExists';
  }
}

export interface StartOptions {
  sessionId: string;
  taskQueue: string;
  /**
   * What a session already under the id means. `fail`: it is an error
   * (SessionExists). `reuse`: a running one is the answer and a closed one is
   * not started again, so a webhook redelivered days later starts nothing.
   * @default 'fail'
   */
  ifExists?: 'fail' | 'reuse';
}

/**
 * Starts an agentSession: the one way every trigger (CLI, API, webhooks, demo)
 * does it. A session id is never used twice, not even after its session
 * closed: branch, container and audit chain are keyed by it. The search
 * attributes are set at once so `list --phase/--repo` finds the session
 * before its first phase change.
 */
export async function startSession(client: Client, input: SessionInputDraft, opts: StartOptions): Promise<void> {
  const reuse = opts.ifExists === 'reuse';
  try {
    await whenSearchAttributesKnown(() =>
      asksForAttempts(input) ? startAttempts(client, input, opts) : startOne(client, input, opts),
    );
  } catch (err) {
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    if (!reuse) throw new SessionExists(opts.sessionId);
  }
}

/** One agentSession workflow, its search attributes and memo set at its start. */
async function startOne(client: Client, input: SessionInputDraft, opts: StartOptions): Promise<void> {
  await client.workflow.start(WORKFLOW_TYPE, {
    workflowId: opts.sessionId,
    taskQueue: opts.taskQueue,
    args: [input],
    workflowIdConflictPolicy:
      opts.ifExists === 'reuse' ? WorkflowIdConflictPolicy.USE_EXISTING : WorkflowIdConflictPolicy.FAIL,
    workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
    typedSearchAttributes: [
      { key: PHASE_ATTRIBUTE, value: 'provisioning' },
      { key: REPO_ATTRIBUTE, value: redactUrl(input.repo.url) },
    ],
    // What lists and a worker-less status show until the workflow writes its own.
    memo: {
      [MEMO_KEY]: {
        phase: 'provisioning',
        task: input.task.slice(0, 500),
        repo: redactUrl(input.repo.url),
        at: new Date().toISOString(),
      } satisfies LastKnown,
    },
  });
}

/**
 * `start`, again for up to 30 s while the server says drydock's search
 * attributes have no mapping: a frontend sees attributes registered moments
 * before (a new deployment's set-up) only once its namespace cache refreshes.
 */
async function whenSearchAttributesKnown<T>(start: () => Promise<T>): Promise<T> {
  for (let tries = 1; ; tries++) {
    try {
      return await start();
    } catch (err) {
      if (!unmappedAttribute(err) || tries >= 15) throw err;
      await new Promise((resolve) => setTimeout(resolve, 2_000));
    }
  }
}

/**
 * True when Temporal refused for want of a search attribute's mapping. The
 * client's ServiceError says only "Failed to start Workflow": the server's
 * words are in its cause.
 */
function unmappedAttribute(err: unknown): boolean {
  for (let e = err; e instanceof Error; e = e.cause) {
    if (/no mapping defined for search attribute/.test(e.message)) return true;
  }
  return false;
}

export interface SessionRow {
  sessionId: string;
  phase: string;
  repo: string;
  /** The task (its first 500 characters), from the session's memo. */
  task: string;
  /** The action waiting for a person's decision, if any. */
  pending?: string;
  started: string;
  /** Temporal's own status: RUNNING, COMPLETED, FAILED, CANCELLED, TERMINATED... */
  status: string;
}

/**
 * Sessions, newest first, through the visibility store (search attributes
 * DrydockPhase, DrydockRepo, and the memo): no worker is asked.
 */
export async function listSessions(
  client: Client,
  opts: {
    phase?: string;
    repo?: string;
    limit: number;
    taskQueue?: string;
    /** Only sessions of these repos (URLs): whatever the caller may read. Undefined: every repo. */
    within?: readonly string[];
  },
): Promise<SessionRow[]> {
  if (opts.phase && !PHASES.includes(opts.phase)) throw new RangeError(`phase: unknown phase '${opts.phase}'`);
  const quoted = [opts.repo ?? '', ...(opts.within ?? [])].some((r) => /['"\\]/.test(r));
  if (quoted) throw new RangeError('repo: quotes and backslashes are not allowed');
  let query = `WorkflowType = '${WORKFLOW_TYPE}'`;
  if (opts.phase) query += ` AND DrydockPhase = '${opts.phase}'`;
  // The workflow records the URL without credentials (redactUrl), so the filter must match that form.
  if (opts.repo) query += ` AND DrydockRepo = '${redactUrl(opts.repo)}'`;
  if (opts.within?.length === 0) return [];
  if (opts.within) query += ` AND DrydockRepo IN (${opts.within.map((r) => `'${redactUrl(r)}'`).join(', ')})`;
  if (opts.taskQueue && /['"\\]/.test(opts.taskQueue)) throw new RangeError('taskQueue: no quotes or backslashes');
  if (opts.taskQueue) query += ` AND TaskQueue = '${opts.taskQueue}'`;
  const rows: SessionRow[] = [];
  if (opts.limit <= 0) return rows;
  for await (const wf of client.workflow.list({ query, pageSize: Math.min(opts.limit, 1000) })) {
    const attrs = wf.searchAttributes as Record<string, unknown[] | undefined>;
    const memo = memoOf(wf.memo);
    rows.push({
      sessionId: wf.workflowId,
      phase: String(attrs.DrydockPhase?.[0] ?? ''),
      repo: String(attrs.DrydockRepo?.[0] ?? ''),
      task: memo?.task ?? '',
      ...(memo?.pending && wf.status.name === 'RUNNING' ? { pending: memo.pending.action } : {}),
      started: wf.startTime.toISOString(),
      status: wf.status.name,
    });
    if (rows.length >= opts.limit) break;
  }
  return rows;
}

/** How long a status query may wait for a worker before the memo answers. */
const QUERY_DEADLINE_MS = 2_000;
/** A worker polls at least this often (long polls last about a minute). */
const POLL_INTERVAL_MS = 90_000;

/**
 * The status of a session. A closed one: its result (or the status carried
 * by its failure). A running one: the query, when a worker answers within a
 * few seconds; otherwise the last known state from its memo, marked
 * `unanswered` with what Temporal says is pending. A session with no live
 * worker answers at once (no query is tried).
 */
export async function getStatus(client: Client, id: string): Promise<SessionStatus> {
  const handle = client.workflow.getHandle(id);
  const description = await handle.describe();
  if (description.status.name !== 'RUNNING') {
    const final = await finalStatus(client, id);
    if (final) return final;
  }
  const lastPoll = await lastWorkerPoll(client, description.taskQueue);
  const polling = lastPoll !== undefined && Date.now() - lastPoll.getTime() < POLL_INTERVAL_MS;
  if (polling) {
    try {
      const s = await client.connection.withDeadline(Date.now() + QUERY_DEADLINE_MS, () => handle.query(status));
      return s.queued
        ? { ...s, queued: { ...s.queued, position: await queuePosition(client, id, description.taskQueue) } }
        : s;
    } catch {
      // No answer in time (the worker is busy, restarting or gone): the memo answers.
    }
  }
  const message = polling
    ? `no worker answered within ${QUERY_DEADLINE_MS / 1000} s`
    : `no worker is polling task queue ${description.taskQueue}`;
  return lastKnownStatus(id, description, { message, since: lastPoll?.toISOString(), pendingActivities: [] });
}

/**
 * The status as the session's worker answers it: asked up to `tries` times while the memo
 * answered instead (a busy worker misses the query's deadline now and then); still unanswered
 * after them, an error naming why, for a caller that must not act on the memo's part of it.
 */
export async function answeredStatus(client: Client, id: string, tries = 3): Promise<SessionStatus> {
  for (let attempt = 1; ; attempt++) {
    const s = await getStatus(client, id);
    if (!s.unanswered) return s;
    if (attempt >= tries) throw new StatusUnanswered(id, s.unanswered.message);
  }
}

export class StatusUnanswered extends Error {
  constructor(
    readonly sessionId: string,
    why: string,
  ) {
    super(`session ${sessionId}'s worker did not answer (${why}): try again`);
    this.name = 'StatusUnanswered';
  }
}

/** The most queued sessions counted for a place in line or a bound. */
const QUEUE_SCAN = 1000;

/**
 * The running sessions in the phase `queued`, first in line first (by start
 * time), as Temporal's visibility lists them: eventually consistent, so a
 * session that just queued may be missing for a second.
 */
export async function queuedSessions(
  client: Client,
  opts: { taskQueue?: string; repo?: string } = {},
): Promise<SessionRow[]> {
  const rows = await listSessions(client, { phase: 'queued', ...opts, limit: QUEUE_SCAN });
  return rows
    .filter((r) => r.status === 'RUNNING')
    .sort((a, b) => a.started.localeCompare(b.started) || a.sessionId.localeCompare(b.sessionId));
}

/** The session's place in its task queue's line (1: next); undefined when visibility does not list it yet. */
export async function queuePosition(client: Client, id: string, taskQueue: string): Promise<number | undefined> {
  const i = (await queuedSessions(client, { taskQueue })).findIndex((r) => r.sessionId === id);
  return i < 0 ? undefined : i + 1;
}

/** How many sessions of `repo` (its URL) are queued now. */
export async function queuedOf(client: Client, repo: string): Promise<number> {
  return (await queuedSessions(client, { repo })).length;
}

/** When a worker last polled the task queue for workflow tasks, if the server remembers one. */
async function lastWorkerPoll(client: Client, taskQueue: string): Promise<Date | undefined> {
  const { pollers } = await client.workflowService.describeTaskQueue({
    namespace: client.options.namespace,
    taskQueue: { name: taskQueue, kind: temporal.api.enums.v1.TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
    taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
  });
  const times = (pollers ?? []).map((p) => timestampMs(p.lastAccessTime)).filter((t) => t > 0);
  return times.length ? new Date(Math.max(...times)) : undefined;
}

type Description = Awaited<ReturnType<ReturnType<Client['workflow']['getHandle']>['describe']>>;

/** A status from the memo the workflow writes at every phase change, and Temporal's description. */
function lastKnownStatus(id: string, description: Description, unanswered: Unanswered): SessionStatus {
  const memo = memoOf(description.memo);
  const pendingActivities = (description.raw.pendingActivities ?? []).map((a) => ({
    activity: a.activityType?.name ?? '?',
    state: temporal.api.enums.v1.PendingActivityState[a.state ?? 0].replace('PENDING_ACTIVITY_STATE_', ''),
    attempt: a.attempt ?? 0,
    ...(a.lastFailure?.message ? { lastFailure: a.lastFailure.message } : {}),
  }));
  return {
    sessionId: id,
    repo: memo?.repo ?? '',
    task: memo?.task ?? '',
    phase: memo?.phase ?? 'provisioning',
    startedAt: description.startTime.toISOString(),
    timeline: memo?.step ? [{ name: memo.step, phase: memo.phase, startedAt: memo.at }] : [],
    decisions: [],
    refusedDecisions: [],
    ...(memo?.branch ? { branch: memo.branch } : {}),
    ...(memo?.error ? { error: memo.error } : {}),
    ...(memo?.restarts ? { restarts: memo.restarts } : {}),
    unanswered: { ...unanswered, pendingActivities, ...(memo?.pending ? { pendingApproval: memo.pending } : {}) },
  };
}

function memoOf(memo: Record<string, unknown> | undefined): LastKnown | undefined {
  const value = memo?.[MEMO_KEY];
  return value !== null && typeof value === 'object' ? (value as LastKnown) : undefined;
}

function timestampMs(
  t: { seconds?: { toNumber(): number } | number | null; nanos?: number | null } | null | undefined,
): number {
  if (!t?.seconds) return 0;
  const seconds = typeof t.seconds === 'number' ? t.seconds : t.seconds.toNumber();
  return seconds * 1000 + Math.floor((t.nanos ?? 0) / 1e6);
}

/** What a closed session ended with: its result, or the status in its failure's details. */
export async function finalStatus(client: Client, id: string): Promise<SessionStatus | undefined> {
  try {
    return (await client.workflow.getHandle(id).result()) as SessionStatus;
  } catch (err) {
    if (err instanceof WorkflowFailedError) {
      return (err.cause as { details?: unknown[] } | undefined)?.details?.[0] as SessionStatus | undefined;
    }
    throw err;
  }
}

/** A follow-up the session refused (who sent it, what it carried, or the session's phase): the reason says which. */
export class FollowupRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'FollowupRefused';
  }
}

/** An attach refused, with its reason in one line: by the session's validator, or because the sandbox is out of reach. */
export class AttachRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'AttachRefused';
  }
}

/**
 * Sends a follow-up to a session: the one way the CLI, the API, the console
 * and the webhooks do it. The session's validator answers at once; a refusal
 * is a FollowupRefused with its reason, a closed or unknown session a
 * WorkflowNotFoundError.
 */
export async function sendFollowup(client: Client, id: string, input: FollowupInput): Promise<FollowupAccepted> {
  // Parallel attempts: the follow-up goes to the attempt picked.
  const target = await followupTarget(client, id);
  if (typeof target !== 'string') throw new FollowupRefused(target.refused);
  try {
    return await client.workflow
      .getHandle(target)
      .executeUpdate(followup, { args: [input], ...(input.id ? { updateId: `followup-${input.id}` } : {}) });
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError) {
      throw new FollowupRefused((err.cause as Error | undefined)?.message ?? err.message);
    }
    throw err;
  }
}

/** What Temporal knows of a session: its phase (the search attribute it keeps), running or closed. */
export async function sessionState(
  client: Client,
  sessionId: string,
): Promise<{ state: 'missing' } | { state: 'running' | 'closed'; phase?: Phase; parent?: string }> {
  try {
    const described = await client.workflow.getHandle(sessionId).describe();
    const phase = described.typedSearchAttributes.get(PHASE_ATTRIBUTE) as Phase | undefined;
    const parent = described.parentExecution?.workflowId;
    return {
      state: described.status.name === 'RUNNING' ? 'running' : 'closed',
      ...(phase ? { phase } : {}),
      ...(parent ? { parent } : {}),
    };
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return { state: 'missing' };
    throw err;
  }
}

/**
 * An agent CLI's start_child call (mcp/child-tool.ts), asked of its session
 * (the startChild update) and answered once the child ended. The update's id
 * is the step's and the task's: the CLI asking again after its worker died
 * (the gateway reopened by the step's retry) gets the same child, not a second.
 */
export async function askForChild(
  client: Client,
  sessionId: string,
  request: StepChildRequest,
): Promise<StepChildAnswer> {
  const task = createHash('sha256').update(request.task).digest('hex').slice(0, 24);
  return client.workflow
    .getHandle(sessionId)
    .executeUpdate(startChildForStep, { args: [request], updateId: `${request.step}-child-${task}` });
}
