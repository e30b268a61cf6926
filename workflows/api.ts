/**
 * The messages of an agent session: signals, queries, updates, search
 * attributes, and the types they carry. The workflow and every client (CLI,
 * HTTP server, tests) import these objects; nobody names a message by string.
 */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';

export const WORKFLOW_TYPE = 'agentSession';

export const RUNNING_PHASES = [
  /** Every sandbox slot of every host that answered is taken: the session waits for one (status.queued says why). */
  'queued',
  'provisioning',
  'agent',
  'verifying',
  'awaiting_approval',
  'publishing',
  /** Published; the sandbox is gone and the session waits for a follow-up until its PR closes or it idles out. */
  'awaiting_followup',
  /** A person is in the sandbox (drydock attach): the agent's next step and verification wait for the detach. */
  'attached',
  'tearing_down',
] as const;
export const OUTCOMES = ['completed', 'failed', 'rejected', 'cancelled', 'timed_out'] as const;
export type Outcome = (typeof OUTCOMES)[number];
export type Phase = (typeof RUNNING_PHASES)[number] | Outcome;

/** Irreversible actions; each waits behind its own approval gate unless policy says otherwise. */
export const ACTIONS = ['push', 'pull_request', 'deploy'] as const;
export type Action = (typeof ACTIONS)[number];
/**
 * What an approval gate can be for: an irreversible action, a call of an MCP
 * tool the operator marked as writing outside the sandbox, or the agent's plan
 * of a session that asked for one (the last two always gated, never by policy).
 */
export const GATED_ACTIONS = [...ACTIONS, 'mcp_write', 'plan'] as const;
export type GatedAction = (typeof GATED_ACTIONS)[number];

export interface DecisionInput {
  action: GatedAction;
  /** Who decides: must be on the approvers list when there is one. */
  by: string;
  comment?: string;
  /**
   * The change the decision is about: its whole hash (64 hex), as
   * pendingApproval.change shows. Given, it must be the pending change, or the
   * decision is refused as stale; omitted (a signal, a reject), the decision
   * binds to the pending change. drydock's API, CLI and console always send it.
   */
  change?: string;
}

/**
 * The decider's measured time on the change (docs/audit.md, review minutes):
 * the console's review clock, or the CLI from its view to the decision.
 */
export interface ReviewTime {
  ms: number;
  via: 'console' | 'cli';
}

export interface DecideInput extends DecisionInput {
  decision: 'approve' | 'reject';
  /**
   * Set by drydock's console and CLI only; a signal's is dropped. Absent: the
   * decision is unmeasured (made in the Temporal UI, by `temporal workflow
   * signal`, or through the API without a view).
   */
  review?: ReviewTime;
}

export interface Decision extends DecideInput {
  /** The whole hash of the change decided on. */
  change: string;
  at: string;
}

/** Who must approve what: the server's policy, tightened by the session's. */
export interface ApprovalPolicy {
  required: Action[];
  /** Empty: anyone who names themselves. */
  approvers: string[];
  forbidSelfApproval: boolean;
  /**
   * Whether pushing a change waits for its own approval even when the
   * session opens a pull request. False: one review per change, approving
   * the pull request approves the push that opens it (same change hash).
   */
  separateGates: boolean;
  /**
   * The operator's (DRYDOCK_PARK_AFTER): how long a change waits at a gate
   * with its sandbox running before the session parks it; "never" keeps it.
   */
  parkAfter?: string;
  /**
   * The operator's (DRYDOCK_MAX_CHILDREN): child sessions one session may
   * start at most, whatever its `children.max` asks.
   */
  maxChildren?: number;
}

export interface StepRecord {
  /** e.g. "provision", "step 1: npm ci", "commit", "verify", "approval: push". */
  name: string;
  phase: Phase;
  startedAt: string;
  durationMs?: number;
  ok?: boolean;
  exitCode?: number;
  /** The last lines of the output; the whole output is in `artifact`. */
  outputTail?: string;
  artifact?: string;
  /** The sandbox limit that stopped the step: out of memory, pids, disk full, time limit. */
  failure?: 'oom' | 'pids' | 'disk_full' | 'timeout';
  detail?: string;
}

