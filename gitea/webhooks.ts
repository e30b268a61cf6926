/**
 * Gitea's webhooks as a forge's (forge/forge.ts, ForgeWebhooks): a delivery is
 * checked by its X-Gitea-Signature (the hex HMAC-SHA256 of the body under the
 * hook's secret) before anything is read, then routed by X-Gitea-Event-Type to
 * the same triggers as GitHub's: an issue labelled drydock, a /drydock comment
 * (on a drydock pull request: a follow-up), a drydock pull request closed.
 * Gitea sends no timestamp to bound a replay; as on GitHub, session ids come
 * from signed content only, so a replayed body finds what it started.
 */
import type { ForgeWebhooks } from '../forge/forge';
import {
  NO_PROJECT_SECRETS,
  secretsForDelivery,
  signatureProblem,
  type ProjectSecrets,
} from '../forge/webhook-secrets';
import { BRANCH_PREFIX, COMMAND, COMMAND_LIMIT, commandOf, ignore, LABEL, slug, type Trigger } from '../forge/triggers';
import { scrub } from '../platform/scrub';
import { GITEA_PAYLOADS, parsePayload, type GiteaEvent, type GiteaPayloadOf } from './webhook-payloads';
import { GITEA_SIGNATURE, giteaSignatureMatches } from './signature';
import { z } from 'zod';

/** A delivery's id: Gitea's is a UUID (unsigned: for the logs only). */
const DELIVERY = /^[A-Za-z0-9-]{1,100}$/;
const EVENT_TYPE = /^[a-z_]{1,60}$/;

/** Where a delivery names its repository. */
const REPOSITORY = ['repository', 'full_name'] as const;

/** Gitea's deliveries: signed with the repository's own secrets when it has some, else the forge's. */
export function giteaWebhooks(secrets: string[], projects: ProjectSecrets = NO_PROJECT_SECRETS): ForgeWebhooks {
  return {
    kind: 'gitea',
    async check(headers, readBody) {
      if (secrets.length === 0 && (await projects.all()).length === 0) {
        return { ok: false, status: 503, problem: 'Gitea webhooks are not configured (DRYDOCK_GITEA_WEBHOOK_SECRETS)' };
      }
      const signature = headers['x-gitea-signature'];
      if (!signature || !GITEA_SIGNATURE.test(signature)) {
        return { ok: false, status: 401, problem: 'missing or malformed X-Gitea-Signature (set a secret on the hook)' };
      }
      const body = await readBody();
      const chosen = await secretsForDelivery(secrets, projects, body, REPOSITORY, 'DRYDOCK_GITEA_WEBHOOK_SECRETS');
      if (!chosen.ok) return chosen;
      if (!giteaSignatureMatches(chosen.secrets, body, signature)) {
        return { ok: false, status: 401, problem: signatureProblem(chosen.project) };
      }
      const event = headers['x-gitea-event-type'];
      const delivery = headers['x-gitea-delivery'];
      if (!event || !EVENT_TYPE.test(event) || !delivery || !DELIVERY.test(delivery)) {
        return { ok: false, status: 400, problem: 'missing X-Gitea-Event-Type or a well-formed X-Gitea-Delivery' };
      }
      return { ok: true, event, delivery, body };
    },
    route: routeGiteaEvent,
  };
}

/** What a Gitea delivery asks of drydock: validated first (`invalid` names the field), then read. */
export function routeGiteaEvent(event: string, _hash: string, payload: unknown): Trigger {
  if (!(event in GITEA_PAYLOADS)) return ignore(`event '${event}' is not one drydock acts on`);
  const expected = GITEA_PAYLOADS[event as GiteaEvent];
  const action = parsePayload(z.object({ action: z.string() }), payload);
  if (!action.ok) return { kind: 'invalid', problem: action.problem };
  if (action.payload.action !== expected.action) {
    return ignore(`${event}.${action.payload.action}: only '${expected.action}' is read`);
  }
  const parsed = parsePayload(expected.schema, payload);
  if (!parsed.ok) return { kind: 'invalid', problem: parsed.problem };
  switch (event as GiteaEvent) {
    case 'issue_label':
      return fromLabel(parsed.payload as GiteaPayloadOf<'issue_label'>);
    case 'issue_comment':
    case 'pull_request_comment':
      return fromComment(event, parsed.payload as GiteaPayloadOf<'issue_comment'>);
    case 'pull_request':
      return fromClosed(parsed.payload as GiteaPayloadOf<'pull_request'>);
  }
}

function fromLabel(p: GiteaPayloadOf<'issue_label'>): Trigger {
  const labels = (p.issue.labels ?? []).map((l) => l.name);
  if (!labels.includes(LABEL)) return ignore(`issue_label: the issue is not labelled '${LABEL}'`);
  const repo = p.repository.full_name;
  return {
    kind: 'start',
    // Keyed by the issue alone: Gitea says which labels an issue has, not which was added, so
    // another label changed later is the same request (a session id is never used twice).
    sessionId: slug('gitea', repo, 'issue', p.issue.number),
    repo,
    task: `Resolve issue #${p.issue.number}: ${scrub(p.issue.title).replace(/\s+/g, ' ').slice(0, 200)}`,
    requestedBy: p.sender.login,
    source: `issue #${p.issue.number} labelled ${LABEL}`,
    origin: { forge: 'gitea', repo, kind: 'issue', issue: p.issue.number, pullRequest: false },
    check: { writer: p.sender.login },
  };
}

function fromComment(event: string, p: GiteaPayloadOf<'issue_comment'>): Trigger {
  // Gitea marks no account as a bot in its payloads; drydock's own comments never start with the command.
  const command = commandOf(event, p.comment.body, false);
  if ('ignored' in command) return ignore(command.ignored);
  const repo = p.repository.full_name;
  const number = p.issue.number;
  const onPullRequest = p.is_pull;
  return {
    kind: 'start',
    sessionId: slug('gitea', repo, 'comment', p.comment.id),
    repo,
    // Gitea keeps a pull request's head at refs/pull/<n>/head, as GitHub does.
    ref: onPullRequest ? `refs/pull/${number}/head` : undefined,
    task: scrub(command.text).slice(0, COMMAND_LIMIT),
    requestedBy: p.comment.user.login,
    source: `${COMMAND} on ${onPullRequest ? 'pull request' : 'issue'} #${number}`,
    origin: { forge: 'gitea', repo, kind: 'comment', issue: number, pullRequest: onPullRequest, comment: p.comment.id },
    check: { writer: p.comment.user.login, ...(onPullRequest ? { pullRequest: number } : {}) },
  };
}

function fromClosed(p: GiteaPayloadOf<'pull_request'>): Trigger {
  const repo = p.repository.full_name;
  const pr = p.pull_request;
  const head = pr.head.ref;
  if (!head.startsWith(BRANCH_PREFIX) || pr.head.repo?.full_name !== repo) {
    return ignore(`pull_request.closed: ${head} is not a drydock branch of ${repo}`);
  }
  return {
    kind: 'pr_closed',
    sessionId: head.slice(BRANCH_PREFIX.length),
    repo,
    number: pr.number,
    url: pr.html_url,
    merged: pr.merged === true,
    by: p.sender.login,
  };
}
