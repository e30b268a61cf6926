/**
 * Webhook triggers: signature checks over the raw body, and what each GitHub
 * event means to drydock, as a pure function of the event name, the signed
 * body's hash and the payload (unit-tested without a server).
 */
import { verifyWithFallback } from '@octokit/webhooks-methods';
import { z } from 'zod';
import { BRANCH_PREFIX, COMMAND, COMMAND_LIMIT, commandOf, ignore, LABEL, slug, type Trigger } from '../forge/triggers';
import { scrub } from '../platform/scrub';
import type { CheckedDelivery, ForgeWebhooks } from '../forge/forge';
export { bodyHash, BRANCH_PREFIX, COMMAND, LABEL } from '../forge/triggers';
export type {
  CiFailedTrigger,
  FollowupTrigger,
  PullRequestClosedTrigger,
  StartTrigger,
  Trigger,
} from '../forge/triggers';
import {
  NO_PROJECT_SECRETS,
  secretsForDelivery,
  signatureProblem,
  type ProjectSecrets,
} from '../forge/webhook-secrets';
import { parsePayload, PAYLOADS, type PayloadEvent, type PayloadOf } from './webhook-payloads';

/**
 * True when `signature` ("sha256=<hex>") is the HMAC-SHA256 of exactly these
 * bytes under one of `secrets` (current first, then the old one while it is
 * rotated out). Constant-time comparison (@octokit/webhooks-methods).
 */
export async function signatureMatches(secrets: string[], body: Buffer, signature: string | undefined) {
  if (secrets.length === 0 || !signature?.startsWith('sha256=') || body.length === 0) return false;
  // The library signs strings; only a body that round-trips through UTF-8 unchanged
  // is one string, so a changed byte can never verify as the same text.
  const text = body.toString('utf8');
  if (!Buffer.from(text, 'utf8').equals(body)) return false;
  return (await verifyWithFallback(secrets[0], text, signature, secrets.slice(1))) === true;
}

/** Where a delivery names its repository. */
const REPOSITORY = ['repository', 'full_name'] as const;

/**
 * GitHub's deliveries: X-Hub-Signature-256 under the repository's own secrets when it has
 * some (forge/webhook-secrets.ts), else DRYDOCK_WEBHOOK_SECRETS; X-GitHub-Delivery for the logs.
 */
export function githubWebhooks(secrets: string[], projects: ProjectSecrets = NO_PROJECT_SECRETS): ForgeWebhooks {
  return {
    kind: 'github',
    async check(headers, readBody): Promise<CheckedDelivery> {
      if (secrets.length === 0 && (await projects.all()).length === 0) {
        return { ok: false, status: 503, problem: 'GitHub webhooks are not configured (DRYDOCK_WEBHOOK_SECRETS)' };
      }
      const signature = headers['x-hub-signature-256'];
      if (!signature?.startsWith('sha256=')) {
        return { ok: false, status: 401, problem: 'missing or malformed X-Hub-Signature-256' };
      }
      const body = await readBody();
      const chosen = await secretsForDelivery(secrets, projects, body, REPOSITORY, 'DRYDOCK_WEBHOOK_SECRETS');
      if (!chosen.ok) return chosen;
      if (!(await signatureMatches(chosen.secrets, body, signature))) {
        return { ok: false, status: 401, problem: signatureProblem(chosen.project) };
      }
      const event = headers['x-github-event'];
      // Not signed: for the logs only, never for an id.
      const delivery = headers['x-github-delivery'];
      if (!event || !delivery || !/^[A-Za-z0-9-]{1,100}$/.test(delivery)) {
        return { ok: false, status: 400, problem: 'missing X-GitHub-Event or a well-formed X-GitHub-Delivery' };
      }
      return { ok: true, event, delivery, body };
    },
    route: routeGitHubEvent,
  };
}

/**
 * What a GitHub delivery asks of drydock: the event's payload is validated
 * first (`invalid` names the field), then read. `hash` is the signed body's
 * (bodyHash).
 */