/** Counts and failures read from the JUnit XML the test command wrote. */
export interface TestReport {
  files: string[];
  total: number;
  passed: number;
  failed: number;
  skipped: number;
  /** Failing tests; `file` (repo-relative) and `line` where the report or its stack trace says (check run annotations). */
  failures: { name: string; message: string; file?: string; line?: number }[];
}

export type BrowserOutcome = 'passed' | 'check_failed' | 'app_did_not_start' | 'not_ready' | 'browser_crashed';

export interface BrowserResult {
  url: string;
  outcome: BrowserOutcome;
  message?: string;
  checks: {
    path: string;
    ok: boolean;
    expectText?: string;
    expectSelector?: string;
    message?: string;
    /** Artifact reference of the page as the check saw it. */
    screenshot?: string;
  }[];
  screenshots: { path: string; screenshot?: string; message?: string }[];
  consoleErrors: string[];
  failedRequests: string[];
  /** Artifact reference of the video of the whole check (WebM), when one was recorded. */
  video?: string;
  /** Why there is no video, when one was asked for. */
  videoMessage?: string;
  /** The app's own output: the tail here, the whole in `appLog`. */
  appLogTail: string;
  appLog?: string;
  durationMs: number;
}

export interface Verification {
  passed: boolean;
  /** What failed, one line each: for the reviewer and the agent. */
  summary: string;
  /** The test command, when there is one. */
  command?: string;
  exitCode?: number;
  timedOut?: boolean;
  outputTail?: string;
  artifact?: string;
  report?: TestReport;
  browser?: BrowserResult;
}

/** Why the agent phase ended: the agent said it was done, or a budget ran out. */
export type AgentStopReason = 'done' | 'max_turns' | 'max_tokens' | 'max_cost' | 'max_wall_time';

export interface TokenUsage {
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  /** Of the prompt, read from the provider's cache (priced at its own rate), where reported. */
  cachedTokens?: number;
}

/** One model or tool call of the agent loop, as its activity returned it (for audit and metrics). */
export type AgentCall =
  | ({
      type: 'model';
      turn: number;
      model: string;
      finishReason: string;
      durationMs: number;
      /** Undefined when the worker has no price for the model. */
      costUsd?: number;
      /** The answer came from the worker's record of an earlier, paid call (a retry after a crash). */
      reused: boolean;
    } & TokenUsage)
  | {
      type: 'tool';
      turn: number;
      tool: string;
      /** e.g. "edit_file src/app.ts", "run npm test". */
      summary: string;
      ok: boolean;
      exitCode?: number;
      durationMs: number;
      outputBytes: number;
      truncated: boolean;
    };

/** Files setup wrote (CommitResult.setupFiles) as the status says them: "a, b and 3 more". */
export function describeSetupFiles(files: { count: number; paths: string[] } | undefined): string | undefined {
  if (!files?.count) return undefined;
  const more = files.count - files.paths.length;
  return files.paths.join(', ') + (more > 0 ? ` and ${more} more` : '');
}

/** The agent phase as it goes: the script's steps, or a model's or agent CLI's progress. */
export interface AgentProgress {
  /** The agent configuration, as the figures name it (agent.name, else kind and model). */
  label?: string;
  steps: number;
  commit?: string;
  changed?: boolean;
  diffstat?: string;
  /** The files the change adds or modifies (the first 300): where its check run may annotate. */
  files?: string[];
  /** Artifact reference of the whole diff. */
  diff?: string;
  /** Files setup wrote that the change leaves out (a lockfile `npm install` made): named, with how many. */
  setupFiles?: string;
  /** The last change held a secret the worker knows: named with where, never shown or published. */
  blocked?: string;
  kind?: 'script' | 'openai' | 'cli';
  model?: string;
  /** Model calls so far (all attempts and rounds). */
  turn?: number;
  /**
   * The agent's attempt at a change that passes verification of this round: 1,
   * then 2... after each failed verification fed back to it (status.round counts follow-ups).
   */
  attempt?: number;
  lastTool?: string;
  usage?: TokenUsage;
  costUsd?: number;
  stopReason?: AgentStopReason;
  /** The agent's last words (trimmed). */
  summary?: string;
  /** Artifact reference of the whole conversation (openai) or the CLI's output (cli). */
  transcript?: string;
  /** Whether the repo's AGENTS.md went into the system prompt. */
  instructions?: boolean;
  /** The last calls (at most 20); the whole conversation is in `transcript`. */
  calls?: AgentCall[];
  /** Workflow runs of this session so far (continue-as-new starts a new one). */
  runs?: number;
  /** Times older turns were compacted to fit the context window (openai). */
  compactions?: number;
  /** Calls of the repo's MCP tools (openai), refused ones included. */
  mcpCalls?: number;
}

