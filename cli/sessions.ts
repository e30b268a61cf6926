/** CLI views of sessions: live watch, status, list, cancel. */
import { WorkflowFailedError, type Client } from '@temporalio/client';
import type { Config } from '../lib/config';
import { sessionLink } from '../lib/temporal';
import { describeVerification, screenshotsOf } from '../workflows/verification';
import {
  OUTCOMES,
  status,
  WORKFLOW_TYPE,
  type AgentProgress,
  type Outcome,
  type SessionStatus,
  type StepRecord,
} from '../workflows/api';

const isOutcome = (phase: string): phase is Outcome => (OUTCOMES as readonly string[]).includes(phase);

function seconds(ms?: number): string {
  return ms === undefined ? '' : `${(ms / 1000).toFixed(1)}s`;
}

function stepLine(step: StepRecord): string {
  const mark = step.ok === undefined ? '…' : step.ok ? 'ok' : 'FAILED';
  const extra = step.detail ?? (step.exitCode !== undefined && step.exitCode !== 0 ? `exit ${step.exitCode}` : '');
  return `  ${step.name}  ${mark} ${seconds(step.durationMs)}${extra ? `  (${extra})` : ''}`;
}

function approvalHint(s: SessionStatus): string {
  const p = s.pendingApproval!;
  return [
    `waiting for approval of ${p.action} of ${p.evidence.branch} at ${p.evidence.commit.slice(0, 12)}, change ${p.change.slice(0, 12)} (deadline ${p.deadline})`,
    ...(p.evidence.diffstat ? p.evidence.diffstat.split('\n').map((l) => `    ${l}`) : []),
    `  verification: ${p.evidence.tests}`,
    ...p.evidence.screenshots.map((shot) => `  screenshot: ${shot}`),
    `  may approve: ${p.approvers.length ? p.approvers.join(', ') : 'anyone'}`,
    `  approve: bin/drydock approve ${s.sessionId} --change ${p.change.slice(0, 12)}`,
    `  reject:  bin/drydock reject ${s.sessionId} --comment "why"`,
  ].join('\n');
}

/** A readable summary of a status. */
export function formatStatus(s: SessionStatus): string {
  const lines = [`session ${s.sessionId}: ${s.phase}`, `  repo: ${s.repo}`, `  task: ${s.task}`];
  if (s.sandbox) lines.push(`  sandbox: ${s.sandbox.name} on ${s.sandbox.host} (${s.sandbox.image})`);
  if (s.agent?.kind && s.agent.kind !== 'script') lines.push(`  agent: ${agentLine(s.agent)}`);
  lines.push('timeline:', ...s.timeline.map(stepLine));
  if (s.verification) {
    lines.push(`verification: ${s.verification.passed ? 'passed' : 'FAILED'}: ${describeVerification(s.verification)}`);
    if (!s.verification.passed) lines.push(indent(s.verification.summary));
    for (const shot of screenshotsOf(s.verification)) lines.push(`  screenshot: ${shot}`);
  }
  if (s.pendingApproval) lines.push(approvalHint(s));
  if (s.pushed) lines.push(`pushed: ${s.branch} at ${s.pushed.commit.slice(0, 12)}`);
  if (s.pullRequest) lines.push(`pull request: ${s.pullRequest.url}`);
  if (s.error) lines.push(`error: ${s.error}`);
  return lines.join('\n');
}

/** The agent's progress: model, turn, round, tokens, cost, last tool, why it stopped. */
export function agentLine(a: AgentProgress): string {
  return [
    a.kind === 'openai' ? `${a.kind} ${a.model ?? ''}`.trim() : a.kind,
    a.turn !== undefined ? `turn ${a.turn}` : undefined,
    a.round !== undefined ? `round ${a.round}` : undefined,
    a.usage ? `${a.usage.totalTokens} tokens` : undefined,
    a.costUsd ? `$${a.costUsd.toFixed(4)}` : undefined,
    a.lastTool ? `last: ${a.lastTool}` : undefined,
    a.stopReason ? `stopped: ${a.stopReason}` : undefined,
  ]
    .filter(Boolean)
    .join(', ');
}

