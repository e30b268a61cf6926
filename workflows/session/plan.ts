/**
 * A plan first (docs/agents.md): a session that asks for one (input.plan, or
 * the repo's default) has its agent write a plan before any change, waits at
 * the `plan` gate (the same decide/approve/reject messages as a push, so the
 * console, Slack, the CLI and the Temporal UI decide it), takes follow-ups
 * there as amendments (the agent writes the plan again with them), and hands
 * the approved plan to the agent's work. Writing happens under the session's
 * wall time; the wait for a person does not, and the work after the approval
 * gets the wall time again, as a follow-up round does.
 */
import type { CommitResult } from '../../sandbox/contract';
import type { PlanState } from '../api';
import { describeStop } from '../rules/budget';
import type { Followup } from '../rules/followup';
import { amendRequest, approvedPlanMessage, boundPlan, planHash, planRequest, scriptPlan } from '../rules/plan';
import { durationMs } from '../units';
import { checkAcceptance } from './acceptance';
import { cliAgent, workUntilVerified } from './agents';
import { PAST, waitOrPark } from './approval';
import { SessionEnd } from './errors';
import { modelAgent, startConversation } from './model-agent';
import { onHost, records } from './proxies';
import { inSandbox } from './sandbox';
import type { SessionRun } from './state';
import { describeStep, runScriptStep } from './steps';

/** Amendments kept in status (the audit trail has every one). */
const RECENT_AMENDMENTS = 10;

/** Whether the agent is to plan now: the session asked for a plan, and none is approved yet. */
export function planning(run: SessionRun): boolean {
  return run.input.plan && run.status.plan?.state !== 'approved';
}

/** The agent writes the plan (or the next version of it); it may only read while it does. */
export async function writePlan(run: SessionRun): Promise<void> {
  const plan = (run.status.plan ??= { state: 'writing', version: 1, amendments: [] });
  plan.state = 'writing';
  const { loop, input } = run;
  const progress = run.status.agent!;
  progress.stopReason = undefined;
  if (input.agent.kind === 'script') {
    const outputs: string[] = [];
    for (const [i, step] of run.planSteps().entries()) {
      const name = `plan ${plan.version}: step ${i + 1}: ${describeStep(step)}`;
      const key = `${run.keyPrefix}plan-${plan.version}-step-${i + 1}`;
      outputs.push((await runScriptStep(run, step, { key, name, failOnExit: true })).outputTail);
    }
    plan.text = scriptPlan(outputs);
  } else {
    const asked = loop.planAsked === plan.version;
    loop.planAsked = plan.version;
    if (input.agent.kind === 'openai') {
      if (loop.messageCount === 0) await startConversation(run);
      if (!asked) await tellModel(run, `plan ${plan.version}: asked`, planText(plan));
      await modelAgent(run);
    } else {
      await cliAgent(run, { prompt: cliPlanPrompt(run, plan), key: `agent-cli-plan-${plan.version}` });
    }
    const stop = progress.stopReason;
    if (stop !== 'done') {
      throw new SessionEnd(
        'failed',
        `the agent stopped while planning: ${describeStop(stop!, input.agent.budget)}`,
        `budget_${stop}`,
      );
    }
    plan.text = boundPlan(progress.summary ?? '');
    progress.stopReason = undefined;
  }
  await run.note(`plan ${plan.version}`, plan.text.split('\n')[0].slice(0, 200) || '(empty)');
  plan.state = 'awaiting';
}

/**
 * After the first plan is written: the gate, an amended plan per follow-up
 * that reached it, and once approved the agent's work on the approved plan;
 * returns the verified change as workUntilVerified does.
 */
export async function planThenWork(run: SessionRun): Promise<CommitResult> {
  for (;;) {
    const amendments = await planGate(run);
    if (!amendments) break;
    const plan = run.status.plan!;
    plan.version++;
    plan.amendments = [
      ...plan.amendments,
      ...amendments.map((a) => ({ by: a.by, text: amendmentText(a), version: plan.version })),
    ].slice(-RECENT_AMENDMENTS);
    if (run.input.agent.kind === 'script') run.amendPlanSteps(amendments.flatMap((a) => a.steps ?? []));
    await records.recordAudit({
      sessionId: run.sessionId,
      key: `${run.keyPrefix}plan-amendment-${plan.version}`,
      kind: 'followup',
      actor: amendments[0].by,
      data: { plan: plan.version, followups: amendments },
    });
    run.setPhase('agent');
    run.loop.startedAt = Date.now();
    await withinWallTime(run, () => writePlan(run));
  }
  return withinWallTime(run, async () => {
    await startWork(run);
    const verified = await workUntilVerified(run);
    await checkAcceptance(run, verified);
    return verified;
  });
}

