/**
 * The messages of an agent session: signals, queries, updates, search
 * attributes, and the types they carry. The workflow and every client (CLI,
 * HTTP server, tests) import these objects; nobody names a message by string.
 */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';

export const WORKFLOW_TYPE = 'agentSession';

export const RUNNING_PHASES = [
  'provisioning',
  'agent',
  'verifying',
  'awaiting_approval',
  'publishing',
  'tearing_down',
] as const;
export const OUTCOMES = ['completed', 'failed', 'rejected', 'cancelled', 'timed_out'] as const;
export type Outcome = (typeof OUTCOMES)[number];
export type Phase = (typeof RUNNING_PHASES)[number] | Outcome;

/** Irreversible actions; each waits behind its own approval gate unless policy says otherwise. */
export const ACTIONS = ['push', 'pull_request', 'deploy'] as const;
export type Action = (typeof ACTIONS)[number];

export interface DecisionInput {
  action: Action;
  /** Who decides: must be on the approvers list when there is one. */
  by: string;
  comment?: string;
  /**
   * The change the decision is about (its hash, or a prefix of 12+ characters,
   * as shown in status). Given, it must be the pending change, or the decision
   * is refused as stale; omitted, the decision binds to the pending change.
   */
  change?: string;
}

export interface DecideInput extends DecisionInput {
  decision: 'approve' | 'reject';
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
  detail?: string;
}

/** Counts and failures read from the JUnit XML the test command wrote. */
export interface TestReport {
  files: string[];
  total: number;
  passed: number;
  failed: number;
  skipped: number;
  failures: { name: string; message: string }[];
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

export interface SessionStatus {
  sessionId: string;
  repo: string;
  task: string;
  phase: Phase;
  startedAt: string;
  timeline: StepRecord[];
  sandbox?: { name: string; host: string; image: string; baseCommit: string };
  /**
   * The snapshot the session started from: its image and commit, its age at
   * the start (ms) and how many commits the session's ref had that it lacked.
   * Absent: the cold path (no snapshot of the repo on that host yet).
   */
  snapshot?: { image: string; commit: string; ageMs: number; behind?: number };
  agent?: { steps: number; commit?: string; changed?: boolean; diffstat?: string };
  verification?: Verification;
  /** Who started the session (self-approval may be forbidden). */
  requestedBy?: string;
  policy?: ApprovalPolicy;
  /** The approval the session is waiting for, with what a reviewer needs to decide. */
  pendingApproval?: {
    action: Action;
    /** Hash of the diff and target branch; an approval binds to it. */
    change: string;
    approvers: string[];
    deadline: string;
    evidence: { branch: string; commit: string; diffstat: string; tests: string; screenshots: string[] };
  };
  decisions: Decision[];
  /** Decisions that were sent but refused (unknown approver, nothing pending...). */
  refusedDecisions: { input: DecideInput; reason: string; at: string }[];
  branch?: string;
  pushed?: { commit: string; alreadyPushed: boolean };
  pullRequest?: { number: number; url: string; created: boolean };
  deployed?: { exitCode: number; outputTail: string };
  error?: string;
}

export const status = defineQuery<SessionStatus>('status');
/** Signals for the Temporal UI and `temporal workflow signal`; refused ones are listed in status. */
export const approve = defineSignal<[DecisionInput]>('approve');
export const reject = defineSignal<[DecisionInput]>('reject');
/** Update for the CLI and HTTP: the validator answers at once, with the reason when refused. */
export const decide = defineUpdate<Decision, [DecideInput]>('decide');

export const PHASE_ATTRIBUTE = defineSearchAttributeKey('DrydockPhase', SearchAttributeType.KEYWORD);
export const REPO_ATTRIBUTE = defineSearchAttributeKey('DrydockRepo', SearchAttributeType.KEYWORD);

/** Failure types, kept in one place. */
export const ErrorType = {
  InvalidSessionInput: 'InvalidSessionInput',
  SessionFailed: 'SessionFailed',
  SandboxNotFound: 'SandboxNotFound',
  RepoUnavailable: 'RepoUnavailable',
  PushRejected: 'PushRejected',
  StaleApproval: 'StaleApproval',
  GitHubAuth: 'GitHubAuth',
  GitHubRequest: 'GitHubRequest',
  DeployFailed: 'DeployFailed',
  RepoNotRegistered: 'RepoNotRegistered',
  SnapshotSetupFailed: 'SnapshotSetupFailed',
} as const;