export function routeGitHubEvent(event: string, hash: string, payload: unknown): Trigger {
  if (!(event in PAYLOADS)) return ignore(`event '${event}' is not one drydock acts on`);
  const expected = PAYLOADS[event as PayloadEvent];
  const action = parsePayload(z.object({ action: z.string() }), payload);
  if (!action.ok) return { kind: 'invalid', problem: action.problem };
  if (action.payload.action !== expected.action) {
    return ignore(`${event}.${action.payload.action}: only '${expected.action}' is read`);
  }
  const parsed = parsePayload(expected.schema, payload);
  if (!parsed.ok) return { kind: 'invalid', problem: parsed.problem };
  switch (event as PayloadEvent) {
    case 'issues':
      return fromLabel(parsed.payload as PayloadOf<'issues'>, hash);
    case 'issue_comment':
      return fromComment(parsed.payload as PayloadOf<'issue_comment'>);
    case 'check_run':
      return fromCheckRun(parsed.payload as PayloadOf<'check_run'>);
    case 'workflow_run':
      return fromWorkflowRun(parsed.payload as PayloadOf<'workflow_run'>);
    case 'pull_request':
      return fromClosedPullRequest(parsed.payload as PayloadOf<'pull_request'>);
    case 'pull_request_review_comment':
      return fromReviewComment(parsed.payload as PayloadOf<'pull_request_review_comment'>);
    case 'pull_request_review':
      return fromReview(parsed.payload as PayloadOf<'pull_request_review'>);
  }
}

function fromLabel(p: PayloadOf<'issues'>, hash: string): Trigger {
  if (p.label.name !== LABEL) return ignore(`issues.labeled: label '${p.label.name}' is not '${LABEL}'`);
  const repo = p.repository.full_name;
  return {
    kind: 'start',
    // The same label event is the same body; labelling again later is a new body, and a new session.
    sessionId: slug('gh', repo, 'issue', p.issue.number, hash),
    repo,
    // The title is GitHub text too: bounded and scrubbed here, and in the context as data.
    task: `Resolve issue #${p.issue.number}: ${scrub(p.issue.title).replace(/\s+/g, ' ').slice(0, 200)}`,
    requestedBy: p.sender.login,
    source: `issue #${p.issue.number} labelled ${LABEL}`,
    origin: { repo, kind: 'issue', issue: p.issue.number, pullRequest: Boolean(p.issue.pull_request) },
    // The triage role may label issues: starting a session takes write permission, as a /drydock comment does.
    check: { writer: p.sender.login },
  };
}

/** The words after /drydock in a GitHub comment, or why it is not a command. */
const commandIn = (event: string, comment: { body: string; user: { type: string } }) =>
  commandOf(event, comment.body, comment.user.type === 'Bot');

/** A review comment on a drydock pull request: a follow-up to its session (on other PRs it starts nothing). */
function fromReviewComment(p: PayloadOf<'pull_request_review_comment'>): Trigger {
  const command = commandIn('pull_request_review_comment', p.comment);
  if ('ignored' in command) return ignore(command.ignored);
  const repo = p.repository.full_name;
  const head = p.pull_request.head.ref;
  if (!head.startsWith(BRANCH_PREFIX) || p.pull_request.head.repo?.full_name !== repo) {
    return ignore(
      `pull_request_review_comment: ${head} is not a drydock branch of ${repo}; only issue comments start sessions`,
    );
  }
  return {
    kind: 'followup',
    repo,
    pullRequest: p.pull_request.number,
    sessionId: head.slice(BRANCH_PREFIX.length),
    text: scrub(command.text).slice(0, COMMAND_LIMIT),
    by: p.comment.user.login,
    comment: p.comment.id,
  };
}

/** The head of a pull request is a drydock branch of the repo itself: the session it belongs to. */
function drydockSession(repo: string, head: { ref: string; repo: { full_name: string } | null }): string | undefined {
  return head.ref.startsWith(BRANCH_PREFIX) && head.repo?.full_name === repo
    ? head.ref.slice(BRANCH_PREFIX.length)
    : undefined;
}

/**
 * A review submitted on a drydock pull request: its line comments (read from
 * GitHub by the server) and its body become one follow-up round, like the
 * console's review. An approving review asks for nothing more.
 */
function fromReview(p: PayloadOf<'pull_request_review'>): Trigger {
  const repo = p.repository.full_name;
  const sessionId = drydockSession(repo, p.pull_request.head);
  if (!sessionId) return ignore(`pull_request_review: ${p.pull_request.head.ref} is not a drydock branch of ${repo}`);
  if (p.review.user.type === 'Bot') return ignore('pull_request_review: written by a bot');
  if (p.review.state.toLowerCase() === 'approved') {
    return ignore('pull_request_review: an approval asks for no follow-up (approve the change in drydock)');
  }
  return {
    kind: 'followup',
    repo,
    pullRequest: p.pull_request.number,
    sessionId,
    text: scrub(p.review.body ?? '').slice(0, COMMAND_LIMIT),
    by: p.review.user.login,
    comment: p.review.id,
    review: p.review.id,
  };
}

