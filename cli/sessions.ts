/** CLI views of sessions: live watch, status, list, logs, cancel. */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import type { Config } from '../platform/config';
import { finalStatus, getStatus, listSessions } from '../platform/sessions';
import { sessionLink } from '../platform/temporal';
import { buildInStep } from './build-progress';
import { describeVerification, screenshotsOf } from '../workflows/rules/verification';
import {
  OUTCOMES,
  status,
  type AgentProgress,
  type Outcome,
  type QueuedFor,
  type ChildSession,
  type SessionStatus,
  type StepRecord,
  type Unanswered,
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
  if (p.evidence.plan) {
    return [
      `waiting for approval of the plan (version ${p.evidence.plan.version}), change ${p.change.slice(0, 12)} (deadline ${p.deadline})`,
      ...p.evidence.plan.text.split('\n').map((l) => `    ${l}`),
      `  may approve: ${p.approvers.length ? p.approvers.join(', ') : 'anyone'}`,
      `  approve: bin/drydock approve ${s.sessionId} --change ${p.change}`,
      `  amend:   bin/drydock followup ${s.sessionId} "what to change in the plan"`,
      `  reject:  bin/drydock reject ${s.sessionId} --comment "why"`,
    ].join('\n');
  }
  return [
    `waiting for approval of ${p.action} of ${p.evidence.branch} at ${p.evidence.commit.slice(0, 12)}, change ${p.change.slice(0, 12)} (deadline ${p.deadline})`,
    ...(p.evidence.diffstat ? p.evidence.diffstat.split('\n').map((l) => `    ${l}`) : []),
    `  verification: ${p.evidence.tests}`,
    ...(p.evidence.setupFiles ? [`  left out of the change (setup wrote them): ${p.evidence.setupFiles}`] : []),
    ...p.evidence.screenshots.map((shot) => `  screenshot: ${shot}`),
    `  may approve: ${p.approvers.length ? p.approvers.join(', ') : 'anyone'}`,
    `  approve: bin/drydock approve ${s.sessionId} --change ${p.change}`,
    `  reject:  bin/drydock reject ${s.sessionId} --comment "why"`,
  ].join('\n');
}

/** A readable summary of a status. */
export function formatStatus(s: SessionStatus): string {
  const lines = [`session ${s.sessionId}: ${s.phase}`, `  repo: ${s.repo}`, `  task: ${s.task}`];
  if (s.unanswered) lines.push(unansweredText(s.unanswered));
  if (s.queued) lines.push(queuedText(s.queued));
  if (s.sandbox) {
    const replaced = s.restarts ? `, replaced ${s.restarts}× from its checkpoint` : '';
    lines.push(`  sandbox: ${s.sandbox.name} on ${s.sandbox.host} (${s.sandbox.image}${replaced})`);
  }
  if (s.parked)
    lines.push(`  parked since ${s.parked.since}: no sandbox while it waits; anything run in it brings one back`);
  if (s.agent?.kind && s.agent.kind !== 'script') lines.push(`  agent: ${agentLine(s.agent)}`);
  if (s.childOf) lines.push(`  child of: ${s.childOf} (its change goes there; it publishes nothing)`);
  lines.push('timeline:', ...s.timeline.map(stepLine));
  if (s.children?.length) lines.push('children:', ...s.children.map(childLine));
  if (s.verification) {
    lines.push(`verification: ${describeVerification(s.verification)}`);
    if (!s.verification.passed) lines.push('  FAILED:', indent(s.verification.summary));
    for (const shot of screenshotsOf(s.verification)) lines.push(`  screenshot: ${shot}`);
  }
  if (s.pendingApproval) lines.push(approvalHint(s));
  if (s.pushed) lines.push(`pushed: ${s.branch} at ${s.pushed.commit.slice(0, 12)}`);
  if (s.pullRequest) lines.push(`pull request: ${s.pullRequest.url}`);
  if (s.error) lines.push(`error: ${s.error}`);
  return lines.join('\n');
}

/** What a queued session waits for and its place in line. */
function queuedText(q: QueuedFor): string {
  const place =
    q.position === undefined ? '' : `, ${q.position === 1 ? 'next in line' : `number ${q.position} in line`}`;
  return `  queued since ${q.since}${place}: ${q.reason} (asked ${q.tries}×)`;
}

/** Why this status is the last known state, and what Temporal says is pending. */
function unansweredText(u: Unanswered): string {
  return [
    `  (last known state: ${u.message}${u.since ? `; a worker last polled at ${u.since}` : ''})`,
    ...(u.pendingApproval
      ? [`  waiting for approval of ${u.pendingApproval.action}, change ${u.pendingApproval.change.slice(0, 12)}`]
      : []),
    ...u.pendingActivities.map(
      (a) => `  pending: ${a.activity} (${a.state}, attempt ${a.attempt})${a.lastFailure ? `: ${a.lastFailure}` : ''}`,
    ),
  ].join('\n');
}

/** A child session in its parent's status: id, phase, verification, cost, task. */
function childLine(c: ChildSession): string {
  const verified = c.verified === undefined ? '' : c.verified ? ', verified' : ', verification failed';
  const cost = c.costUsd !== undefined ? `, $${c.costUsd.toFixed(4)}` : '';
  return `  ${c.sessionId}: ${c.phase}${verified}${cost}: ${c.task.split('\n')[0]}`;
}

