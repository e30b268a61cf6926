/**
 * Parallel attempts and pilots from a client (the CLI, the HTTP server): start
 * them, read them, pick an attempt, stop or resume a pilot. Messages are the
 * objects of workflows/api.ts.
 */
import { WorkflowExecutionAlreadyStartedError, WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import {
  ATTEMPTS_WORKFLOW_TYPE,
  attemptsStatus,
  pick,
  PILOT_WORKFLOW_TYPE,
  pilotStatus,
  REPO_ATTRIBUTE,
  stopPilot,
  type AttemptPick,
  type AttemptsStatus,
  type PickInput,
  type PilotStatus,
} from '../workflows/api';
import type { SessionInputDraft } from '../workflows/input';
import type { PilotInputDraft } from '../workflows/pilot/input';
import { redactUrl } from '../workflows/rules/repo-url';

/** Whether an input asks for parallel attempts (workflow type agentAttempts). */
export const asksForAttempts = (input: SessionInputDraft) => input.attempts !== undefined && input.attempts !== 1;

export async function startAttempts(
  client: Client,
  input: SessionInputDraft,
  opts: { sessionId: string; taskQueue: string },
): Promise<void> {
  await client.workflow.start(ATTEMPTS_WORKFLOW_TYPE, {
    workflowId: opts.sessionId,
    taskQueue: opts.taskQueue,
    args: [input],
    typedSearchAttributes: [{ key: REPO_ATTRIBUTE, value: redactUrl(input.repo.url) }],
  });
}

export async function workflowType(client: Client, id: string): Promise<string> {
  return (await client.workflow.getHandle(id).describe()).type;
}

export function attemptsOf(client: Client, id: string): Promise<AttemptsStatus> {
  return client.workflow.getHandle(id).query(attemptsStatus);
}

/** A pick the workflow refused, with its reason (not waiting for review, a stale change, not an approver...). */
export class PickRefused extends Error {}

export async function pickAttempt(client: Client, id: string, input: PickInput): Promise<AttemptPick> {
  try {
    return await client.workflow.getHandle(id).executeUpdate(pick, { args: [input] });
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError) throw new PickRefused((err.cause as Error)?.message ?? err.message);
    throw err;
  }
}

/** Where a follow-up to `id` goes: the session itself, or the attempt picked of an agentAttempts session. */
export async function followupTarget(client: Client, id: string): Promise<string | { refused: string }> {
  if ((await workflowType(client, id)) !== ATTEMPTS_WORKFLOW_TYPE) return id;
  const attempts = await attemptsOf(client, id);
  return (
    attempts.picked?.sessionId ?? { refused: `${id} has parallel attempts and none is picked yet: pick one first` }
  );
}

/** The pilot's workflow id: `pilot-<name>`. */
export const pilotId = (name: string) => `pilot-${name}`;

export class PilotExists extends Error {}

/**
 * Starts the pilot's workflow. `resume`: only when an earlier run exists (it
 * skips what that run started); otherwise only when none does.
 */
export async function startPilot(
  client: Client,
  input: PilotInputDraft,
  opts: { taskQueue: string; resume: boolean },
): Promise<string> {
  const id = pilotId(input.name);
  const earlier = await client.workflow
    .getHandle(id)
    .describe()
    .then((d) => d.status.name)
    .catch(() => undefined);
  if (earlier === 'RUNNING') throw new PilotExists(`pilot ${input.name} is running (${id})`);
  if (opts.resume && !earlier) throw new PilotExists(`pilot ${input.name} has not run: start it`);
  if (!opts.resume && earlier) throw new PilotExists(`pilot ${input.name} ran before (${earlier}): resume it`);
  try {
    await client.workflow.start(PILOT_WORKFLOW_TYPE, { workflowId: id, taskQueue: opts.taskQueue, args: [input] });
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) throw new PilotExists(`pilot ${input.name} is running`);
    throw err;
  }
  return id;
}

/** The pilot's status: from the running workflow, or the result of its last run. */
export async function pilotOf(client: Client, name: string): Promise<PilotStatus> {
  const handle = client.workflow.getHandle(pilotId(name));
  const { status } = await handle.describe();
  return status.name === 'RUNNING' ? handle.query(pilotStatus) : ((await handle.result()) as PilotStatus);
}

export async function stopPilotRun(client: Client, name: string, by: string): Promise<PilotStatus> {
  return client.workflow.getHandle(pilotId(name)).executeUpdate(stopPilot, { args: [{ by }] });
}
