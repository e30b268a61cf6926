/**
 * What a session tells its Slack or Linear thread (threads.ts sends it; the
 * slack/ and linear/ activities show it): the contract between the workflow
 * and those rooms, with no import of either side's code.
 */
import type { Action, GatedAction, Phase } from '../api';

/** What a thread shows: small, so every report stays small in the history. */
export interface ThreadReport {
  sessionId: string;
  repo: string;
  /** The request (its first 300 characters). */
  task: string;
  phase: Phase;
  round: number;
  requestedBy?: string;
  /** When the session started: a message posted since then may be its own (looked for before posting). */
  startedAt: string;
  pending?: {
    action: GatedAction;
    covers?: Action[];
    change: string;
    diffstat: string;
    /** The diffstat was longer than DIFFSTAT_SHOWN and is cut: the thread does not offer Approve beside it. */
    diffstatCut?: boolean;
    tests: string;
    approvers: string[];
    /** The plan at the plan gate (its first characters, like a diffstat's); cut: the thread does not offer Approve. */
    plan?: string;
    planCut?: boolean;
  };
  lastDecision?: { decision: 'approve' | 'reject'; action: GatedAction; by: string };
  pullRequest?: string;
  error?: string;
}
