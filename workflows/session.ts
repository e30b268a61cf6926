/**
 * agentSession: one agent session = one workflow = one disposable sandbox.
 * Deterministic code only: no Node built-ins, no env, Temporal's clock.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  condition,
  isCancellation,
  log,
  patched,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
  type ActivityOptions,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { CommitResult, Sandbox, SetupPlan, StepInput, StepResult } from '../activities/sandbox';
import {
  approve,
  decide,
  ErrorType,
  PHASE_ATTRIBUTE,
  reject,
  REPO_ATTRIBUTE,
  status,
  type Action,
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
import { defaultBranch, refuseDecision, tightenPolicy } from './policy';
import { describeVerification, screenshotsOf, summarizeVerification, type VerificationResults } from './verification';

const PAST = { approve: 'approved', reject: 'rejected' } as const;

/** Permanent failures are thrown as non-retryable where they happen (ErrorType); the rest retry. */
const RETRY = { maximumAttempts: 5 };
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

/** Teardown gives up after 10 minutes (a host that is gone): the reaper removes what is left. */
function teardownOn(taskQueue?: string): Activities {
  return proxyActivities<Activities>({
    taskQueue,
    startToCloseTimeout: '2m',
    scheduleToCloseTimeout: '10m',
    heartbeatTimeout: HEARTBEAT_TIMEOUT,
    retry: RETRY,
  });
}

/** Activities on the host that owns the sandbox, allowed to run `startToCloseMs`. */
function onHost(sandbox: Sandbox, startToCloseMs = 10 * 60_000): Activities {
  const options: ActivityOptions = {
    taskQueue: sandbox.hostQueue,
    startToCloseTimeout: startToCloseMs,
    heartbeatTimeout: HEARTBEAT_TIMEOUT,
    retry: RETRY,
  };
  return proxyActivities<Activities>(options);
}

/** A session that ends with this outcome (and reason) rather than going on. */
class SessionEnd extends Error {
  constructor(
    readonly outcome: Exclude<Outcome, 'completed'>,
    message: string,
  ) {
    super(message);
  }
}