/** The agent's progress: model, turn, attempt, tokens, cost, last tool, why it stopped. */
export function agentLine(a: AgentProgress): string {
  return [
    a.kind && a.kind !== 'script' ? `${a.kind} ${a.model ?? ''}`.trim() : a.kind,
    a.turn !== undefined ? `turn ${a.turn}` : undefined,
    a.attempt !== undefined ? `attempt ${a.attempt}` : undefined,
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

/** Prints a session's status and returns it. */
export async function printStatus(client: Client, id: string, json: boolean): Promise<SessionStatus> {
  const s = await getStatus(client, id);
  console.log(json ? JSON.stringify(s, null, 2) : formatStatus(s));
  return s;
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
  // On a terminal, a step running for a while shows its elapsed time on one updating line.
  const live = !opts.json && process.stderr.isTTY;
  let progressShown = false;
  const clearProgress = () => {
    if (progressShown) process.stderr.write('\r\x1b[2K');
    progressShown = false;
  };
  let workerless = false;
  // A step that builds an image (a cold start's environment) says where the build is, as `snapshot build` does.
  const buildMoved = buildInStep(client, handle);
  for (;;) {
    const s = await handle.query(status).catch(async (err: unknown) => {
      // A closed workflow whose worker is gone cannot be queried; its result still tells.
      if ((await handle.describe()).status.name !== 'RUNNING') return undefined;
      // A running one without a worker (restarting, draining) goes on once one is back.
      if (!workerless) say(`(no worker answers right now: ${(err as Error).message}; still following)`);
      workerless = true;
      return 'no worker' as const;
    });
    if (s === 'no worker') {
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    workerless = false;
    if (s) {
      // Phases come from the timeline, so a phase shorter than the poll interval still shows.
      while (printed < s.timeline.length && s.timeline[printed].durationMs !== undefined) {
        const step = s.timeline[printed++];
        clearProgress();
        showPhase(step.phase);
        say(stepLine(step));
      }
      const running = s.timeline[printed];
      const building = running && !opts.json ? await buildMoved() : undefined;
      if (building) {
        clearProgress();
        say(`  ${building}`);
      }
      if (live && running && !running.name.startsWith('approval')) {
        const elapsed = Math.round((Date.now() - Date.parse(running.startedAt)) / 1000);
        if (elapsed >= 3) {
          process.stderr.write(`\r\x1b[2K  ${running.name}  … ${elapsed}s`);
          progressShown = true;
        }
      }
      if (s.phase === 'awaiting_approval' && s.pendingApproval) {
        if (shownPhase !== s.phase) clearProgress();
        showPhase(s.phase, ` ${approvalHint(s)}`);
      }
    }
    if (!s || isOutcome(s.phase)) {
      clearProgress();
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

export async function list(
  client: Client,
  opts: { phase?: string; repo?: string; limit: number; json: boolean },
): Promise<void> {
  const rows = await listSessions(client, opts);
  if (opts.json) {
    console.log(JSON.stringify(rows, null, 2));
    return;
  }
  if (rows.length === 0) console.log('no sessions');
  for (const r of rows) console.log(`${r.sessionId}  ${r.phase.padEnd(18)} ${r.started}  ${r.repo}`);
}

/**
 * Prints the output of a session's steps: the whole output from this
 * machine's artifact store when it is there, else the tail kept in status.
 * Returns the exit code (1 when no step matches).
 */
export async function logs(
  client: Client,
  id: string,
  opts: { step?: string; json: boolean; artifactsDir: string },
): Promise<number> {
  const s = await client.workflow.getHandle(id).query(status);
  const steps = s.timeline.filter(
    (t) => (t.artifact || t.outputTail !== undefined) && (!opts.step || t.name.startsWith(opts.step)),
  );
  const entries = await Promise.all(
    steps.map(async (t) => {
      const whole = t.artifact
        ? await readFile(path.join(opts.artifactsDir, t.artifact), 'utf8').catch(() => undefined)
        : undefined;
      return { step: t.name, exitCode: t.exitCode, complete: whole !== undefined, output: whole ?? t.outputTail ?? '' };
    }),
  );
  if (opts.json) console.log(JSON.stringify(entries, null, 2));
  else {
    for (const e of entries) {
      console.log(
        `== ${e.step} (exit ${e.exitCode ?? '?'})${e.complete ? '' : ' [last lines only: the whole log is on the worker]'}`,
      );
      process.stdout.write(e.output.endsWith('\n') || !e.output ? e.output : `${e.output}\n`);
    }
  }
  if (entries.length > 0) return 0;
  console.error(`drydock: ${id} has no step output${opts.step ? ` for a step named '${opts.step}…'` : ''}`);
  return 1;
}

/** Polls until the session reaches `phase` or ends; prints finished steps on the way. */
export async function waitForPhase(
  client: Client,
  id: string,
  phase: string,
  say: (line: string) => void,
): Promise<SessionStatus> {
  const handle = client.workflow.getHandle(id);
  let printed = 0;
  for (;;) {
    const s = await handle.query(status).catch(() => undefined);
    if (s) {
      while (printed < s.timeline.length && s.timeline[printed].durationMs !== undefined) {
        say(stepLine(s.timeline[printed++]));
      }
      if (s.phase === phase || isOutcome(s.phase)) return s;
    } else if ((await handle.describe()).status.name !== 'RUNNING') {
      const final = await finalStatus(client, id);
      if (final) return final;
      throw new Error(`${id} ended without a status`);
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

export async function cancel(client: Client, id: string, json = false): Promise<void> {
  await client.workflow.getHandle(id).cancel();
  console.log(
    json
      ? JSON.stringify({ sessionId: id, cancellationRequested: true })
      : `cancellation requested for ${id}; its sandbox is being torn down`,
  );
}
