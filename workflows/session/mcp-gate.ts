/**
 * The approval gate of an MCP call the operator marked as writing outside
 * the sandbox (docs/mcp.md): always required, whatever the policy says of
 * the irreversible actions. The session shows the call (server, tool,
 * arguments) and waits, like a push, for a decision bound to this call's
 * hash; a rejection or no decision within approval.timeout leaves the call
 * unmade and the model hears why, and the agent goes on.
 */
import { condition } from '@temporalio/workflow';
import { durationMs } from '../units';
import { PAST } from './approval';
import { onHost, records } from './proxies';
import { inSandbox } from './sandbox';
import type { SessionRun } from './state';

/** Undefined when approved; else why the call is not made (the model reads it). */
export async function gateMcpWrite(
  run: SessionRun,
  call: { server: string; tool: string },
  at: { assistantIndex: number; callIndex: number; index: number },
): Promise<string | undefined> {
  const described = await inSandbox(run, (sb) =>
    onHost(sb).describeMcpCall({
      sessionId: run.sessionId,
      assistantIndex: at.assistantIndex,
      callIndex: at.callIndex,
    }),
  );
  const { timeout } = run.input.approval;
  const timeoutMs = durationMs(timeout);
  const phase = run.status.phase;
  run.verdicts.delete('mcp_write'); // each call is decided anew
  run.status.pendingApproval = {
    action: 'mcp_write',
    change: described.change,
    approvers: run.policy.approvers,
    deadline: new Date(Date.now() + timeoutMs).toISOString(),
    evidence: {
      branch: run.branch,
      commit: '',
      diffstat: '',
      tests: '',
      screenshots: [],
      mcpCall: { ...call, arguments: described.arguments },
    },
  };
  run.setPhase('awaiting_approval');
  const verdict = await run.track('approval: mcp_write', async (record) => {
    await condition(() => run.verdicts.has('mcp_write'), timeoutMs);
    const decided = run.verdicts.get('mcp_write');
    record.detail = `${call.server} ${call.tool}: ${decided ? `${PAST[decided.decision]} by ${decided.by}` : `no decision within ${timeout}`}`;
    record.ok = decided?.decision === 'approve';
    return decided;
  });
  run.status.pendingApproval = undefined;
  run.verdicts.delete('mcp_write');
  run.setPhase(phase);
  if (verdict) {
    await records.recordAudit({
      sessionId: run.sessionId,
      key: `${run.keyPrefix}approval/mcp_write/${at.index}`,
      kind: 'approval',
      actor: verdict.by,
      at: verdict.at,
      data: {
        action: 'mcp_write',
        ...call,
        decision: verdict.decision,
        change: verdict.change,
        comment: verdict.comment,
      },
    });
  }
  if (!verdict) return `no approval of this call of ${call.tool} within ${timeout}: it was not made`;
  if (verdict.decision === 'reject') {
    return `${verdict.by} rejected this call of ${call.tool}${verdict.comment ? `: ${verdict.comment}` : ''}; it was not made`;
  }
  return undefined;
}