/**
 * A follow-up to a session: more work on the same change, from an approver or
 * the requester. `text` for a model or CLI agent, `steps` for a script agent.
 */
export interface FollowupInput {
  by: string;
  text?: string;
  /** Script steps, validated like the input's agent.steps. */
  steps?: unknown[];
  /**
   * The sender's id for this follow-up (e.g. the GitHub comment's): sent
   * again, it is the same follow-up and is not queued twice.
   */
  id?: string;
  /**
   * Set by drydock serve only: CI failed on the session's pull request
   * (`run`, at `commit`), and `text` is the failure with its annotations and
   * log tail, fenced. At most `cap` such rounds per pull request (the
   * operator's DRYDOCK_CI_FIX_ROUNDS); a person's follow-up wins over it.
   */
  ci?: { run: number; commit: string; cap: number };
}

export interface FollowupAccepted {
  /** The round the follow-up will be worked on in. */
  round: number;
  /** Follow-ups waiting for that round, this one included. */
  queued: number;
}

/** Who attaches to (or detaches from) a session's sandbox: an approver or the requester. */
/** handOver's input: who was attached, who is from now on. */
export interface HandOverInput {
  from: string;
  to: string;
}

export interface AttachInput {
  by: string;
}

/**
 * A person in the session's sandbox (drydock attach), as status shows it and
 * `attach` answers: the shell runs as the sandbox user in /workspace.
 */
export interface Attachment {
  by: string;
  /** When the attach was accepted. */
  at: string;
  /** The sandbox's container and the drydock host (Docker engine) it runs on. */
  sandbox: string;
  host: string;
  /** The phase the session was in, and goes back to at the detach. */
  during: Phase;
}

export interface Detached {
  by: string;
  /** Who attached, and for how long (ms). */
  attachedBy: string;
  durationMs: number;
}

/** One round of a session: the first is the task, each later one a follow-up. */
export interface RoundRecord {
  round: number;
  /** Who asked: the requester for round 1, the follow-up's sender after. */
  by?: string;
  /** What was asked (trimmed). */
  request: string;
  startedAt: string;
  /** The change the round ended with (its commit and hash). */
  commit?: string;
  change?: string;
  /** Whether its change was pushed (and so updated the pull request). */
  pushed?: boolean;
}

/** A session that no host could take yet. */
export interface QueuedFor {
  /** In words, from the last host that refused: e.g. "host h1 holds 4 of 4 sandboxes". */
  reason: string;
  since: string;
  /** Hosts asked so far. */
  tries: number;
  /** 1 = next in line, among the queued sessions by start time; added by the API and CLI (Temporal visibility), not the workflow. */
  position?: number;
}

/**
 * The plan of a session that asked for one (docs/agents.md, "A plan first"):
 * writing (the agent plans, reading only), awaiting (at the plan gate),
 * approved (the agent carries it out). Each amendment makes a new version.
 */
export interface PlanState {
  state: 'writing' | 'awaiting' | 'approved';
  /** 1 for the first plan, one more for each amended one. */
  version: number;
  /** The plan as the agent wrote it, at most 8,000 characters. */
  text?: string;
  /** The follow-ups that amended it so far (the last 10). */
  amendments: { by: string; text: string; version: number }[];
  approvedBy?: string;
}

