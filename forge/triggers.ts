/**
 * What a forge's webhook asks of drydock, whichever forge sent it: start a
 * session, follow up on one, or record that its change request closed. Each
 * provider's router (github/webhooks.ts, gitlab/webhooks.ts) turns its
 * payloads into these; workers/routes/webhooks.ts acts on them once for all.
 */
import { createHash } from 'node:crypto';
import type { PullRequestClosed } from '../workflows/api';
import type { TriggerOrigin } from '../workflows/input';

/** Where a triggered session publishes: a change request on the repo, onto `base` when given. */
export interface StartTrigger {
  kind: 'start';
  /**
   * From signed content only (the issue and the body's hash, the comment id,
   * the commit), never from an unsigned delivery header: a redelivery, or a
   * captured body replayed under a new delivery id, finds the same session.
   */
  sessionId: string;
  /** "owner/name" (a GitLab project's full path): must be a repo drydock serves. */
  repo: string;
  ref?: string;
  /** The request in a line; the worker adds the context (issue, comments, failed run). */
  task: string;
  requestedBy: string;
  pullRequestBase?: string;
  /** For the log: which event started it. */
  source: string;
  /** Where on the forge it came from: the worker reads context there and reports back. */
  origin?: TriggerOrigin;
  /** Checks against the forge's API before starting (the payload cannot prove these). */
  check?: {
    /** This user must be a writer of the repo (GitHub write, GitLab Developer); a payload's role does not prove it. */
    writer?: string;
    /** This change request must not be one of drydock's own (its session would get the follow-up). */
    pullRequest?: number;
    /** The run's commit must be the head of this branch of the repo itself, not a fork's. */
    branchHead?: { branch: string; sha: string };
  };
}

/** A change request on a drydock branch was merged or closed. */
export interface PullRequestClosedTrigger extends PullRequestClosed {
  kind: 'pr_closed';
}

/**
 * A `/drydock …` comment on one of drydock's own change requests: a
 * follow-up to its session. When the payload names the branch, the session is
 * known; otherwise the server reads the change request's branch first.
 */
export interface FollowupTrigger {
  kind: 'followup';
  repo: string;
  /** The change request's number. */
  pullRequest: number;
  /** Known from the payload's branch; otherwise from the change request's. */
  sessionId?: string;
  text: string;
  /** Who commented: must be a writer, and an approver or the requester. */
  by: string;
  /** The comment's id (a review's: the review's): a redelivery is the same follow-up. */
  comment: number;
  /** A submitted review: its line comments are read from the forge and sent with its body as one follow-up. */
  review?: number;
}

export type Trigger =
  | StartTrigger
  | PullRequestClosedTrigger
  | FollowupTrigger
  | { kind: 'ignore'; reason: string }
  | { kind: 'invalid'; problem: string };

export const LABEL = 'drydock';
export const COMMAND = '/drydock';
export const BRANCH_PREFIX = 'drydock/';
/** Characters of a /drydock command that become the task. */
export const COMMAND_LIMIT = 4_000;

/** Workflow-id-safe and branch-safe: lower-case letters, digits and '-'. */
export function slug(...parts: (string | number)[]): string {
  return parts
    .join('-')
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/-+/g, '-')
    .replace(/^-|-$/g, '');
}

/** The first 16 hex digits of the body's SHA-256: names what was signed. */
export function bodyHash(body: Buffer | string): string {
  return createHash('sha256').update(body).digest('hex').slice(0, 16);
}

export const ignore = (reason: string): Trigger => ({ kind: 'ignore', reason });

/** The words after /drydock in a comment, or why the comment is not a command. */
export function commandOf(event: string, body: string, byBot: boolean): { text: string } | { ignored: string } {
  const trimmed = body.trim();
  if (!trimmed.startsWith(`${COMMAND} `) && !trimmed.startsWith(`${COMMAND}\n`)) {
    return { ignored: `${event}: not a ${COMMAND} command` };
  }
  if (byBot) return { ignored: `${event}: written by a bot` };
  const text = trimmed.slice(COMMAND.length).trim();
  return text ? { text } : { ignored: `${event}: ${COMMAND} without a task` };
}
