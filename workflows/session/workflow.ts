/**
 * agentSession: one agent session = one workflow = one disposable sandbox.
 * Reads like the architecture diagram: parse, provision, the agent works
 * until verified, gate, publish, stay open for follow-ups, always tear down.
 * Each phase lives in its own module over one run-state object (state.ts).
 * Deterministic code only.
 */
import { ApplicationFailure, ContinueAsNew, log } from '@temporalio/workflow';
import {
  ATTEMPTS_WORKFLOW_TYPE,
  ErrorType,
  WORKFLOW_TYPE,
  type Action,
  type Outcome,
  type SessionStatus,
} from '../api';
import type { SessionInput } from '../input';
import { durationMs } from '../units';
import { defaultBranch, settlePolicy } from '../rules/policy';
import { checkAcceptance } from './acceptance';
import { installChildHandlers } from './children';
import { startAgent, workUntilVerified } from './agents';
import { installHandlers } from './approval';
import { rememberNotes } from './memory';
import { endEarly, tearDown } from './outcome';
import { tellParent } from './parent';
import { anyHost } from './proxies';
import { publishRounds, stayOpen } from './rounds';
import { planning, planThenWork, writePlan } from './plan';
import { provision } from './sandbox';
import { SessionRun, type ContinuedSession } from './state';
import { startThreadReports } from './threads';
import { addTriggerContext, tellForge } from './trigger';
import { captureBefore } from './verify';

export type { AgentLoop, ContinuedSession } from './state';

export async function agentSession(rawInput: unknown, continued?: ContinuedSession): Promise<SessionStatus> {
  const run = new SessionRun(rawInput, continued);
  run.onPhaseChange(tellParent);
  installHandlers(run);
  installChildHandlers(run);
  run.setPhase(continued ? run.status.phase : 'provisioning');
  let outcome: Outcome = 'completed';
  try {
    await parse(run);
    startThreadReports(run);
    if (!continued?.parked) {
      const change = await withinWallTime(run, async () => {
        if (continued) {
          run.status.agent!.runs = (run.status.agent!.runs ?? 1) + 1;
        } else {
          await addTriggerContext(run);
          await provision(run);
          await tellForge(run, 'started');
          await captureBefore(run);
          startAgent(run);
        }
        // A plan first: the agent writes it here; the gate and the work on it follow (plan.ts).
        if (planning(run)) return writePlan(run);
        const verified = await workUntilVerified(run);
        await checkAcceptance(run, verified);
        return verified;
      });
      await publishRounds(run, change ?? (await planThenWork(run)));
    }
    await stayOpen(run, continued?.parked === true);
  } catch (err) {
    // A continue-as-new keeps the sandbox: the session goes on there.
    // An invalid input has failed already, before anything could need tearing down.
    if (err instanceof ContinueAsNew || isInvalidInput(err)) throw err;
    outcome = endEarly(run, err);
    // An attempt set aside ends as its parent asked: a result, not a cancelled workflow.
    if (outcome === 'cancelled' && !run.status.setAside) {
      await tearDown(run, outcome);
      throw err; // marks the workflow Canceled
    }
  }
  await tearDown(run, outcome);
  if (outcome === 'failed')
    throw ApplicationFailure.nonRetryable(run.status.error ?? 'failed', ErrorType.SessionFailed, run.status);
  return run.status;
}

/**
 * Validates the input, settles it against the repo's configuration (the
 * operator's limits, then the repo's file, then the input) and settles the
 * approval policy; an invalid one fails at once, naming each bad field. The
 * activity repoPolicy validates it (before it reads anything): the workflow
 * carries no schema code, which a new workflow would evaluate at every start.
 */
async function parse(run: SessionRun): Promise<void> {
  const { status, continued } = run;
  // A continued run is handed the input its first run settled (continueAsNew's first argument) and the policy.
  let input = run.rawInput as SessionInput;
  let policy = continued?.status.policy;
  if (!continued) {
    const settled = await anyHost.repoPolicy(run.rawInput);
    if (!settled.ok) invalid(run, settled.problems);
    input = settled.input;
    if (input.attempts !== undefined && input.attempts !== 1) {
      invalid(run, [
        `attempts: parallel attempts run as workflow type ${ATTEMPTS_WORKFLOW_TYPE}, not ${WORKFLOW_TYPE}`,
      ]);
    }
    run.startCommit = settled.commit;
    if (settled.mcp?.length) run.loop.mcp = { servers: settled.mcp, calls: {} };
    rememberNotes(run, settled.repo, settled.notes);
    if (settled.environment) log.info('the repo names its environment', { environment: settled.environment });
    // The server's policy, narrowed by the repo's approvers, then tightened by the session's.
    const { required, approvers, forbidSelfApproval, separateGates } = input.approval;
    const tightened = settlePolicy(settled.serverPolicy, settled.approvers, {
      required: [...required, ...decidedAnyway(input)],
      approvers,
      forbidSelfApproval,
      separateGates,
    });
    if (!tightened.ok) invalid(run, [tightened.problem]);
    policy = tightened.policy;
  }
  run.input = input;
  if (input.attemptOf) status.attemptOf = input.attemptOf.session;
  if (input.childOf) status.childOf = input.childOf.session;
  status.requestedBy = input.requestedBy;
  run.policy = status.policy = policy!;
  run.branch = status.branch = input.publish.branch ?? defaultBranch(run.sessionId);
}

/**
 * The push waits for a person whatever the policy in an attempt (the pick
 * decides it, or the pull request's approval that covers it) and in a
 * session that publishes nothing (the decision is what it is for).
 */
function decidedAnyway(input: SessionInput): Action[] {
  return input.publish.push === false || input.attemptOf ? ['push'] : [];
}

const isInvalidInput = (err: unknown) =>
  err instanceof ApplicationFailure && err.type === ErrorType.InvalidSessionInput;

/** Fails the session at once, before any sandbox exists, naming each bad field. */
function invalid(run: SessionRun, problems: string[]): never {
  run.status.error = `invalid input: ${problems.join('; ')}`;
  run.setPhase('failed');
  throw ApplicationFailure.nonRetryable(run.status.error, ErrorType.InvalidSessionInput, { problems });
}

/**
 * Provisioning, agent and verification run under the session's wall-time
 * limit, counted from its first run (a follow-up round's from the round's start).
 */
function withinWallTime<T>(run: SessionRun, fn: () => Promise<T>): Promise<T> {
  const wallTimeMs = durationMs(run.input.limits.wallTime);
  // A later round's, or a plan's or its approved work's, counts from its start (plan.ts).
  const later = (run.status.round ?? 1) > 1 || run.status.plan !== undefined;
  const since = later ? run.loop.startedAt : run.sessionStartedAt;
  const timeout = run.continued ? Math.max(1, wallTimeMs - (Date.now() - since)) : wallTimeMs;
  return run.withinWorkScope(timeout, fn);
}