export interface SessionStatus {
  sessionId: string;
  repo: string;
  task: string;
  phase: Phase;
  startedAt: string;
  timeline: StepRecord[];
  /** While the phase is `queued`: what it waits for, since when, and (from the API and CLI) its place in line. */
  queued?: QueuedFor;
  /** `appPort`: the repo's app listens there in the sandbox when it runs (its preview: workers/routes/preview.ts). */
  sandbox?: { name: string; host: string; image: string; baseCommit: string; appPort?: number };
  /**
   * The session waits without a sandbox (at a gate after DRYDOCK_PARK_AFTER,
   * or for a follow-up): `sandbox` was torn down at `since`, its checkpoint
   * kept; anything that runs in the sandbox brings one back from it.
   */
  parked?: { since: string; sandbox: string };
  /**
   * The snapshot the session started from: its image and commit, its age at
   * the start (ms) and how many commits the session's ref had that it lacked.
   * Absent: the cold path (no snapshot of the repo on that host yet).
   */
  snapshot?: { image: string; commit: string; ageMs: number; behind?: number };
  agent?: AgentProgress;
  /**
   * The browser checks on the base, before the agent's change: the pages as
   * they were, for before-and-after screenshots (none without verify.browser).
   */
  before?: BrowserResult;
  verification?: Verification;
  /** Who started the session (self-approval may be forbidden). */
  requestedBy?: string;
  /** The Slack message that shows the session (a session started from Slack). */
  slackMessage?: { channel: string; ts: string };
  policy?: ApprovalPolicy;
  /** The approval the session is waiting for, with what a reviewer needs to decide. */
  pendingApproval?: {
    action: GatedAction;
    /** Other actions this approval also approves (one review per change: the push of a pull request). */
    covers?: Action[];
    /** Hash of the diff and target branch; an approval binds to it. */
    change: string;
    approvers: string[];
    deadline: string;
    evidence: {
      branch: string;
      commit: string;
      diffstat: string;
      tests: string;
      screenshots: string[];
      /** Files setup wrote, left out of the change (so never pushed): named, with how many. */
      setupFiles?: string;
      /** An MCP call waiting (mcp_write): "server tool", and its arguments as the model wrote them (cut, scrubbed). */
      mcpCall?: { server: string; tool: string; arguments: string };
      /** The plan waiting (plan): its text as the agent wrote it (at most 8,000 characters) and its version. */
      plan?: { text: string; version: number };
    };
  };
  /** A session that asked for a plan first (input.plan): the plan, where it stands, and who amended or approved it. */
  plan?: PlanState;
  decisions: Decision[];
  /** Decisions that were sent but refused (unknown approver, nothing pending...). */
  refusedDecisions: { input: DecideInput; reason: string; at: string }[];
  branch?: string;
  /** The round under way: 1, then one more for each follow-up round. */
  round?: number;
  /** The last rounds (at most 20), newest last. */
  rounds?: RoundRecord[];
  /** While the session waits for follow-ups (phase awaiting_followup): until when, at the latest. */
  openUntil?: string;
  /** Ids of the follow-ups received (the last 100): a redelivery is not queued again. */
  followupIds?: string[];
  /** Someone is attached to the sandbox (phase attached). */
  attached?: Attachment;
  /** Attaches so far (each is in the audit trail with its duration). */
  attaches?: number;
  /** The pull request was merged or closed: the session ended with it. */
  closedBy?: { merged: boolean; by: string };
  pushed?: { commit: string; alreadyPushed: boolean };
  pullRequest?: { number: number; url: string; created: boolean };
  deployed?: { exitCode: number; outputTail: string };
  error?: string;
  /** Why the session did not complete, as a short key for the metrics ("verification_failed", "PushRejected"...). */
  failureCause?: string;
  /** How many times verification ran in the last round: the agent's attempts (more than one when failures went back to it). */
  verificationRounds?: number;
  /** How many times the sandbox was lost (killed, or its host gone) and replaced from the last checkpoint. */
  restarts?: number;
  /**
   * The session's sandboxes removed so far (already gone counts), in order: a
   * lost one as soon as its host answers, the rest at teardown. A sandbox
   * missing here at the end was left to its host's reaper.
   */
  removedSandboxes?: string[];
  /**
   * The audit chain as the session ended (set at teardown): kept in Temporal's
   * history, outside the database, so `drydock audit verify` finds rows
   * removed from its end or a rewritten chain.
   */
  audit?: AuditSeal;
  /** The acceptance command's verdict (input.acceptance), once the change passed verification. */
  acceptance?: AcceptanceResult;
  /** Follow-up rounds started by a failed CI run on the session's pull request (FollowupInput.ci). */
  ciRounds?: number;
  /** Repo memory: the approved notes the agent was given (id, version) and the ids of the notes it proposed. */
  memory?: { given: { id: number; version: number }[]; proposed: number[] };
  /** Child sessions the agent started (start_child), in order; a parent's status shows its tree one level down. */
  children?: ChildSession[];
  /** The session that started this one as a child (input.childOf): it takes the change; this one never publishes. */
  childOf?: string;
  /** The agentAttempts session this session is an attempt of. */
  attemptOf?: string;
  /** One of parallel attempts whose sibling was picked: it ended without a push. */
  setAside?: SetAside;
  /** Refused so far: requests to the egress proxy and the model gateway, budgets that stopped the agent (decisions: refusedDecisions). */
  refusals?: { egress: number; budget: number };
  /**
   * Set only when no worker answered the status query: this status is the
   * last known state from the session's memo, with what Temporal says is pending.
   */
  unanswered?: Unanswered;
}