function fromComment(p: PayloadOf<'issue_comment'>): Trigger {
  const command = commandIn('issue_comment', p.comment);
  if ('ignored' in command) return ignore(command.ignored);
  const task = command.text;
  const repo = p.repository.full_name;
  const number = p.issue.number;
  const onPullRequest = Boolean(p.issue.pull_request);
  return {
    kind: 'start',
    sessionId: slug('gh', repo, 'comment', p.comment.id),
    repo,
    // A PR comment works on the PR's head; GitHub keeps it at refs/pull/<n>/head.
    ref: onPullRequest ? `refs/pull/${number}/head` : undefined,
    // A writer's own words are the task; still bounded, and scrubbed of anything token-shaped.
    task: scrub(task).slice(0, COMMAND_LIMIT),
    requestedBy: p.comment.user.login,
    source: `${COMMAND} on ${onPullRequest ? 'pull request' : 'issue'} #${number}`,
    origin: { repo, kind: 'comment', issue: number, pullRequest: onPullRequest, comment: p.comment.id },
    check: { writer: p.comment.user.login, ...(onPullRequest ? { pullRequest: number } : {}) },
  };
}

interface FailedRun {
  event: 'check_run' | 'workflow_run';
  repo: string;
  id: number;
  name: string;
  sha: string;
  branch: string | null;
  conclusion: string | null;
  url: string;
  sender: string;
}

function fromCheckRun(p: PayloadOf<'check_run'>): Trigger {
  const run = p.check_run;
  // GitHub lists only same-repo pull requests here; one whose head is elsewhere is a fork's.
  if (run.pull_requests.some((pr) => pr.head.repo.id !== p.repository.id)) {
    return ignore(`check_run: ${run.name} ran on a fork's pull request; drydock does not start from a fork`);
  }
  const { id, name, head_sha: sha, conclusion, html_url: url } = run;
  const branch = run.check_suite.head_branch;
  return fromFailedRun({
    event: 'check_run',
    repo: p.repository.full_name,
    id,
    name,
    sha,
    branch,
    conclusion,
    url,
    sender: p.sender.login,
  });
}

function fromWorkflowRun(p: PayloadOf<'workflow_run'>): Trigger {
  const run = p.workflow_run;
  const repo = p.repository.full_name;
  if (run.head_repository.full_name.toLowerCase() !== repo.toLowerCase()) {
    return ignore(
      `workflow_run: ${run.name} ran on ${run.head_repository.full_name}, a fork; drydock does not start from a fork`,
    );
  }
  const { id, name, head_sha: sha, head_branch: branch, conclusion, html_url: url } = run;
  return fromFailedRun({ event: 'workflow_run', repo, id, name, sha, branch, conclusion, url, sender: p.sender.login });
}

function fromFailedRun(run: FailedRun): Trigger {
  const { event, repo, sha, branch } = run;
  if (run.conclusion !== 'failure' && run.conclusion !== 'timed_out') {
    return ignore(`${event}: conclusion ${run.conclusion}, nothing to fix`);
  }
  if (!branch) return ignore(`${event}: not on a branch of this repository`);
  // drydock's own branches start no session: the session that pushed one hears of the failure.
  if (branch.startsWith(BRANCH_PREFIX)) {
    return {
      kind: 'ci_failed',
      repo,
      sessionId: branch.slice(BRANCH_PREFIX.length),
      origin: { repo, kind: event, run: run.id, commit: sha, pullRequest: false },
      summary: `"${run.name}" ${run.conclusion === 'timed_out' ? 'timed out' : 'failed'} at ${sha.slice(0, 12)} (${run.url})`,
    };
  }
  return {
    kind: 'start',
    // Keyed by the commit: every failed check of one commit (check_run and workflow_run alike) is one session.
    sessionId: slug('gh-ci', repo, sha.slice(0, 12)),
    repo,
    ref: sha,
    task: `Make CI green on ${branch}: "${run.name}" ${run.conclusion === 'timed_out' ? 'timed out' : 'failed'} at ${sha.slice(0, 12)} (${run.url}).`,
    requestedBy: run.sender,
    pullRequestBase: branch,
    source: `${event} ${run.name} ${run.conclusion} on ${branch}`,
    origin: { repo, kind: event, run: run.id, commit: sha, pullRequest: false },
    check: { branchHead: { branch, sha } },
  };
}

function fromClosedPullRequest(p: PayloadOf<'pull_request'>): Trigger {
  const repo = p.repository.full_name;
  const pr = p.pull_request;
  const head = pr.head.ref;
  if (!head.startsWith(BRANCH_PREFIX) || pr.head.repo?.full_name !== repo) {
    return ignore(`pull_request.closed: ${head} is not a drydock branch of ${repo}`);
  }
  return {
    kind: 'pr_closed',
    // Branches are drydock/<session id> (defaultBranch), and webhook ids are branch-safe.
    sessionId: head.slice(BRANCH_PREFIX.length),
    repo,
    number: pr.number,
    url: pr.html_url,
    merged: pr.merged === true,
    by: p.sender.login,
  };
}