export async function agentSession(rawInput: unknown): Promise<SessionStatus> {
  const info = workflowInfo();
  const sessionId = info.workflowId;
  const raw = (rawInput ?? {}) as Partial<SessionInput>;
  const state: SessionStatus = {
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
  setPhase('provisioning');

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
  const sessionPolicy = {
    required: input.approval.required,
    approvers: input.approval.approvers,
    forbidSelfApproval: input.approval.forbidSelfApproval,
  };
  // Sessions started before the server policy existed used their own approval.required
  // as given, with ["push"] when it was absent.
  const tightened = patched('server-approval-policy')
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
    record.ok = result.exitCode === 0;
  }

  let sandbox: Sandbox | undefined;
  let outcome: Outcome = 'completed';
  let cancellation: unknown;
  const wallTimeMs = durationMs(input.limits.wallTime);
  try {
    // Provisioning, agent and verification run under the session's wall-time limit.
    const work = new CancellationScope({ cancellable: true, timeout: wallTimeMs });
    const change = await work.run(async () => {
      sandbox = await track('provision', async (record) => {
        const expiresAt = new Date(
          Date.now() + wallTimeMs + durationMs(input.approval.timeout) + 60 * 60_000,
        ).toISOString();
        const created = await anyHost.provisionSandbox({
          sessionId,
          repo: input.repo,
          limits: { cpus: input.limits.cpus, memoryBytes: sizeBytes(input.limits.memory), pids: input.limits.pids },
          expiresAt,
        });
        record.detail = `${created.name} on ${created.host} at ${created.baseCommit.slice(0, 12)}`;
        return created;
      });
      state.sandbox = { name: sandbox.name, host: sandbox.host, image: sandbox.image, baseCommit: sandbox.baseCommit };
      if (sandbox.snapshot) state.snapshot = sandbox.snapshot;
      // Histories from before snapshots never had a setup plan; the marker keeps them replaying.
      if (sandbox.setup && patched('snapshot-setup')) await runSetup(sandbox, sandbox.setup);

      setPhase('agent');
      const steps = input.agent.steps;
      state.agent = { steps: steps.length };
      for (const [i, step] of steps.entries()) {
        await runScriptStep(sandbox, `step-${i + 1}`, `step ${i + 1}: ${describeStep(step)}`, step);
      }
      const commit = await track('commit', async (record) => {
        const result = await onHost(sandbox!).commitChanges({
          sandbox: sandbox!.name,
          repoUrl: input.repo.url,
          branch,
          message: `drydock: ${input.task}`.slice(0, 500),
          baseCommit: sandbox!.baseCommit,
        });
        record.detail = result.changed ? `${result.commit.slice(0, 12)} on ${branch}` : 'no changes';
        return result;
      });
      Object.assign(state.agent, commit);

      if (input.verify.test || input.verify.browser) {
        setPhase('verifying');
        state.verification = await verify(sandbox);
        if (!state.verification.passed) {
          throw new SessionEnd('failed', `verification failed: ${state.verification.summary.split('\n').join('; ')}`);
        }
      }
      return commit;
    });

    if (!change.changed) {
      log.info('the agent changed nothing; nothing to publish');
    } else {
      await gate('push', change);
      state.pushed = await track(`push ${branch}`, () =>
        onHost(sandbox!).pushBranch({
          sandbox: sandbox!.name,
          sessionId,
          repoUrl: input.repo.url,
          branch,
          baseCommit: sandbox!.baseCommit,
          commit: change.commit,
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
    outcome = classify(err);
    state.error = describeError(err);
    cancellation = err;
    if (outcome === 'cancelled' && !CancellationScope.current().consideredCancelled) {
      // Only our own wall-time scope was cancelled, not the session.
      outcome = 'timed_out';
      state.error = `wall-time limit of ${input.limits.wallTime} reached`;
    }
    log.warn('session ending early', { outcome, error: state.error });
  } finally {
    state.pendingApproval = undefined;
    await CancellationScope.nonCancellable(async () => {
      setPhase('tearing_down');
      // Without a sandbox, provisioning may still have created the container
      // before failing: any worker removes it by its name.
      const teardown = teardownOn(sandbox?.hostQueue);
      try {
        await track('teardown', () => teardown.destroySandbox({ sessionId }));
      } catch (err) {
        // The reaper removes what is left; the session still ends with its outcome.
        log.error('teardown failed', { error: describeError(err) });
      }
      setPhase(outcome);
    });
  }
  if (outcome === 'cancelled') throw cancellation; // marks the workflow Canceled
  if (outcome === 'failed')
    throw ApplicationFailure.nonRetryable(state.error ?? 'failed', ErrorType.SessionFailed, state);
  return state;

  /** The repo's tests (exit code and JUnit report) and the browser checks, with the evidence. */
  async function verify(sandbox: Sandbox): Promise<Verification> {
    const results: VerificationResults = {};
    const { test, browser } = input.verify;
    if (test) {
      const run = await runScriptStep(
        sandbox,
        'verify',
        `verify: ${test}`,
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
        results.report = await onHost(sandbox).readTestReport({
          sandbox: sandbox.name,
          sessionId,
          stepKey: 'verify',
          files: input.verify.junit,
        });
      }
    }
    if (browser) {
      const readyTimeoutMs = durationMs(browser.readyTimeout);
      results.browser = await track(`browser: ${browser.url}`, async (record) => {
        const result = await onHost(sandbox, readyTimeoutMs + 10 * 60_000).verifyInBrowser({
          sandbox: sandbox.name,
          sessionId,
          browser,
          readyTimeoutMs,
        });
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
  async function runSetup(sandbox: Sandbox, setup: SetupPlan): Promise<void> {
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
      );
    }
    await track(name, async (record) => {
      const step: StepInput & { egress: SetupPlan['egress'] } = {
        sandbox: sandbox.name,
        sessionId,
        key: 'setup',
        step: { run: setup.command, timeout: setup.timeoutMs },
        timeoutMs: setup.timeoutMs,
        egress: setup.egress,
      };
      const result = await onHost(sandbox, setup.timeoutMs + 60_000).runStep(step);
      recordStep(record, result);
      if (result.exitCode !== 0) throw new SessionEnd('failed', `${name} ${exitText(result)}`);
    });
  }

  async function runScriptStep(
    sandbox: Sandbox,
    key: string,
    name: string,
    step: ScriptStep,
    failOnExit = true,
  ): Promise<StepResult> {
    const timeoutMs = 'run' in step ? durationMs(step.timeout) : 60_000;
    return track(name, async (record) => {
      const result = await onHost(sandbox, timeoutMs + 60_000).runStep({
        sandbox: sandbox.name,
        sessionId,
        key,
        step,
        timeoutMs,
      });
      recordStep(record, result);
      if (failOnExit && result.exitCode !== 0) {
        throw new SessionEnd('failed', `${name} ${exitText(result)}`);
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
    if (!decided) throw new SessionEnd('timed_out', `no approval for ${action} within ${input.approval.timeout}`);
    const verdict = verdicts.get(action)!;
    if (verdict.decision === 'reject') {
      throw new SessionEnd(
        'rejected',
        `${action} rejected by ${verdict.by}${verdict.comment ? `: ${verdict.comment}` : ''}`,
      );
    }
    if (verdict.change !== change.changeHash) {
      throw new SessionEnd('failed', `stale approval of ${action}: the change moved after ${verdict.by} approved it`);
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
  const text = 'run' in step ? step.run : `write ${step.write.path}`;
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

function exitText(result: StepResult): string {
  return result.timedOut ? 'timed out' : `exited with ${result.exitCode}`;
}

function classify(err: unknown): Exclude<Outcome, 'completed'> {
  if (err instanceof SessionEnd) return err.outcome;
  if (isCancellation(err)) return 'cancelled';
  return 'failed';
}

function describeError(err: unknown): string {
  if (err instanceof SessionEnd) return err.message;
  if (isCancellation(err)) return 'cancelled';
  if (err instanceof ActivityFailure && err.cause) return `${err.activityType}: ${err.cause.message}`;
  return err instanceof Error ? err.message : String(err);
}