export interface AcceptanceResult {
  command: string;
  passed: boolean;
  exitCode: number;
  timedOut: boolean;
  outputTail: string;
  artifact?: string;
}

/** Why an attempt ended without a push: another attempt was picked. */
export interface SetAside {
  by: string;
  /** The session id of the attempt picked. */
  picked: string;
}

/** A session's audit chain at its end: how many events, and the last one's hash. */
export interface AuditSeal {
  events: number;
  head: string;
}

/** The session's last known state, kept in its memo under MEMO_KEY at every phase change. */
export interface LastKnown {
  phase: Phase;
  task: string;
  repo: string;
  branch?: string;
  /** The timeline's last entry when the phase changed. */
  step?: string;
  pending?: { action: GatedAction; change: string; deadline: string };
  pullRequest?: string;
  restarts?: number;
  error?: string;
  /** When the memo was written (workflow time). */
  at: string;
}
export const MEMO_KEY = 'drydock';

export interface Unanswered {
  /** In words: no worker is polling, or none answered in time. */
  message: string;
  /** When a worker was last seen polling the session's task queue, if known. */
  since?: string;
  pendingActivities: { activity: string; state: string; attempt: number; lastFailure?: string }[];
  /** The approval the session was waiting for when it was last seen. */
  pendingApproval?: LastKnown['pending'];
}

/**
 * A drydock pull request was closed (merged or not), as GitHub reported it.
 * Recorded by the `pullRequestClosed` workflow (id `pr-closed-<session>-<number>`),
 * whose result the metrics read; the session itself has usually ended by then.
 */
export interface PullRequestClosed {
  sessionId: string;
  repo: string;
  number: number;
  url: string;
  merged: boolean;
  by: string;
}
export const PR_CLOSED_WORKFLOW_TYPE = 'pullRequestClosed';

export const status = defineQuery<SessionStatus>('status');
/** Signals for the Temporal UI and `temporal workflow signal`; refused ones are listed in status. */
export const approve = defineSignal<[DecisionInput]>('approve');
export const reject = defineSignal<[DecisionInput]>('reject');
/** Update for the CLI and HTTP: the validator answers at once, with the reason when refused. */
export const decide = defineUpdate<Decision, [DecideInput]>('decide');

/** Update for every client: the validator refuses senders who are neither approvers nor the requester. */
export const followup = defineUpdate<FollowupAccepted, [FollowupInput]>('followup');
/**
 * Updates for `drydock attach`: the validators refuse anyone who is neither an
 * approver nor the requester, and a session without a live sandbox; attach by
 * the person already attached answers the same attachment again.
 */
export const attach = defineUpdate<Attachment, [AttachInput]>('attach');
export const detach = defineUpdate<Detached, [AttachInput]>('detach');
/**
 * Update for several people at one terminal (drydock serve): the person
 * attached (`from`) left while `to` stays in, so the attach is `to`'s from
 * now on (the agent still waits; `from`'s part is recorded as a detach).
 */
export const handOver = defineUpdate<Attachment, [HandOverInput]>('handOver');
/**
 * Update for the app's preview (`drydock serve`): starts the repo's app in a
 * companion of the sandbox while the session waits at its gate, as `by`
 * (serve sends it for a person who reads the session). A running app is kept.
 */
export const startPreview = defineUpdate<PreviewStarted, [AttachInput]>('startPreview');

/** What startPreview answers: the app answers on its port, or why not. */
export type PreviewStarted = { ready: true; port: number } | { ready: false; why: string };
/**
 * The session's pull request was merged or closed (sent by the webhook): the session ends.
 * `number`: the pull request's; one that is not the session's own is ignored (by hand, leave it out).
 */
