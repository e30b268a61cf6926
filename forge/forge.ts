/**
 * The forge seam: everything drydock asks of a forge (GitHub, GitLab, Gitea…),
 * as one interface a provider implements in its own folder (`github/`,
 * `gitlab/`). The rest of drydock speaks of change requests (a pull request,
 * a merge request), comments, reactions and commit reports, never of one
 * forge's words.
 *
 * A provider has two halves:
 * - `Forge`, with the worker's (or the server's) credentials: git
 *   credentials, and per repository a `ForgeRepo` handle for reads and
 *   idempotent writes;
 * - `ForgeWebhooks`, for `drydock serve`: checking a delivery (signature or
 *   token, size) and routing its payload to a `Trigger` (forge/triggers.ts).
 *
 * What is the same on every forge is written once above the seam:
 * the progress a session reports (forge/progress.ts), the task's fenced
 * context (forge/context.ts), which change request is a session's
 * (forge/change-requests.ts), the activities (forge/activities.ts) and the
 * webhook route (workers/routes/webhooks.ts). A provider only translates.
 *
 * Rules every provider keeps:
 * - Writes are idempotent: a retried activity or a redelivered webhook looks
 *   before it writes (a comment is found again by its hidden `marker(key)`,
 *   a change request by its branch, a status only posted when it changes).
 * - Whatever the forge returns is untrusted text: the caller bounds, scrubs
 *   and fences it; a provider returns it as it came, cut to CONTEXT_LIMITS.
 * - Errors: throw as they come; `failure(err)` says which are permanent
 *   (credentials refused, a 4xx that a retry cannot change), so activities
 *   fail non-retryably with a reason and Temporal retries the rest.
 * - Credentials never leave the provider: no token in a URL, a log or a
 *   return value; git gets them in its environment (`gitCredentials`).
 */
import type { TestReport } from '../workflows/api';
import type { TriggerOrigin } from '../workflows/input';
import type { ContextSection } from './context';
import type { Trigger } from './triggers';

/** The forges drydock knows; a session's input names one (default: by its repo URL, else GitHub). */
export const FORGE_KINDS = ['github', 'gitlab', 'gitea'] as const;
export type ForgeKind = (typeof FORGE_KINDS)[number];

/** Environment variables for one git command (an Authorization header scoped to one origin). */
export type GitEnv = Record<string, string>;

/** What a use of the forge needs: an App-style provider mints a token with only this much. */
export type ForgePurpose =
  /** Push and open or update the change request (the worker). */
  | 'publish'
  /** Read the issue, comments, the change request, CI results and logs (the worker). */
  | 'context'
  /** Comments, reactions, commit statuses (the worker). */
  | 'progress'
  /** `drydock serve`'s checks: permissions, branches, change requests; answers on an issue. */
  | 'server';

/** Optional parts a forge has or not, checked where they are used. */
export interface ForgeCapabilities {
  /** Commit reports carry failing tests as annotations on their lines (GitHub's check runs with an App). */
  annotations: boolean;
  /** A submitted review's line comments become one follow-up (`ForgeRepo.reviewComments`). */
  reviews: boolean;
}

/** Where on a forge a comment goes: an issue, or a change request (they are numbered apart on some forges). */
export interface Thread {
  /** The or change request's number as people see it (GitLab's iid). */
  number: number;
  changeRequest: boolean;
}

export interface ChangeRequestSpec {
  /** The branch drydock pushed (drydock/<session>). */
  head: string;
  /** Default: the repository's default branch. */
  base?: string;
  title: string;
  body: string;
  draft: boolean;
}

/** A change request drydock opened or found again. */
export interface ChangeRequestRef {
  number: number;
  /** Its page: the session's status and the closing webhook compare it (forge/change-requests.ts). */
  url: string;
  /** False when an open one for the branch was found and updated. */
  created: boolean;
}

/** What the server reads of a change request before it lets a comment on it steer or start anything. */
export interface ChangeRequestInfo {
  number: number;
  url: string;
  headBranch: string;
  /** The head branch is in the repository itself, not a fork's. */
  fromThisRepo: boolean;
  /** The head's repository ("owner/name"), when the forge says. */
  headRepo?: string;
  state: 'open' | 'merged' | 'closed';
}

export type CommitState = 'pending' | 'success' | 'failure' | 'error';

