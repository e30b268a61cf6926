/**
 * agentSession: one agent session = one workflow = one disposable sandbox.
 * Deterministic code only: no Node built-ins, no env, Temporal's clock.
 */
import {
  ActivityFailure,
  allHandlersFinished,
  ApplicationFailure,
  CancellationScope,
  condition,
  ContinueAsNew,
  continueAsNew,
  isCancellation,
  log,
  patched,
  proxyActivities,
  setHandler,
  TimeoutFailure,
  upsertSearchAttributes,
  workflowInfo,
  type ActivityOptions,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { CommitResult, Sandbox, SetupPlan, StepInput, StepResult } from '../activities/types';
import { budgetStop, describeStop } from './rules/budget';
import { cliCommand, cliPrompt, feedbackMessage } from './rules/prompts';
import {
  approve,
  decide,
  ErrorType,
  PHASE_ATTRIBUTE,
  reject,
  REPO_ATTRIBUTE,
  status,
  type Action,
  type AgentCall,
  type ApprovalPolicy,
  type DecideInput,
  type Decision,
  type Outcome,
  type Phase,
  type SessionStatus,
  type StepRecord,
  type Verification,
} from './api';
import { durationMs, githubRepoOf, parseSessionInput, sizeBytes, type ScriptStep, type SessionInput } from './input';
import { sessionMetricsOf } from './rules/metrics';
import { defaultBranch, refuseDecision, tightenPolicy } from './rules/policy';
import {
  describeVerification,
  screenshotsOf,
  summarizeVerification,
  type VerificationResults,
} from './rules/verification';

const PAST = { approve: 'approved', reject: 'rejected' } as const;

/**
 * Permanent failures are thrown as non-retryable where they happen (ErrorType); the rest retry.
 * A sandbox that is gone never comes back by retrying: the session replaces it.
 */
const RETRY = { maximumAttempts: 5, nonRetryableErrorTypes: [ErrorType.SandboxNotFound] };
/** Replacements of a lost sandbox before the session gives up. */
const MAX_SANDBOX_REPLACEMENTS = 3;
/**
 * Every activity heartbeats while it runs (activities/heartbeat.ts), so a dead
 * worker is noticed within this, whatever the phase.
 */
const HEARTBEAT_TIMEOUT = '10s';

/**
 * Activities on any worker: provisioning picks the host. (A cancelled session
 * waits for an activity in flight to stop, the SDK's default cancellation
 * type, so teardown never runs before provisioning has created its container.)
 */
const anyHost = proxyActivities<Activities>({
  startToCloseTimeout: '10m',
  heartbeatTimeout: HEARTBEAT_TIMEOUT,
  retry: RETRY,
});

/**
 * Teardown gives up after 10 minutes, or when the host does not answer within
 * its host timeout (a host that is gone): the reaper removes what is left.
 */
function teardownOn(sandbox?: Sandbox): Activities {
  return proxyActivities<Activities>({
    taskQueue: sandbox?.hostQueue,
    startToCloseTimeout: '2m',
    scheduleToCloseTimeout: '10m',
    ...(sandbox?.hostTimeoutMs ? { scheduleToStartTimeout: sandbox.hostTimeoutMs } : {}),
    heartbeatTimeout: HEARTBEAT_TIMEOUT,
    retry: RETRY,
  });
}

/**
 * Activities on the host that owns the sandbox, allowed to run `startToCloseMs`.
 * A task nobody picks up within the host timeout means the host is gone (see inSandbox).
 */
function onHost(sandbox: Sandbox, startToCloseMs = 10 * 60_000): Activities {
  const options: ActivityOptions = {
    taskQueue: sandbox.hostQueue,
    startToCloseTimeout: startToCloseMs,
    ...(sandbox.hostTimeoutMs ? { scheduleToStartTimeout: sandbox.hostTimeoutMs } : {}),
    heartbeatTimeout: HEARTBEAT_TIMEOUT,
    retry: RETRY,
  };
  return proxyActivities<Activities>(options);
}

/** Why a failed sandbox activity means the sandbox is lost: it is gone, or its host stopped answering. */
function sandboxLoss(err: unknown, sandbox: Sandbox): { why: string; hostLost: boolean } | undefined {
  if (!(err instanceof ActivityFailure)) return undefined;
  const cause = err.cause;
  if (cause instanceof ApplicationFailure && cause.type === ErrorType.SandboxNotFound)
    return { why: `sandbox ${sandbox.name} is gone`, hostLost: false };
  if (cause instanceof TimeoutFailure && cause.timeoutType === 'SCHEDULE_TO_START')
    return {
      why: `host ${sandbox.host} did not pick up ${err.activityType} within ${Math.round((sandbox.hostTimeoutMs ?? 0) / 1000)}s`,
      hostLost: true,
    };
  return undefined;
}

/**
 * Where the agent phase is, carried over continue-as-new: the next run of the
 * same session resumes here, with its sandbox, status and budget as they were.
 */
export interface AgentLoop {
  /** Model calls so far. */
  turn: number;
  /** Messages of the conversation so far (in the artifact store). */
  messageCount: number;
  /** 1, then one more for each failed verification fed back. */
  round: number;
  /** When the agent phase began (ms since the epoch, workflow time). */
  startedAt: number;
  /** The last failed verification, for an agent CLI's next prompt. */
  feedback?: string;
}

export interface ContinuedSession {
  status: SessionStatus;
  sandbox: Sandbox;
  loop: AgentLoop;
  /** The first run's start: the wall-time limit counts from it. */
  sessionStartedAt: number;
}

/** Calls kept in status; the whole conversation is in the transcript artifact. */
const RECENT_CALLS = 20;

/** A session that ends with this outcome (and reason) rather than going on. */
class SessionEnd extends Error {
  constructor(
    readonly outcome: Exclude<Outcome, 'completed'>,
    message: string,
    /** A short key for the metrics' failures by cause. */
    readonly cause: string,
  ) {
    super(message);
  }
}

export async function agentSession(rawInput: unknown, continued?: ContinuedSession): Promise<SessionStatus> {
  const info = workflowInfo();
  const sessionId = info.workflowId;
  const raw = (rawInput ?? {}) as Partial<SessionInput>;
  const state: SessionStatus = continued?.status ?? {
    sessionId,
    repo: typeof raw.repo?.url === 'string' ? raw.repo.url : '',
    task: typeof raw.task === 'string' ? raw.task : '',
    phase: 'provisioning',
    startedAt: new Date(info.startTime).toISOString(),
    timeline: [],
    decisions: [],
    refusedDecisions: [],
  };
  // Until the session's policy is known nothing is pending, so every decision is refused.
  let policy: ApprovalPolicy = { required: [], approvers: [], forbidSelfApproval: false };
  const verdicts = new Map<Action, Decision>();

  setHandler(status, () => state);
  const accept = (input: DecideInput): Decision => {
    // Bound to the change on display: a later change needs a new decision.
    const decision: Decision = { ...input, change: state.pendingApproval!.change, at: new Date().toISOString() };
    state.decisions.push(decision);
    verdicts.set(input.action, decision);
    return decision;
  };
  /** Why a decision does not count; the first decision on an action is final. */
  const refusal = (input: DecideInput): string | undefined => {
    const decided = verdicts.get(input?.action);
    if (decided) return `${input.action} was already ${PAST[decided.decision]} by ${decided.by}`;
    return refuseDecision(state, policy, input);
  };
  const fromSignal = (decision: DecideInput['decision']) => (raw: unknown) => {
    // Signals are fire-and-forget from any client: anything malformed is recorded, never thrown.
    const input = { ...(raw !== null && typeof raw === 'object' ? raw : {}), decision } as DecideInput;
    const reason = refusal(input);
    if (reason) {
      log.warn('decision refused', { reason });
      state.refusedDecisions.push({ input, reason, at: new Date().toISOString() });
    } else {
      accept(input);
    }
  };
  setHandler(approve, fromSignal('approve'));
  setHandler(reject, fromSignal('reject'));
  setHandler(decide, accept, {
    validator: (input) => {
      const reason = refusal(input);
      if (reason) throw new Error(reason);
    },
  });

  const setPhase = (phase: Phase) => {
    state.phase = phase;
    upsertSearchAttributes(
      state.repo
        ? [
            { key: PHASE_ATTRIBUTE, value: phase },
            { key: REPO_ATTRIBUTE, value: state.repo },
          ]
        : [{ key: PHASE_ATTRIBUTE, value: phase }],
    );
  };
  setPhase(continued ? state.phase : 'provisioning');

  /** Fails the session at once, before any sandbox exists, naming each bad field. */
  function invalid(problems: string[]): never {
    state.error = `invalid input: ${problems.join('; ')}`;
    setPhase('failed');
    throw ApplicationFailure.nonRetryable(state.error, ErrorType.InvalidSessionInput, { problems });
  }
  const parsed = parseSessionInput(rawInput);
  if (!parsed.ok) invalid(parsed.problems);
  const input = parsed.input;
  state.requestedBy = input.requestedBy;
  // Sessions recorded before the audit trail existed have none of its activities.
  const audited = patched('audit-trail');
  const sessionPolicy = {
    required: input.approval.required,
    approvers: input.approval.approvers,
    forbidSelfApproval: input.approval.forbidSelfApproval,
  };
  // Sessions started before the server policy existed used their own approval.required
  // as given, with ["push"] when it was absent. A continued session keeps the policy it had.
  const tightened = continued?.status.policy
    ? ({ ok: true, policy: continued.status.policy } as const)
    : patched('server-approval-policy')
      ? tightenPolicy(await anyHost.approvalPolicy(), sessionPolicy)
      : ({ ok: true, policy: { ...sessionPolicy, required: raw.approval?.required ?? ['push'] } } as const);
  if (!tightened.ok) invalid([tightened.problem]);
  policy = state.policy = tightened.policy;
  const branch = input.publish.branch ?? defaultBranch(sessionId);
  state.branch = branch;

  /** Runs one timeline entry: its duration, and whether it ended well. */
  async function track<T>(name: string, fn: (record: StepRecord) => Promise<T>): Promise<T> {
    const record: StepRecord = { name, phase: state.phase, startedAt: new Date().toISOString() };
    state.timeline.push(record);
    const started = Date.now();
    try {
      const result = await fn(record);
      record.ok ??= true;
      return result;
    } catch (err) {
      record.ok = false;
      throw err;
    } finally {
      record.durationMs = Date.now() - started;
    }
  }

  function recordStep(record: StepRecord, result: StepResult): void {
    record.exitCode = result.exitCode;
    record.outputTail = result.outputTail;
    record.artifact = result.artifact;
    if (result.failure) record.failure = result.failure;
    record.ok = result.exitCode === 0 && !result.failure;
  }

  let sandbox: Sandbox | undefined = continued?.sandbox;
  /** Which sandbox holds the change's commit (a replacement must make it again). */
  let committedIn: string | undefined;
  /** Fixed at a round's first commit, so that the same tree committed again is the same commit. */
  let commitDate: string | undefined;
  let outcome: Outcome = 'completed';
  let cancellation: unknown;
  /** Set when this run hands over to the next one: then nothing is torn down. */
  let handover: ContinueAsNew | undefined;
  const wallTimeMs = durationMs(input.limits.wallTime);
  const sessionStartedAt = continued?.sessionStartedAt ?? info.startTime.getTime();
  const loop: AgentLoop = continued?.loop ?? { turn: 0, messageCount: 0, round: 1, startedAt: 0 };
  try {
    // Provisioning, agent and verification run under the session's wall-time limit
    // (counted from the session's first run).
    const work = new CancellationScope({
      cancellable: true,
      timeout: continued ? Math.max(1, wallTimeMs - (Date.now() - sessionStartedAt)) : wallTimeMs,
    });
    const change = await work.run(async () => {
      if (continued) {
        state.agent!.runs = (state.agent!.runs ?? 1) + 1;
        return agentRounds();
      }
      sandbox = await track('provision', async (record) => {
        const created = await anyHost.provisionSandbox({
          sessionId,
          repo: input.repo,
          limits: sandboxLimits(),
          expiresAt: new Date(Date.now() + sandboxLifetimeMs()).toISOString(),
        });
        record.detail = `${created.name} on ${created.host} at ${created.baseCommit.slice(0, 12)}`;
        return created;
      });
      showSandbox(sandbox);
      if (sandbox.snapshot) state.snapshot = sandbox.snapshot;
      // Histories from before snapshots never had a setup plan; the marker keeps them replaying.
      if (sandbox.setup && patched('snapshot-setup')) await runSetup(sandbox.setup);

      setPhase('agent');
      loop.startedAt = Date.now();
      const { kind } = input.agent;
      state.agent =
        kind === 'script'
          ? { steps: input.agent.steps.length }
          : {
              kind,
              steps: 0,
              round: 1,
              runs: 1,
              ...(kind === 'openai'
                ? {
                    model: input.agent.model,
                    turn: 0,
                    usage: { promptTokens: 0, completionTokens: 0, totalTokens: 0 },
                    costUsd: 0,
                    calls: [],
                  }
                : {}),
            };
      return agentRounds();
    });

    if (!change.changed) {
      log.info('the agent changed nothing; nothing to publish');
    } else {
      await gate('push', change);
      state.pushed = await track(`push ${branch}`, () =>
        inSandbox(async (sb) => {
          // A replacement sandbox has the change from the checkpoint, not yet as a commit.
          const commit = committedIn === sb.name ? change.commit : (await commitChange(sb)).commit;
          return onHost(sb).pushBranch({
            sandbox: sb.name,
            sessionId,
            repoUrl: input.repo.url,
            branch,
            baseCommit: sb.baseCommit,
            commit,
          });
        }),
      );
      const pr = input.publish.pullRequest;
      if (pr) {
        await gate('pull_request', change);
        const spec = pr === true ? { draft: false } : pr;
        state.pullRequest = await track('pull request', async (record) => {
          const opened = await anyHost.openPullRequest({
            sessionId,
            repo: spec.repo ?? githubRepoOf(input.repo.url)!,
            head: branch,
            base: spec.base,
            draft: spec.draft,
            title: `drydock: ${input.task.split('\n')[0]}`.slice(0, 120),
            body: pullRequestBody(input.task, state, change),
          });
          record.detail = `${opened.created ? 'opened' : 'updated'} ${opened.url}`;
          return opened;
        });
      }
      if (input.publish.deploy) {
        await gate('deploy', change);
        state.deployed = await track('deploy', () =>
          anyHost.deploy({ sessionId, repoUrl: input.repo.url, branch, commit: change.commit }),
        );
      }
    }
  } catch (err) {
    if (err instanceof ContinueAsNew) {
      handover = err;
      throw err;
    }
    outcome = classify(err);
    state.error = describeError(err);
    state.failureCause = causeOf(err);
    cancellation = err;
    if (outcome === 'cancelled' && !CancellationScope.current().consideredCancelled) {
      // Only our own wall-time scope was cancelled, not the session.
      outcome = 'timed_out';
      state.error = `wall-time limit of ${input.limits.wallTime} reached`;
      state.failureCause = 'wall_time';
    }
    log.warn('session ending early', { outcome, error: state.error });
  } finally {
    state.pendingApproval = undefined;
    // A hand-over to the next run keeps the sandbox: the session goes on there.
    if (!handover)
      await CancellationScope.nonCancellable(async () => {
        setPhase('tearing_down');
        // Without a sandbox, provisioning may still have created the container
        // before failing: any worker removes it by its name.
        const teardown = teardownOn(sandbox);
        try {
          await track('teardown', () =>
            teardown.destroySandbox(
              sandbox?.generation ? { sessionId, generation: sandbox.generation } : { sessionId },
            ),
          );
        } catch (err) {
          // The reaper removes what is left; the session still ends with its outcome.
          log.error('teardown failed', { error: describeError(err) });
        }
        setPhase(outcome);
        if (audited) {
          try {
            await anyHost.recordSessionMetrics(sessionMetricsOf(state, new Date().toISOString()));
          } catch (err) {
            log.error('metrics not recorded', { error: describeError(err) });
          }
        }
      });
  }
  if (outcome === 'cancelled') throw cancellation; // marks the workflow Canceled
  if (outcome === 'failed')
    throw ApplicationFailure.nonRetryable(state.error ?? 'failed', ErrorType.SessionFailed, state);
  return state;

  function sandboxLimits() {
    return {
      cpus: input.limits.cpus,
      memoryBytes: sizeBytes(input.limits.memory),
      pids: input.limits.pids,
      tmpBytes: sizeBytes(input.limits.tmp),
    };
  }

  /** A sandbox lives through the session's work and its approval wait, plus an hour; then the reaper may take it. */
  function sandboxLifetimeMs(): number {
    return wallTimeMs + durationMs(input.approval.timeout) + 60 * 60_000;
  }

  function showSandbox(sb: Sandbox): void {
    state.sandbox = { name: sb.name, host: sb.host, image: sb.image, baseCommit: sb.baseCommit };
  }

  /**
   * Runs `fn` against the session's sandbox. If the sandbox is lost (its
   * container died, or its host stopped answering), replaces it from the last
   * checkpoint, on whichever host picks up the provisioning, and runs `fn`
   * again there: the step that was cut off runs again, the ones before it
   * are in the checkpoint.
   */
  async function inSandbox<T>(fn: (sb: Sandbox) => Promise<T>): Promise<T> {
    for (;;) {
      const used = sandbox!;
      try {
        return await fn(used);
      } catch (err) {
        const loss = sandboxLoss(err, used);
        // Histories from before replacements ended the session here.
        if (!loss || !patched('sandbox-replacement')) throw err;
        await replaceSandbox(used, loss);
      }
    }
  }

  async function replaceSandbox(lost: Sandbox, loss: { why: string; hostLost: boolean }): Promise<void> {
    const generation = (state.restarts ?? 0) + 1;
    if (generation > MAX_SANDBOX_REPLACEMENTS) {
      throw new SessionEnd(
        'failed',
        `${loss.why}, and the sandbox was already replaced ${MAX_SANDBOX_REPLACEMENTS} times`,
        'sandbox_lost',
      );
    }
    state.restarts = generation;
    log.warn('replacing a lost sandbox', { why: loss.why, generation });
    await track(`re-provision: ${loss.why}`, async (record) => {
      // A live host removes the dead container now; a lost host's leftovers are its reaper's.
      if (!loss.hostLost) {
        try {
          await teardownOn(lost).destroySandbox({ sessionId, generation: lost.generation, replaced: true });
        } catch (err) {
          log.warn('the lost sandbox was not removed', { error: describeError(err) });
        }
      }
      sandbox = await anyHost.provisionSandbox({
        sessionId,
        repo: { url: input.repo.url, ref: lost.baseCommit },
        limits: sandboxLimits(),
        expiresAt: new Date(Date.now() + sandboxLifetimeMs()).toISOString(),
        generation,
      });
      record.detail =
        `${sandbox.name} on ${sandbox.host}, ` +
        (sandbox.restored ? `from the checkpoint after ${sandbox.restored.step}` : 'no checkpoint yet');
    });
    showSandbox(sandbox!);
    if (sandbox!.setup) await runSetup(sandbox!.setup);
  }

  async function commitChange(sb: Sandbox): Promise<CommitResult> {
    commitDate ??= new Date().toISOString();
    const result = await onHost(sb).commitChanges({
      sandbox: sb.name,
      sessionId,
      repoUrl: input.repo.url,
      branch,
      message: `drydock: ${input.task}`.slice(0, 500),
      baseCommit: sb.baseCommit,
      date: commitDate,
    });
    committedIn = sb.name;
    return result;
  }

  /**
   * The agent's rounds: the agent works, its change is committed and verified;
   * a failed verification goes back to a model-driven agent up to
   * verify.maxRounds times. Returns the change that passed (or was not verified).
   */
  async function agentRounds(): Promise<CommitResult> {
    const { kind } = input.agent;
    for (;;) {
      if (kind === 'script') {
        for (const [i, step] of input.agent.steps.entries()) {
          await runScriptStep(`step-${i + 1}`, `step ${i + 1}: ${describeStep(step)}`, step, true, true);
        }
      } else {
        await (kind === 'openai' ? modelAgent() : cliAgent());
        const reason = state.agent!.stopReason!;
        if (reason !== 'done') {
          await track('agent stopped', async (record) => {
            record.detail = describeStop(reason, input.agent.budget);
          });
          if (input.agent.budget.onExceeded === 'fail') {
            throw new SessionEnd(
              'failed',
              `agent stopped: ${describeStop(reason, input.agent.budget)}`,
              `budget_${reason}`,
            );
          }
        }
      }
      commitDate = undefined; // a new round's commit is a new commit
      const commit = await track('commit', async (record) => {
        const result = await inSandbox(commitChange);
        record.detail = result.changed ? `${result.commit.slice(0, 12)} on ${branch}` : 'no changes';
        return result;
      });
      Object.assign(state.agent!, commit);
      if (!(input.verify.test || input.verify.browser)) return commit;

      setPhase('verifying');
      state.verification = await verify(loop.round);
      state.verificationRounds = loop.round;
      if (audited) {
        const { passed, summary, command, exitCode, report } = state.verification;
        await anyHost.recordAudit({
          sessionId,
          key: `verification-${loop.round}`,
          kind: 'verification',
          actor: 'drydock',
          data: { passed, summary, command, exitCode, tests: report && { total: report.total, failed: report.failed } },
        });
      }
      if (state.verification.passed) return commit;
      const failure = `verification failed: ${state.verification.summary.split('\n').join('; ')}`;
      // Only an agent that finished on its own gets another round (a budget stays spent).
      if (kind === 'script' || state.agent!.stopReason !== 'done' || loop.round > input.verify.maxRounds) {
        throw new SessionEnd('failed', failure, 'verification_failed');
      }
      const feedback = feedbackMessage(state.verification, loop.round, input.verify.maxRounds);
      loop.round++;
      state.agent!.round = loop.round;
      state.agent!.stopReason = undefined;
      setPhase('agent');
      await track(`feedback: round ${loop.round}`, async (record) => {
        record.detail = failure.slice(0, 200);
        if (kind === 'openai') {
          await inSandbox((sb) =>
            onHost(sb).addAgentMessage({ sessionId, index: loop.messageCount, content: feedback }),
          );
          loop.messageCount++;
        } else {
          loop.feedback = feedback;
        }
      });
    }
  }

  /** Ends the agent's work when a budget is spent; true if one is. */
  function budgetSpent(): boolean {
    const progress = state.agent!;
    const reason = budgetStop(input.agent.budget, {
      turns: loop.turn,
      tokens: progress.usage?.totalTokens ?? 0,
      costUsd: progress.costUsd ?? 0,
      elapsedMs: Date.now() - loop.startedAt,
    });
    if (reason) progress.stopReason = reason;
    return reason !== undefined;
  }

  /**
   * The built-in tool loop: each model call and each tool call is an
   * activity, so a crash resumes after the last completed one without paying
   * for a model call twice. Continues as new every agent.continueAsNewEvery
   * turns (or when Temporal suggests it) to keep each run's history small.
   */
  async function modelAgent(): Promise<void> {
    const agent = input.agent;
    const progress = state.agent!;
    if (loop.messageCount === 0) {
      const started = await track('agent: start', async (record) => {
        const result = await inSandbox((sb) =>
          onHost(sb).startModelAgent({
            sandbox: sb.name,
            sessionId,
            task: input.task,
            verifyCommand: input.verify.test,
          }),
        );
        record.detail = result.instructions ? 'with AGENTS.md' : 'no AGENTS.md';
        return result;
      });
      loop.messageCount = started.messageCount;
      progress.instructions = started.instructions;
    }
    const runTimeoutMs = durationMs(agent.runTimeout);
    for (let turnsThisRun = 0; ; turnsThisRun++) {
      if (budgetSpent()) return;
      if (turnsThisRun >= agent.continueAsNewEvery || workflowInfo().continueAsNewSuggested) {
        await condition(allHandlersFinished);
        const carry: ContinuedSession = { status: state, sandbox: sandbox!, loop, sessionStartedAt };
        await continueAsNew<typeof agentSession>(rawInput, carry);
      }
      loop.turn++;
      const finished = await track(`turn ${loop.turn}`, async (record) => {
        const answer = await inSandbox((sb) =>
          onHost(sb).modelCall({
            sandbox: sb.name,
            sessionId,
            baseUrl: agent.baseUrl,
            model: agent.model!,
            temperature: agent.temperature,
            turn: loop.turn,
            messageCount: loop.messageCount,
            requirePrice: agent.budget.maxCost !== undefined,
          }),
        );
        const assistantIndex = loop.messageCount++;
        progress.turn = loop.turn;
        progress.usage = {
          promptTokens: progress.usage!.promptTokens + answer.call.promptTokens,
          completionTokens: progress.usage!.completionTokens + answer.call.completionTokens,
          totalTokens: progress.usage!.totalTokens + answer.call.totalTokens,
        };
        progress.costUsd = (progress.costUsd ?? 0) + (answer.call.costUsd ?? 0);
        progress.transcript = answer.transcript;
        remember(answer.call);
        for (const [callIndex, call] of answer.toolCalls.entries()) {
          progress.lastTool = call.summary;
          const result = await inSandbox((sb) =>
            onHost(sb, runTimeoutMs + 60_000).runTool({
              sandbox: sb.name,
              sessionId,
              turn: loop.turn,
              assistantIndex,
              callIndex,
              index: loop.messageCount,
              outputLimit: agent.toolOutputLimit,
              runTimeoutMs,
              checkpointBase: sb.baseCommit,
            }),
          );
          loop.messageCount++;
          progress.steps++;
          remember(result);
        }
        record.detail = `${answer.toolCalls.map((c) => c.summary).join(', ') || 'answered'}; ${answer.call.totalTokens} tokens`;
        if (answer.toolCalls.length === 0) progress.summary = answer.content;
        return answer.toolCalls.length === 0;
      });
      if (finished) {
        progress.stopReason = 'done';
        return;
      }
    }
  }

  function remember(call: AgentCall): void {
    state.agent!.calls = [...(state.agent!.calls ?? []), call].slice(-RECENT_CALLS);
  }

  /**
   * An agent CLI from the sandbox image, once per round, with the prompt as
   * one literal argument. It may reach only agent.egress, through the proxy.
   */
  async function cliAgent(): Promise<void> {
    const agent = input.agent;
    const progress = state.agent!;
    if (budgetSpent()) return;
    const limitMs = durationMs(agent.budget.maxWallTime) - (Date.now() - loop.startedAt);
    const command = cliCommand(agent.command!, cliPrompt(input.task, input.verify.test, loop.feedback));
    const program = typeof agent.command === 'string' ? agent.command : agent.command![0];
    const result = await track(`agent: ${program} (round ${loop.round})`, async (record) => {
      const run = await inSandbox((sb) =>
        onHost(sb, limitMs + 60_000).runStep({
          sandbox: sb.name,
          sessionId,
          key: `agent-cli-${loop.round}`,
          step: { run: command, timeout: limitMs },
          timeoutMs: limitMs,
          egress: agent.egress,
          secrets: agent.secrets,
          checkpointBase: sb.baseCommit,
        }),
      );
      recordStep(record, run);
      return run;
    });
    progress.steps++;
    progress.transcript = result.artifact;
    progress.summary = result.outputTail.slice(-1000);
    if (result.timedOut) {
      progress.stopReason = 'max_wall_time';
      return;
    }
    if (result.exitCode !== 0)
      throw new SessionEnd('failed', `agent CLI ${program} ${exitText(result, input.limits, limitMs)}`, 'agent_failed');
    progress.stopReason = 'done';
  }

  /** The repo's tests (exit code and JUnit report) and the browser checks, with the evidence. */
  async function verify(round: number): Promise<Verification> {
    const results: VerificationResults = {};
    const { test, browser } = input.verify;
    // Each round's verification is its own step (a step runs once per key).
    const key = round === 1 ? 'verify' : `verify-${round}`;
    if (test) {
      const run = await runScriptStep(
        key,
        round === 1 ? `verify: ${test}` : `verify: ${test} (round ${round})`,
        { run: test, timeout: input.verify.timeout },
        false,
      );
      Object.assign(results, {
        command: test,
        exitCode: run.exitCode,
        timedOut: run.timedOut,
        outputTail: run.outputTail,
        artifact: run.artifact,
      });
      // Histories recorded before JUnit reports were read have no such activity.
      if (patched('junit-report')) {
        results.report = await inSandbox((sb) =>
          onHost(sb).readTestReport({
            sandbox: sb.name,
            sessionId,
            stepKey: key,
            files: input.verify.junit,
          }),
        );
      }
    }
    if (browser) {
      const readyTimeoutMs = durationMs(browser.readyTimeout);
      results.browser = await track(`browser: ${browser.url}`, async (record) => {
        const result = await inSandbox((sb) =>
          onHost(sb, readyTimeoutMs + 10 * 60_000).verifyInBrowser({
            sandbox: sb.name,
            sessionId,
            browser,
            readyTimeoutMs,
          }),
        );
        record.ok = result.outcome === 'passed';
        record.detail = `${result.outcome}, ${result.checks.filter((c) => c.ok).length}/${result.checks.length} checks`;
        return result;
      });
    }
    return { ...results, ...summarizeVerification(results, browser?.start) };
  }

  /**
   * Setup in the session (cold path, or its inputs changed since the
   * snapshot): the repo's registries through the egress proxy for this step
   * only, unless the session forbids it.
   */
  async function runSetup(setup: SetupPlan): Promise<void> {
    const name = `setup (${setup.reason})`;
    if (setup.egress.length > 0 && !input.limits.setupEgress) {
      await track(name, async (record) => {
        record.ok = false;
        record.detail = 'refused: limits.setupEgress is false';
      });
      throw new SessionEnd(
        'failed',
        `setup must run (${setup.reason}) and reach ${setup.egress.map((r) => r.host).join(', ')} through the egress proxy, ` +
          'but this session forbids it (limits.setupEgress: false)',
        'setup_egress_forbidden',
      );
    }
    await track(name, async (record) => {
      const result = await inSandbox((sb) => {
        const step: StepInput & { egress: SetupPlan['egress'] } = {
          sandbox: sb.name,
          sessionId,
          key: 'setup',
          step: { run: setup.command, timeout: setup.timeoutMs },
          timeoutMs: setup.timeoutMs,
          egress: setup.egress,
        };
        return onHost(sb, setup.timeoutMs + 60_000).runStep(step);
      });
      recordStep(record, result);
      if (result.exitCode !== 0 || result.failure) {
        throw new SessionEnd('failed', `${name} ${exitText(result, input.limits, setup.timeoutMs)}`, 'setup_failed');
      }
    });
  }

  /** One script step; an agent's step (`checkpoint`) leaves the session's new checkpoint behind. */
  async function runScriptStep(
    key: string,
    name: string,
    step: ScriptStep,
    failOnExit: boolean,
    checkpoint = false,
  ): Promise<StepResult> {
    const timeoutMs = 'run' in step ? durationMs(step.timeout) : 60_000;
    return track(name, async (record) => {
      const result = await inSandbox((sb) =>
        onHost(sb, timeoutMs + 60_000).runStep({
          sandbox: sb.name,
          sessionId,
          key,
          step,
          timeoutMs,
          ...(checkpoint ? { checkpointBase: sb.baseCommit } : {}),
        }),
      );
      recordStep(record, result);
      if (failOnExit && (result.exitCode !== 0 || result.failure)) {
        throw new SessionEnd(
          'failed',
          `${name} ${exitText(result, input.limits, timeoutMs)}`,
          result.failure ? `sandbox_${result.failure}` : 'step_failed',
        );
      }
      return result;
    });
  }

  /**
   * The approval gate of one irreversible action. Required by policy: wait for
   * a decision on this change (or the timeout); then the action may run only
   * if the approval is for exactly this change.
   */
  async function gate(action: Action, change: CommitResult): Promise<void> {
    if (!policy.required.includes(action)) {
      await track(`approval: ${action}`, async (record) => {
        record.detail = 'not required by policy';
      });
      setPhase('publishing');
      return;
    }
    setPhase('awaiting_approval');
    const timeoutMs = durationMs(input.approval.timeout);
    state.pendingApproval = {
      action,
      change: change.changeHash,
      approvers: policy.approvers,
      deadline: new Date(Date.now() + timeoutMs).toISOString(),
      evidence: {
        branch,
        commit: change.commit,
        diffstat: change.diffstat,
        tests: describeVerification(state.verification),
        screenshots: screenshotsOf(state.verification),
      },
    };
    const decided = await track(`approval: ${action}`, async (record) => {
      const got = await condition(() => verdicts.has(action), timeoutMs);
      const verdict = verdicts.get(action);
      record.detail = verdict
        ? `${PAST[verdict.decision]} by ${verdict.by}`
        : `no decision within ${input.approval.timeout}`;
      record.ok = verdict?.decision === 'approve';
      return got;
    });
    state.pendingApproval = undefined;
    const verdict = verdicts.get(action);
    if (audited && verdict) {
      await anyHost.recordAudit({
        sessionId,
        key: `approval/${action}`,
        kind: 'approval',
        actor: verdict.by,
        at: verdict.at,
        data: { action, decision: verdict.decision, change: verdict.change, comment: verdict.comment },
      });
    }
    if (!decided || !verdict) {
      throw new SessionEnd(
        'timed_out',
        `no approval for ${action} within ${input.approval.timeout}`,
        'approval_timeout',
      );
    }
    if (verdict.decision === 'reject') {
      throw new SessionEnd(
        'rejected',
        `${action} rejected by ${verdict.by}${verdict.comment ? `: ${verdict.comment}` : ''}`,
        'rejected',
      );
    }
    if (verdict.change !== change.changeHash) {
      throw new SessionEnd(
        'failed',
        `stale approval of ${action}: the change moved after ${verdict.by} approved it`,
        'stale_approval',
      );
    }
    setPhase('publishing');
  }
}

/** The pull request's description: what was asked, what changed, how it was checked, who approved. */
function pullRequestBody(task: string, state: SessionStatus, change: CommitResult): string {
  const approvals = state.decisions.map((d) => `- ${d.action}: ${PAST[d.decision]} by ${d.by} at ${d.at}`);
  const screenshots = screenshotsOf(state.verification).map((ref) => `- screenshot: \`${ref}\` (artifact store)`);
  return [
    '## Task',
    task,
    '',
    '## Change',
    '```',
    change.diffstat || '(no diffstat)',
    '```',
    `Commit \`${change.commit}\` on \`${state.branch}\`, change ${change.changeHash.slice(0, 12)}.`,
    '',
    '## Verification',
    describeVerification(state.verification),
    ...screenshots,
    '',
    '## Approvals',
    ...(approvals.length ? approvals : ['- none required by policy']),
  ].join('\n');
}

function describeStep(step: ScriptStep): string {
  const text = 'run' in step ? step.run : 'write' in step ? `write ${step.write.path}` : 'apply patch';
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

/** How a step ended, in words; a sandbox limit that stopped it is named with its value. */
function exitText(result: StepResult, limits: SessionInput['limits'], timeoutMs: number): string {
  switch (result.failure) {
    case 'oom':
      return `ran out of memory (limit ${limits.memory})`;
    case 'pids':
      return `hit the process limit (pids limit ${limits.pids})`;
    case 'disk_full':
      return `filled the disk (No space left on device; /tmp is limited to ${limits.tmp})`;
    case 'timeout':
      return `timed out (limit ${Math.round(timeoutMs / 1000)}s)`;
  }
  return result.timedOut ? 'timed out' : `exited with ${result.exitCode}`;
}

function classify(err: unknown): Exclude<Outcome, 'completed'> {
  if (err instanceof SessionEnd) return err.outcome;
  if (isCancellation(err)) return 'cancelled';
  return 'failed';
}

function causeOf(err: unknown): string {
  if (err instanceof SessionEnd) return err.cause;
  if (isCancellation(err)) return 'cancelled';
  if (err instanceof ActivityFailure) {
    const type = (err.cause as ApplicationFailure | undefined)?.type;
    return type ?? err.activityType;
  }
  return 'error';
}

function describeError(err: unknown): string {
  if (err instanceof SessionEnd) return err.message;
  if (isCancellation(err)) return 'cancelled';
  if (err instanceof ActivityFailure && err.cause) return `${err.activityType}: ${err.cause.message}`;
  return err instanceof Error ? err.message : String(err);
}