/** The plan on display until a decision, a follow-up (the amendments, returned) or the timeout (the session ends). */
async function planGate(run: SessionRun): Promise<Followup[] | undefined> {
  const plan = run.status.plan!;
  const text = plan.text ?? '';
  const { timeout } = run.input.approval;
  const timeoutMs = durationMs(timeout);
  run.verdicts.delete('plan'); // each version is decided anew
  run.status.pendingApproval = {
    action: 'plan',
    change: planHash(text, plan.version),
    approvers: run.policy.approvers,
    deadline: new Date(Date.now() + timeoutMs).toISOString(),
    evidence: {
      branch: run.branch,
      commit: '',
      diffstat: '',
      tests: '',
      screenshots: [],
      plan: { text, version: plan.version },
    },
  };
  run.setPhase('awaiting_approval');
  const verdict = await run.track('approval: plan', async (record) => {
    // Past the operator's DRYDOCK_PARK_AFTER the sandbox is parked; the amended plan or the work brings one back.
    await waitOrPark(run, () => run.verdicts.has('plan') || run.followups.length > 0, timeoutMs);
    const decided = run.verdicts.get('plan');
    record.detail = decided
      ? `plan ${plan.version} ${PAST[decided.decision]} by ${decided.by}`
      : run.followups.length > 0
        ? `plan ${plan.version} amended by ${run.followups[0].by}`
        : `no decision within ${timeout}`;
    record.ok = decided ? decided.decision === 'approve' : run.followups.length > 0;
    return decided;
  });
  run.status.pendingApproval = undefined;
  if (verdict) {
    await records.recordAudit({
      sessionId: run.sessionId,
      key: `${run.keyPrefix}approval/plan/${plan.version}`,
      kind: 'approval',
      actor: verdict.by,
      at: verdict.at,
      data: {
        action: 'plan',
        version: plan.version,
        decision: verdict.decision,
        change: verdict.change,
        comment: verdict.comment,
      },
    });
  }
  if (!verdict && run.followups.length > 0) return run.followups.splice(0);
  if (!verdict) throw new SessionEnd('timed_out', `no approval of the plan within ${timeout}`, 'approval_timeout');
  if (verdict.decision === 'reject') {
    const comment = verdict.comment ? `: ${verdict.comment}` : '';
    throw new SessionEnd('rejected', `plan rejected by ${verdict.by}${comment}`, 'rejected');
  }
  plan.state = 'approved';
  plan.approvedBy = verdict.by;
  return undefined;
}

/** The agent starts on the approved plan, its time counted from here (the wait for a person is not the agent's). */
async function startWork(run: SessionRun): Promise<void> {
  const plan = run.status.plan!;
  run.setPhase('agent');
  run.loop.startedAt = Date.now();
  const message = approvedPlanMessage(plan.text ?? '', plan.approvedBy ?? 'a reviewer');
  if (run.input.agent.kind === 'openai') await tellModel(run, `plan ${plan.version}: approved`, message);
  else if (run.input.agent.kind === 'cli') run.loop.plan = message;
}

/**
 * Provisioning aside, the session's wall time bounds each stretch of the
 * agent's work here, each counted from its start: writing an amended plan,
 * and the work on the approved plan.
 */
function withinWallTime<T>(run: SessionRun, fn: () => Promise<T>): Promise<T> {
  return run.withinWorkScope(durationMs(run.input.limits.wallTime), fn);
}

/** The model's next user turn. */
async function tellModel(run: SessionRun, name: string, content: string): Promise<void> {
  const { loop, sessionId } = run;
  await run.track(name, async () => {
    await inSandbox(run, (sb) => onHost(sb).addAgentMessage({ sessionId, index: loop.messageCount, content }));
    loop.messageCount++;
  });
}

/** What the agent is asked for this version: the first plan, or the plan again with the latest amendments. */
function planText(plan: PlanState): string {
  const latest = plan.amendments.filter((a) => a.version === plan.version);
  return latest.length ? amendRequest(latest) : planRequest();
}

/** An agent CLI starts afresh each run: the task, and for an amended plan the plan it wrote before. */
function cliPlanPrompt(run: SessionRun, plan: PlanState): string {
  const before =
    plan.version > 1 && plan.text
      ? [`Your plan so far:\n<plan>\n${plan.text.replaceAll('</plan', '<\\/plan')}\n</plan>`]
      : [];
  return [run.status.task, ...before, planText(plan)].join('\n\n');
}

/** A follow-up as an amendment in status: its text, or a script's steps in a few words. */
function amendmentText(f: Followup): string {
  return f.text ?? (f.steps ?? []).map(describeStep).join('; ');
}
