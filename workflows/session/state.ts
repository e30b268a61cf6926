/**
 * The run state of one agent session: its status (what the `status` query
 * answers), its phase and timeline, and what the phases share. One object,
 * handed to every phase module, instead of variables shared by closures; it
 * also owns what the session carries to its next run (continue-as-new).
 */
import {
  allHandlersFinished,
  CancellationScope,
  condition,
  continueAsNew,
  sleep,
  upsertMemo,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { Sandbox, SandboxPlace, StepResult } from '../../sandbox/contract';
import {
  MEMO_KEY,
  OUTCOMES,
  PHASE_ATTRIBUTE,
  REPO_ATTRIBUTE,
  type GatedAction,
  type ApprovalPolicy,
  type Decision,
  type LastKnown,
  type Phase,
  type SessionStatus,
  type StepRecord,
} from '../api';
import type { McpServer } from '../mcp-servers';
import type { ScriptStep, SessionInput } from '../input';
import { budgetStop } from '../rules/budget';
import type { Followup } from '../rules/followup';
import { redactUrl } from '../rules/repo-url';

/**
 * Where the agent phase is, carried over continue-as-new: the next run of the
 * same session resumes here, with its sandbox, status and budget as they were.
 */
export interface AgentLoop {
  /** Model calls so far. */
  turn: number;
  /** Messages of the conversation so far (in the artifact store). */
  messageCount: number;
  /** Messages before this index are compacted in the model's prompts (models/compaction.ts); grows only. */
  compactedBefore?: number;
  /** The agent's attempt at a change that passes verification: 1, then one more for each failed verification fed back. */
  attempt: number;
  /** When the agent phase began (ms since the epoch, workflow time). */
  startedAt: number;
  /** The last failed verification, for an agent CLI's next prompt. */
  feedback?: string;
  /** A follow-up round's request: an agent CLI's prompt instead of the task. */
  request?: string;
  /** A plan first: the version of the plan the agent was asked for (asked once, also across continue-as-new). */
  planAsked?: number;
  /** The approved plan, fenced, as an agent CLI's prompt carries it (the model hears it as a message). */
  plan?: string;
  /** The repo's MCP servers (the operator's declaration, no credentials) and the calls made of each. */
  mcp?: { servers: McpServer[]; calls: Record<string, number> };
  /** Repo memory: the repo the notes are kept under, and its approved notes as the agent reads them (fenced). */
  /** `taken`: what the agent proposed this round, taken with each commit, kept at the round's end (carried across continue-as-new). */
  memory?: { repo: string; notes?: string; taken?: string[] };
}

/**
 * What one run of a session hands to the next (continue-as-new): built by
 * SessionRun.carried only, read by the SessionRun constructor only.
 *
 * The rest of SessionRun is not carried because no continue-as-new happens while
 * it holds anything the next run needs. They happen between two turns of
 * the model loop and after publishing; there, `verdicts` concern no pending
 * change (each round decides anew; status.decisions keeps them), `committedIn`
 * and `commitDate` wait for the round's commit, `scriptSteps` belong to a
 * script agent (which never continues as new), `sandboxBusy` is 0,
 * `nextChangeByHand` was taken before the agent worked, `uncommittedEditsBy`
 * goes into the round's commit (made after the agent), and `startCommit`
 * served the first provisioning only. The thread reports' loop (`threadReports`,
 * `reportsClosing`, its phase listener) is each run's own: the next run's reports
 * the state it starts in, to the Slack message status.slackMessage names.
 */
export interface ContinuedSession {
  status: SessionStatus;
  /** The session's sandbox; a parked session's is torn down, and its replacement starts from it. */
  sandbox: Sandbox;
  loop: AgentLoop;
  /** The first run's start: the wall-time limit counts from it. */
  sessionStartedAt: number;
  /** Replaced sandboxes not removed yet (SessionRun.sandboxesToRemove). */
  sandboxesToRemove: SandboxPlace[];
  /** Follow-ups accepted and not worked on yet. */
  followups: Followup[];
  /** The pull request was merged or closed (SessionRun.pullRequestClosed). */
  pullRequestClosed?: PullRequestEnd;
  /** The session was published and its sandbox torn down: the next run waits for a follow-up. */
  parked?: boolean;
}

/** The agentSession workflow's signature (workflow.ts), for continueAsNew without importing the workflow here. */
type SessionWorkflow = (rawInput: unknown, continued?: ContinuedSession) => Promise<SessionStatus>;

/** How the session's pull request ended, as the pullRequestClosed signal said. */
export interface PullRequestEnd {
  merged: boolean;
  by: string;
}

export class SessionRun {
  readonly sessionId = workflowInfo().workflowId;
  readonly status: SessionStatus;
  readonly loop: AgentLoop;
  /** The first run's start (ms): the wall-time limit counts from it. */
  readonly sessionStartedAt: number;
  /** The validated input: a continued run's from its start, a new run's after parsing (its phase takes no message before). */
  input!: SessionInput;
  branch = '';
  /** The commit the session's ref named at its start (repoPolicy): its first sandbox starts there. */
  startCommit?: string;
  /** Until the session's policy is known nothing is pending, so every decision is refused. */
  policy: ApprovalPolicy = { required: [], approvers: [], forbidSelfApproval: false, separateGates: false };
  /** The first decision on each action (it is final). */
  readonly verdicts = new Map<GatedAction, Decision>();
  sandbox?: Sandbox;
  /** Sandboxes this session replaced whose removal has not succeeded yet (their host did not answer). */
  readonly sandboxesToRemove: SandboxPlace[];
  /** Which sandbox holds the change's commit (a replacement must make it again). */
  committedIn?: string;
  /** Fixed at a round's first commit, so that the same tree committed again is the same commit. */
  commitDate?: string;
  /** Follow-ups sent and not worked on yet: the next round takes them all. */
  readonly followups: Followup[];
  /** The script steps of this round: the input's, then a follow-up's. */
  scriptSteps: ScriptStep[] = [];
  /** Calls into the sandbox under way (inSandbox): a person gets in once there are none. */
  sandboxBusy = 0;
  /** The agent CLI's step (or a script's) running now: the one step whose start_child calls are taken. */
  childStep?: string;
  /** Children that step's start_child calls started that have not ended yet: the agent's round waits for them. */
  stepChildrenRunning = 0;
  /** start_child calls of that step so far, refused ones too (their audit events' numbers). */
  stepChildCalls = 0;
  /** A person started the app for its preview (startPreview): verification and the agent's steps stop it first. */
  previewStarted = false;
  /** The next change to commit is a person's (drydock attach): the agent does not work before it. */
  nextChangeByHand = false;
  /** Who edited the sandbox by hand (drydock attach) since the change was last committed. */
  uncommittedEditsBy?: string;
  /** The pull request was merged or closed: the session ends after the round under way. */
  pullRequestClosed?: PullRequestEnd;
  /** Phase changes so far: orders a parent's progress signals (parent.ts). */
  phaseChanges = 0;
  /** Who hears of every phase change (onPhaseChange): a parent's progress, the thread reports. */
  private readonly phaseListeners: ((run: SessionRun) => void)[] = [];
  /** The loop reporting to Slack or Linear, and whether it should stop once it has caught up. */
  threadReports?: Promise<void>;
  reportsClosing = false;
  /** The sandbox is being parked (sandbox.ts parkSandbox): an attach waits for it, then brings one back. */
  parking = false;
  /** A parked session's sandbox being brought back (sandbox.ts bringBack): one for every caller. */
  bringingBack?: Promise<void>;
  /** The scope of the work under way (provisioning, the agent, verification): an attempt set aside cancels it. */
  workScope?: CancellationScope;
  /** A script agent's plan steps, once a follow-up at the plan gate replaced them (a script never continues as new). */
  private amendedPlanSteps?: ScriptStep[];

  constructor(
    /** The input as given: a continued run starts from it again. */
    readonly rawInput: unknown,
    readonly continued?: ContinuedSession,
  ) {
    const info = workflowInfo();
    this.status = continued?.status ?? firstStatus(this.sessionId, rawInput, info.startTime);
    this.sandbox = continued?.sandbox;
    this.loop = continued?.loop ?? { turn: 0, messageCount: 0, attempt: 1, startedAt: 0 };
    this.sessionStartedAt = continued?.sessionStartedAt ?? info.startTime.getTime();
    this.sandboxesToRemove = [...(continued?.sandboxesToRemove ?? [])];
    this.followups = [...(continued?.followups ?? [])];
    this.pullRequestClosed = continued?.pullRequestClosed;
    // A continued run is handed the settled input and policy: a message delivered with its
    // first task reaches the handlers before the workflow function runs parse.
    if (continued) {
      this.input = rawInput as SessionInput;
      this.policy = continued.status.policy ?? this.policy;
    }
  }

  /**
   * Continues the session as a new run (continue-as-new), with the settled
   * input (the next run does not settle it again) and what `carried` gives it,
   * once the messages under way are handled.
   */
  async continueAsNew(parked = false): Promise<never> {
    await condition(allHandlersFinished);
    return continueAsNew<SessionWorkflow>(this.input, this.carried(parked));
  }

  /** Everything of this run that the next one reads (see ContinuedSession). */
  private carried(parked: boolean): ContinuedSession {
    return {
      status: this.status,
      sandbox: this.sandbox!,
      loop: this.loop,
      sessionStartedAt: this.sessionStartedAt,
      sandboxesToRemove: this.sandboxesToRemove,
      followups: this.followups,
      ...(this.pullRequestClosed ? { pullRequestClosed: this.pullRequestClosed } : {}),
      ...(parked ? { parked } : {}),
    };
  }

  /**
   * The phase, in status and in the search attributes (so lists and filters
   * see it), with the last known state in the memo (read when no worker answers).
   */
  setPhase(phase: Phase): void {
    // While a person is attached the session shows it; the phase it is in comes back at the detach.
    const attached = this.status.attached;
    const held = attached !== undefined && !ENDS_ATTACH.includes(phase);
    if (held && phase !== 'attached') attached.during = phase;
    phase = held ? 'attached' : phase;
    this.status.phase = phase;
    this.phaseChanges++;
    const repo = this.status.repo;
    upsertSearchAttributes([
      { key: PHASE_ATTRIBUTE, value: phase },
      ...(repo ? [{ key: REPO_ATTRIBUTE, value: repo }] : []),
    ]);
    upsertMemo({ [MEMO_KEY]: lastKnown(this.status) });
    for (const listener of this.phaseListeners) listener(this);
  }

  /** Calls `listener` after each phase change from now on: the one way phase changes are observed. */
  onPhaseChange(listener: (run: SessionRun) => void): void {
    this.phaseListeners.push(listener);
  }

  /**
   * Runs `fn` as the work under way (`workScope`), cancelled after `timeoutMs`. Not the SDK's
   * `CancellationScope({ timeout })`, which cancels its timer at the end only under an SDK flag
   * that a replay learns from the workflow task that recorded it: when the work ended with a local
   * activity whose marker a heartbeating workflow task carried, a replay resolved it a task before
   * the flag's, left the timer running and failed with a nondeterminism (session 27,
   * test/workflow/replay-flags.test.ts). This timer is cancelled whatever the flags say.
   */
  withinWorkScope<T>(timeoutMs: number, fn: () => Promise<T>): Promise<T> {
    const scope = (this.workScope = new CancellationScope({ cancellable: true }));
    return scope.run(async () => {
      const timer = new CancellationScope();
      timer
        .run(() => sleep(timeoutMs))
        .then(
          () => scope.cancel(),
          () => undefined, // cancelled: the work ended first
        );
      try {
        return await fn();
      } finally {
        timer.cancel();
      }
    });
  }

  /** Waits while someone is attached (attach.ts): nothing runs in the sandbox under their hands. */
  async whenDetached(): Promise<void> {
    if (this.status.attached) await condition(() => this.status.attached === undefined);
  }

  /** What a step's egress proxy and model gateway refused, added to the session's count. */
  countRefusals(result: StepResult): void {
    const refused = (result.egress?.refused ?? 0) + (result.gateway?.refused ?? 0);
    if (refused === 0) return;
    const refusals = (this.status.refusals ??= { egress: 0, budget: 0 });
    refusals.egress += refused;
  }

  /** Prefixes the keys of a follow-up round's steps and audit events (a key runs, or is recorded, once). */
  get keyPrefix(): string {
    const round = this.status.round ?? 1;
    return round > 1 ? `r${round}-` : '';
  }

  /** Runs one timeline entry: its duration, and whether it ended well. */
  async track<T>(name: string, fn: (record: StepRecord) => Promise<T>): Promise<T> {
    const record: StepRecord = { name, phase: this.status.phase, startedAt: new Date().toISOString() };
    this.status.timeline.push(record);
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

  /** A timeline entry for something that was decided, not run. */
  async note(name: string, detail: string, ok = true): Promise<void> {
    await this.track(name, async (record) => {
      record.detail = detail;
      record.ok = ok;
    });
  }

  /** Ends the agent's work when a budget is spent; true if one is (the reason goes into status). */
  /** The steps that write a script agent's plan: its planSteps, or those of the last amendment. */
  planSteps(): ScriptStep[] {
    return this.amendedPlanSteps ?? this.input.agent.planSteps;
  }

  /** A follow-up at the plan gate of a script agent: its steps write the next version of the plan. */
  amendPlanSteps(steps: ScriptStep[]): void {
    if (steps.length) this.amendedPlanSteps = steps;
  }

  budgetSpent(): boolean {
    const progress = this.status.agent!;
    const reason = budgetStop(this.input.agent.budget, {
      turns: this.loop.turn,
      tokens: progress.usage?.totalTokens ?? 0,
      costUsd: progress.costUsd ?? 0,
      elapsedMs: Date.now() - this.loop.startedAt,
    });
    if (reason) progress.stopReason = reason;
    return reason !== undefined;
  }

  /** Records that a sandbox of this session is gone for good (removed, or found already gone). */
  markRemoved(sandbox: SandboxPlace): void {
    (this.status.removedSandboxes ??= []).push(sandbox.name);
    // By name and host: an attempt cut off on another host made one of the same name there.
    const i = this.sandboxesToRemove.findIndex((s) => s.name === sandbox.name && s.hostQueue === sandbox.hostQueue);
    if (i >= 0) this.sandboxesToRemove.splice(i, 1);
  }

  /** A sandbox of this session not in use that is not removed yet (its host did not answer): tried again later. */
  deferRemoval(sandbox: SandboxPlace): void {
    this.sandboxesToRemove.push(sandbox);
  }

  useSandbox(sandbox: Sandbox): void {
    this.sandbox = sandbox;
    // Earlier attempts of its provisioning, cut off on other hosts, may have made it there too.
    for (const place of sandbox.leftBehind ?? []) this.deferRemoval(place);
    const { name, host, image, baseCommit } = sandbox;
    this.status.sandbox = {
      name,
      host,
      image,
      baseCommit,
      ...(sandbox.preview ? { appPort: sandbox.preview.port } : {}),
    };
  }
}

/** Phases that end an attach: the sandbox goes. */
const ENDS_ATTACH: readonly Phase[] = ['tearing_down', ...OUTCOMES];

/** The status of a session's first run. */
function firstStatus(sessionId: string, rawInput: unknown, startTime: Date): SessionStatus {
  const raw = (rawInput ?? {}) as Partial<SessionInput>;
  return {
    sessionId,
    // Shown and searchable without any credentials the URL carries.
    repo: typeof raw.repo?.url === 'string' ? redactUrl(raw.repo.url) : '',
    task: typeof raw.task === 'string' ? raw.task : '',
    phase: 'provisioning',
    startedAt: startTime.toISOString(),
    timeline: [],
    decisions: [],
    refusedDecisions: [],
  };
}

/** Bounds of the memo's texts: it travels with every list and describe. */
const MEMO_TEXT = 500;

function lastKnown(s: SessionStatus): LastKnown {
  const pending = s.pendingApproval;
  return {
    phase: s.phase,
    task: s.task.slice(0, MEMO_TEXT),
    repo: s.repo,
    ...(s.branch ? { branch: s.branch } : {}),
    ...(s.timeline.length ? { step: s.timeline[s.timeline.length - 1].name.slice(0, MEMO_TEXT) } : {}),
    ...(pending ? { pending: { action: pending.action, change: pending.change, deadline: pending.deadline } } : {}),
    ...(s.pullRequest ? { pullRequest: s.pullRequest.url } : {}),
    ...(s.restarts ? { restarts: s.restarts } : {}),
    ...(s.error ? { error: s.error.slice(0, MEMO_TEXT) } : {}),
    at: new Date().toISOString(),
  };
}

/** A step's result on its timeline entry. */
export function recordStep(record: StepRecord, result: StepResult): void {
  record.exitCode = result.exitCode;
  record.outputTail = result.outputTail;
  record.artifact = result.artifact;
  if (result.failure) record.failure = result.failure;
  record.ok = result.exitCode === 0 && !result.failure;
}