export const pullRequestClosed = defineSignal<[{ merged: boolean; by: string; number?: number }]>('pullRequestClosed');

export const PHASE_ATTRIBUTE = defineSearchAttributeKey('DrydockPhase', SearchAttributeType.KEYWORD);
export const REPO_ATTRIBUTE = defineSearchAttributeKey('DrydockRepo', SearchAttributeType.KEYWORD);

/** A child session as its parent shows it: kept current by the child's progress (sessionProgress). */
export interface ChildSession {
  sessionId: string;
  /** Its task, as the agent gave it (at most 200 characters here). */
  task: string;
  phase: Phase;
  startedAt: string;
  /** Its agent's spend, counted in the parent's budget once it ends. */
  costUsd?: number;
  diffstat?: string;
  verified?: boolean;
}

/**
 * What a session tells the workflow that started it (agentAttempts, pilot)
 * at every phase change: enough to show it side by side, to pick it, and to
 * count it against a concurrency limit. A later report (higher `seq`) replaces an earlier one.
 */
export interface SessionProgress {
  sessionId: string;
  phase: Phase;
  /** Grows with every report of the session, across its runs. */
  seq: number;
  at: string;
  startedAt: string;
  /** Where its sandbox lives (a fault on purpose kills it there). */
  hostQueue?: string;
  agent?: { label: string; costUsd: number; turns: number };
  change?: { commit: string; hash: string; diffstat: string; changed: boolean };
  verification?: { passed: boolean; summary: string };
  acceptance?: { passed: boolean };
  pending?: NonNullable<SessionStatus['pendingApproval']>;
  /** Who may decide on it: a pick is refused as a decision would be. */
  policy?: Pick<ApprovalPolicy, 'approvers' | 'forbidSelfApproval'>;
  requestedBy?: string;
  pushed?: boolean;
  failureCause?: string;
  error?: string;
}
/** An agent CLI's start_child call, or a script step's drydock-child, from the model gateway of its step (mcp/child-tool.ts). */
export interface StepChildRequest {
  /** The child's task, as the CLI's model or the script wrote it (checked: rules/children.ts childTask). */
  task: string;
  /** The step that asks: only the step running now may. */
  step: string;
}

/** What the CLI's model (or drydock-child) reads as start_child's result; ok: the child completed. */
export interface StepChildAnswer {
  content: string;
  ok: boolean;
  childId?: string;
}

/**
 * start_child for agent CLIs and script steps (docs/agents.md, Child sessions):
 * the worker's gateway asks the session to start a child and waits for its end.
 */
export const startChildForStep = defineUpdate<StepChildAnswer, [StepChildRequest]>('startChild');

/** From a session to the workflow that started it (its parent), at every phase change. */
export const sessionProgress = defineSignal<[SessionProgress]>('sessionProgress');

/** Parallel attempts (docs/attempts.md): the parent workflow of N agentSession children. */
export const ATTEMPTS_WORKFLOW_TYPE = 'agentAttempts';

export interface PickInput {
  /** The attempt picked: 1, 2... */
  attempt: number;
  by: string;
  /** The change picked: its whole hash (64 hex), as the attempt's pending change shows; required. */
  change: string;
  comment?: string;
  /** The reviewer's measured time comparing the attempts (set by the console and CLI only). */
  review?: ReviewTime;
}

export interface AttemptPick {
  attempt: number;
  sessionId: string;
  by: string;
  change: string;
  at: string;
}

export interface AttemptsStatus {
  sessionId: string;
  repo: string;
  task: string;
  requestedBy?: string;
  /** running: attempts working; awaiting_pick: one or more wait at their gate; picked: the picked one goes on; then an outcome. */
  phase: 'running' | 'awaiting_pick' | 'picked' | Outcome;
  startedAt: string;
  attempts: { index: number; sessionId: string; agent: string; progress?: SessionProgress }[];
  picked?: AttemptPick;
  refusedPicks: { input: PickInput; reason: string; at: string }[];
  error?: string;
}

export const attemptsStatus = defineQuery<AttemptsStatus>('attempts');
/** Picks one attempt: its change is approved (one approval, bound to its hash), the others end without a push. */
export const pick = defineUpdate<AttemptPick, [PickInput]>('pick');
/** From agentAttempts to an attempt: it was picked; a decision on its pending action, with the pick's review time. */
export const attemptPicked = defineSignal<[DecideInput]>('attemptPicked');
/** From agentAttempts to an attempt: another was picked; it ends without a push. */
export const setAside = defineSignal<[SetAside]>('setAside');