/** A session's report on a commit: a commit status, or a check run with annotations where the forge has them. */
export interface CommitReport {
  sessionId: string;
  state: CommitState;
  /** The session has ended: a check run is completed with this conclusion. */
  conclusion?: 'success' | 'failure' | 'cancelled' | 'timed_out' | 'neutral';
  /** Plain text, at most 140 characters (a status's description). */
  description: string;
  /** Markdown for forges with rich reports (sandbox text already fenced). */
  title: string;
  summary: string;
  /** The session's page. */
  link: string;
  failures?: TestReport['failures'];
  /** The only files annotations may name. */
  changedFiles: string[];
}

/** A line comment of a submitted review. */
export interface ReviewComment {
  path: string;
  line: number;
  body: string;
}

/** One repository on a forge, authenticated for one purpose. Every method may throw the forge's errors. */
export interface ForgeRepo {
  /** "owner/name" (GitLab: the project's full path, groups included). */
  readonly path: string;
  /** Opens the change request for `head`, or updates the open one: never a second. */
  upsertChangeRequest(spec: ChangeRequestSpec): Promise<ChangeRequestRef>;
  changeRequest(number: number): Promise<ChangeRequestInfo>;
  /** The head commit of a branch, or undefined when there is no such branch. */
  branchHead(branch: string): Promise<string | undefined>;
  /** Posts `body` unless a comment carrying `marker(key)` is there already. */
  commentOnce(on: Thread, key: string, body: string): Promise<{ url: string; created: boolean }>;
  /** Reacts to a comment (👀 when a session starts); reacting twice adds nothing. */
  react(on: Thread & { comment: number }, emoji: 'eyes' | 'rocket'): Promise<void>;
  /** Reports the session on a commit; posts nothing when the newest report says the same. */
  reportCommit(sha: string, report: CommitReport): Promise<void>;
  /** What the forge holds about where a session came from: issue and comments, change request, failed CI and logs. */
  readContext(origin: TriggerOrigin): Promise<ContextSection[]>;
  /** Why `user` may not start or steer work here (drydock wants a writer: GitHub write, GitLab Developer), if so. */
  writerRefusal(user: string): Promise<string | undefined>;
  /** A submitted review's line comments, at most `limit` (only where `capabilities.reviews`). */
  reviewComments?(changeRequest: number, review: number, limit: number): Promise<ReviewComment[]>;
}

/** A forge's answer that a retry cannot change. */
export interface ForgeFailure {
  kind: 'auth' | 'request';
  message: string;
}

/** One forge, with the credentials of the process that holds it. */
export interface Forge {
  readonly kind: ForgeKind;
  /** For people: "GitHub", "GitLab". */
  readonly name: string;
  readonly capabilities: ForgeCapabilities;
  /** Whether a clone URL is on this forge (the registry's repos are matched to a forge by it). */
  owns(url: string): boolean;
  /** git's environment for `url` (an Authorization header for this forge's origin only), or {} for another host. */
  gitCredentials(url: string): Promise<GitEnv>;
  /** A handle on one repository ("owner/name"), with credentials for `purpose` only. */
  repo(path: string, purpose: ForgePurpose): ForgeRepo;
  /**
   * Whether `err` (thrown by this forge's calls for `purpose` on `repo`) is
   * permanent, and why in words; undefined: transient, let Temporal retry.
   */
  failure(err: unknown, context: { purpose: ForgePurpose; repo: string }): ForgeFailure | undefined;
}

/** A delivery checked: its event, id and raw body, or why it is refused (401 forged, 400 malformed, 503 unset). */
export type CheckedDelivery =
  { ok: true; event: string; delivery: string; body: Buffer } | { ok: false; status: 400 | 401 | 503; problem: string };

/** The server's half: which deliveries are the forge's, and what they ask. */
export interface ForgeWebhooks {
  readonly kind: ForgeKind;
  /**
   * Checks a delivery: the headers first (a forged request is refused before
   * its body is read), then `readBody()` (bounded by the server: 413 past
   * DRYDOCK_HTTP_MAX_BODY), then the signature or token in constant time.
   * Header names are lower case.
   */
  check(headers: Record<string, string | undefined>, readBody: () => Promise<Buffer>): Promise<CheckedDelivery>;
  /**
   * What the event asks of drydock (pure: event, the body's hash, the
   * payload). Session ids come from signed content only, so a replayed body
   * finds the session it started and starts nothing new.
   */
  route(event: string, hash: string, payload: unknown): Trigger;
}

/** The hidden marker by which a comment is found again (an HTML comment, rendered by no forge). */
export function marker(key: string): string {
  return `<!-- drydock:${key} -->`;
}
