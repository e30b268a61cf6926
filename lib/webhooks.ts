/**
 * Webhook triggers: signature checks over the raw body, and what each GitHub
 * event means to drydock, as a pure function of the event name, the delivery
 * id and the payload (unit-tested without a server).
 */
import type { PullRequestClosed } from '../workflows/api';
import { verifyWithFallback } from '@octokit/webhooks-methods';

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

/** Where a triggered session publishes: a pull request on the repo, onto `base` when given. */
export interface StartTrigger {
  kind: 'start';
  /** Deterministic, so a redelivery finds the session the first delivery started. */
  sessionId: string;
  /** "owner/name": must be a repo drydock serves. */
  repo: string;
  ref?: string;
  task: string;
  requestedBy: string;
  pullRequestBase?: string;
  /** For the log: which event started it. */
  source: string;
}

export interface PullRequestClosedTrigger extends PullRequestClosed {
  kind: 'pr_closed';
}

export type Trigger = StartTrigger | PullRequestClosedTrigger | { kind: 'ignore'; reason: string };

export const LABEL = 'drydock';
export const COMMAND = '/drydock';
/** Comment authors who may start a session: people with write access to the repo. */
const TRUSTED = ['OWNER', 'MEMBER', 'COLLABORATOR'];
const BRANCH_PREFIX = 'drydock/';

/** Workflow-id-safe and branch-safe: lower-case letters, digits and '-'. */
function slug(...parts: string[]): string {
  return parts
    .join('-')
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/-+/g, '-')
    .replace(/^-|-$/g, '');
}

const ignore = (reason: string): Trigger => ({ kind: 'ignore', reason });

/** What a GitHub delivery asks of drydock. */
export function routeGitHubEvent(event: string, delivery: string, payload: any): Trigger {
  const repo: string | undefined = payload?.repository?.full_name;
  const sender: string = payload?.sender?.login ?? 'github';
  if (!repo) return ignore(`${event}: no repository in the payload`);
  const action = payload.action;

  if (event === 'issues') {
    if (action !== 'labeled') return ignore(`issues.${action}: only 'labeled' starts a session`);
    if (payload.label?.name !== LABEL)
      return ignore(`issues.labeled: label '${payload.label?.name}' is not '${LABEL}'`);
    const issue = payload.issue;
    return {
      kind: 'start',
      sessionId: slug('gh', delivery),
      repo,
      task: [issue.title, issue.body].filter(Boolean).join('\n\n'),
      requestedBy: sender,
      source: `issue #${issue.number} labelled ${LABEL}`,
    };
  }

  if (event === 'issue_comment') {
    if (action !== 'created') return ignore(`issue_comment.${action}: only new comments are read`);
    const comment = payload.comment;
    const body: string = (comment?.body ?? '').trim();
    if (!body.startsWith(`${COMMAND} `) && !body.startsWith(`${COMMAND}\n`)) {
      return ignore(`issue_comment: not a ${COMMAND} command`);
    }
    if (comment.user?.type === 'Bot') return ignore('issue_comment: written by a bot');
    if (!TRUSTED.includes(comment.author_association)) {
      return ignore(`issue_comment: ${comment.user?.login} is ${comment.author_association}, not a collaborator`);
    }
    const task = body.slice(COMMAND.length).trim();
    if (!task) return ignore(`issue_comment: ${COMMAND} without a task`);
    const issue = payload.issue;
    const onPullRequest = Boolean(issue.pull_request);
    return {
      kind: 'start',
      sessionId: slug('gh', delivery),
      repo,
      // A PR comment works on the PR's head; GitHub keeps it at refs/pull/<n>/head.
      ref: onPullRequest ? `refs/pull/${issue.number}/head` : undefined,
      task: `${task}\n\n(asked on ${issue.html_url ?? `#${issue.number}`}: ${issue.title})`,
      requestedBy: comment.user?.login ?? sender,
      source: `${COMMAND} on ${onPullRequest ? 'pull request' : 'issue'} #${issue.number}`,
    };
  }

  if (event === 'check_run' || event === 'workflow_run') {
    const run = event === 'check_run' ? payload.check_run : payload.workflow_run;
    if (action !== 'completed') return ignore(`${event}.${action}: only completed runs are read`);
    if (run?.conclusion !== 'failure' && run?.conclusion !== 'timed_out') {
      return ignore(`${event}: conclusion ${run?.conclusion}, nothing to fix`);
    }
    const branch: string | null = event === 'check_run' ? run.check_suite?.head_branch : run.head_branch;
    const sha: string = run.head_sha;
    if (!branch) return ignore(`${event}: not on a branch of this repository`);
    // drydock's own branches are left alone, so a failing fix never starts another session.
    if (branch.startsWith(BRANCH_PREFIX)) return ignore(`${event}: ${branch} is a drydock branch`);
    return {
      kind: 'start',
      // Keyed by the commit, not the delivery: every failed check of one commit
      // (check_run and workflow_run alike) is one session.
      sessionId: slug('gh-ci', repo, sha.slice(0, 12)),
      repo,
      ref: sha,
      task: `Make CI green on ${branch}: "${run.name}" ${run.conclusion === 'timed_out' ? 'timed out' : 'failed'} at ${sha.slice(0, 12)} (${run.html_url}).`,
      requestedBy: sender,
      pullRequestBase: branch,
      source: `${event} ${run.name} ${run.conclusion} on ${branch}`,
    };
  }

  if (event === 'pull_request') {
    if (action !== 'closed') return ignore(`pull_request.${action}: only 'closed' is recorded`);
    const pr = payload.pull_request;
    const head: string = pr.head?.ref ?? '';
    if (!head.startsWith(BRANCH_PREFIX) || pr.head?.repo?.full_name !== repo) {
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
      by: sender,
    };
  }

  return ignore(`event '${event}' is not one drydock acts on`);
}