/** A pilot (docs/pilot.md): a task set against agent configurations, as one workflow. */
export const PILOT_WORKFLOW_TYPE = 'pilot';

/** planned: not started; working: until its gate; at_gate: waits for a person; ended: an outcome. */
export type PilotSessionState = 'planned' | 'working' | 'at_gate' | 'ended';

export interface PilotSessionView {
  sessionId: string;
  task: string;
  configuration: string;
  attempt: number;
  faults: string[];
  state: PilotSessionState;
  phase?: Phase;
  /** Faults done to it so far, with what happened ("sandbox_killed: killed sandbox-0"). */
  applied: string[];
  /** A workflow at this id that the pilot did not start (no child of it): never adopted; the session counts as failed. */
  disowned?: string;
}

export interface PilotStatus {
  pilot: string;
  phase: 'running' | 'stopped' | 'completed';
  startedAt: string;
  concurrency: number;
  sessions: PilotSessionView[];
  counts: Record<PilotSessionState, number>;
  stoppedBy?: string;
  /** Sessions an earlier run of the pilot had started, found when this run began: not started again. */
  resumed?: { ended: number; underWay: number };
}

export const pilotStatus = defineQuery<PilotStatus>('pilot');
/** Starts nothing more and ends the pilot's run; sessions under way go on (start the pilot again to resume). */
export const stopPilot = defineUpdate<PilotStatus, [{ by: string }]>('stop');

/** Failure types, kept in one place. */
export const ErrorType = {
  InvalidSessionInput: 'InvalidSessionInput',
  SessionFailed: 'SessionFailed',
  SandboxNotFound: 'SandboxNotFound',
  /** The host's sandbox slots are all taken: the session queues and asks again (never evicts anything). */
  HostFull: 'HostFull',
  /** A service of the sandbox died or failed its health check during a step: the sandbox is replaced, with its services. */
  ServiceLost: 'ServiceLost',
  /** Killed while being provisioned: removed, and provisioned again by the retry (transient). */
  SandboxLostInProvisioning: 'SandboxLostInProvisioning',
  RepoUnavailable: 'RepoUnavailable',
  PushRejected: 'PushRejected',
  StaleApproval: 'StaleApproval',
  GitHubAuth: 'GitHubAuth',
  GitHubRequest: 'GitHubRequest',
  /** Another forge (GitLab, Gitea) refused the worker's credentials: GitHubAuth's counterpart. */
  ForgeAuth: 'ForgeAuth',
  /** Another forge answered a request with an error a retry cannot change. */
  ForgeRequest: 'ForgeRequest',
  DeployFailed: 'DeployFailed',
  ModelRequest: 'ModelRequest',
  /** The provider's rate limit (429): retried after its Retry-After while the wall time lasts. */
  ModelRateLimited: 'ModelRateLimited',
  ModelNotAllowed: 'ModelNotAllowed',
  /** The conversation does not fit agent.contextWindow even compacted. */
  ModelContextTooLong: 'ModelContextTooLong',
  RepoNotRegistered: 'RepoNotRegistered',
  SnapshotSetupFailed: 'SnapshotSetupFailed',
  /** The repo's environment cannot be a sandbox (no sh, a Dockerfile that fails, features, a service that will not start). */
  EnvironmentUnusable: 'EnvironmentUnusable',
  /** A sandbox produced more than the worker takes of one kind of data (a diff, a bundle, a report): names the cap. */
  OutputTooLarge: 'OutputTooLarge',
  /** The sandbox provider cannot do what was asked (its capabilities, sandbox/provider.ts); the message says what. */
  SandboxUnsupported: 'SandboxUnsupported',
  /** The sandbox was made but did not run within the provider's start time (a pod never scheduled or started): names why. */
  SandboxDidNotStart: 'SandboxDidNotStart',
  /** An agentAttempts or pilot input that cannot run (names each bad field). */
  InvalidPilotInput: 'InvalidPilotInput',
  /** The change holds the value of a secret the worker knows: never pushed. */
  SecretInChange: 'SecretInChange',
} as const;
