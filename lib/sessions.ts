/** Reading sessions from Temporal, shared by the CLI and the HTTP server. */
import { WorkflowFailedError, type Client } from '@temporalio/client';
import { redactUrl } from '../workflows/rules/repo-url';
import { OUTCOMES, RUNNING_PHASES, status, WORKFLOW_TYPE, type SessionStatus } from '../workflows/api';

export const PHASES: readonly string[] = [...RUNNING_PHASES, ...OUTCOMES];

export interface SessionRow {
  sessionId: string;
  phase: string;
  repo: string;
  started: string;
  /** Temporal's own status: RUNNING, COMPLETED, FAILED, CANCELLED, TERMINATED... */
  status: string;
}

/** Sessions, newest first, through the visibility store (search attributes DrydockPhase, DrydockRepo). */
export async function listSessions(
  client: Client,
  opts: { phase?: string; repo?: string; limit: number },
): Promise<SessionRow[]> {
  if (opts.phase && !PHASES.includes(opts.phase)) throw new RangeError(`phase: unknown phase '${opts.phase}'`);
  if (opts.repo && /['"\\]/.test(opts.repo)) throw new RangeError('repo: quotes and backslashes are not allowed');
  let query = `WorkflowType = '${WORKFLOW_TYPE}'`;
  if (opts.phase) query += ` AND DrydockPhase = '${opts.phase}'`;
  // The workflow records the URL without credentials (redactUrl), so the filter must match that form.
  if (opts.repo) query += ` AND DrydockRepo = '${redactUrl(opts.repo)}'`;
  const rows: SessionRow[] = [];
  if (opts.limit <= 0) return rows;
  for await (const wf of client.workflow.list({ query, pageSize: Math.min(opts.limit, 1000) })) {
    const attrs = wf.searchAttributes as Record<string, unknown[] | undefined>;
    rows.push({
      sessionId: wf.workflowId,
      phase: String(attrs.DrydockPhase?.[0] ?? ''),
      repo: String(attrs.DrydockRepo?.[0] ?? ''),
      started: wf.startTime.toISOString(),
      status: wf.status.name,
    });
    if (rows.length >= opts.limit) break;
  }
  return rows;
}

/**
 * The status of a running or closed session: the query (a worker replays a
 * closed one), else, when no worker can answer for a closed session, its
 * result or the status carried by its failure.
 */
export async function getStatus(client: Client, id: string): Promise<SessionStatus> {
  const handle = client.workflow.getHandle(id);
  try {
    return await handle.query(status);
  } catch (err) {
    const description = await handle.describe();
    if (description.status.name === 'RUNNING') throw err;
    const final = await finalStatus(client, id);
    if (!final) throw err;
    return final;
  }
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