function indent(text: string): string {
  return text
    .trimEnd()
    .split('\n')
    .map((l) => `    ${l}`)
    .join('\n');
}

/** Status of a running or closed session (queries replay closed ones). */
export async function getStatus(client: Client, id: string): Promise<SessionStatus> {
  return client.workflow.getHandle(id).query(status);
}

export async function printStatus(client: Client, id: string, json: boolean): Promise<void> {
  const s = await getStatus(client, id);
  console.log(json ? JSON.stringify(s, null, 2) : formatStatus(s));
}

/**
 * Follows a session: prints phase changes and finished steps as they happen,
 * the approval hint when it waits. Returns the exit code (0 = completed).
 */
export async function watch(
  client: Client,
  id: string,
  opts: { json: boolean; config: Pick<Config, 'DRYDOCK_TEMPORAL_UI' | 'TEMPORAL_NAMESPACE'> },
): Promise<number> {
  const handle = client.workflow.getHandle(id);
  const say = (line: string) => opts.json || console.error(line);
  let shownPhase = '';
  const showPhase = (phase: string, extra = '') => {
    if (phase !== shownPhase) say(`[${phase}]${extra}`);
    shownPhase = phase;
  };
  let printed = 0;
  let final: SessionStatus | undefined;
  for (;;) {
    const s = await handle.query(status).catch(async (err: unknown) => {
      // A closed workflow whose worker is gone cannot be queried; its result still tells.
      const description = await handle.describe();
      if (description.status.name === 'RUNNING') throw err;
      return undefined;
    });
    if (s) {
      // Phases come from the timeline, so a phase shorter than the poll interval still shows.
      while (printed < s.timeline.length && s.timeline[printed].durationMs !== undefined) {
        const step = s.timeline[printed++];
        showPhase(step.phase);
        say(stepLine(step));
      }
      if (s.phase === 'awaiting_approval' && s.pendingApproval) showPhase(s.phase, ` ${approvalHint(s)}`);
    }
    if (!s || isOutcome(s.phase)) {
      final = s ?? (await finalStatus(client, id));
      break;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  if (!final) return 1;
  if (opts.json) console.log(JSON.stringify(final, null, 2));
  else {
    if (final.error) say(`error: ${final.error}`);
    if (final.pushed) say(`pushed ${final.branch} at ${final.pushed.commit.slice(0, 12)}`);
    if (final.pullRequest) say(`pull request: ${final.pullRequest.url}`);
    showPhase(final.phase);
    say(`session ${id}: ${final.phase}  ${sessionLink(opts.config, id)}`);
  }
  return final.phase === 'completed' ? 0 : 1;
}

async function finalStatus(client: Client, id: string): Promise<SessionStatus | undefined> {
  try {
    return (await client.workflow.getHandle(id).result()) as SessionStatus;
  } catch (err) {
    if (err instanceof WorkflowFailedError) {
      const details = (err.cause as { details?: unknown[] } | undefined)?.details?.[0] as SessionStatus | undefined;
      return details;
    }
    throw err;
  }
}

export async function list(client: Client, opts: { phase?: string; limit: number; json: boolean }): Promise<void> {
  const query = `WorkflowType = '${WORKFLOW_TYPE}'${opts.phase ? ` AND DrydockPhase = '${opts.phase}'` : ''}`;
  const rows: { sessionId: string; phase: string; repo: string; started: string; status: string }[] = [];
  for await (const wf of client.workflow.list({ query, pageSize: opts.limit })) {
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
  if (opts.json) {
    console.log(JSON.stringify(rows, null, 2));
    return;
  }
  if (rows.length === 0) console.log('no sessions');
  for (const r of rows) console.log(`${r.sessionId}  ${r.phase.padEnd(18)} ${r.started}  ${r.repo}`);
}

export async function cancel(client: Client, id: string): Promise<void> {
  await client.workflow.getHandle(id).cancel();
  console.log(`cancellation requested for ${id}; its sandbox is being torn down`);
}
