/**
 * GitLab's webhooks: the X-Gitlab-Token check (constant time, against the
 * current token and one being rotated out), and what each event means to
 * drydock, as a pure function of the event, the body's hash and the payload.
 * GitLab sends a shared secret, not a signature over the body: HTTPS keeps
 * the body intact, and session ids come from the content, so a replayed body
 * finds the session it started and starts nothing new.
 */
import { timingSafeEqual, createHash } from 'node:crypto';
import type { CheckedDelivery, ForgeWebhooks } from '../forge/forge';
import { NO_PROJECT_SECRETS, secretsForDelivery, type ProjectSecrets } from '../forge/webhook-secrets';
import {
  BRANCH_PREFIX,
  COMMAND_LIMIT,
  commandOf,
  ignore,
  LABEL,
  parsePayload,
  slug,
  type Trigger,
} from '../forge/triggers';
import { scrub } from '../platform/scrub';
import { GITLAB_PAYLOADS, type GitLabEvent, type GitLabPayloadOf } from './webhook-payloads';

/** True when `given` is one of `tokens`; compared as hashes, so in constant time whatever their lengths. */
export function tokenMatches(tokens: string[], given: string | undefined): boolean {
  if (!given) return false;
  const digest = (t: string) => createHash('sha256').update(t).digest();
  const mine = digest(given);
  let ok = false;
  for (const token of tokens) if (token && timingSafeEqual(digest(token), mine)) ok = true;
  return ok;
}

/** Where a delivery names its project (a path of groups and the project: `group/sub/project`). */
const PROJECT = ['project', 'path_with_namespace'] as const;

/**
 * GitLab's deliveries: X-Gitlab-Token among the project's own tokens when it has some
 * (forge/webhook-secrets.ts), else DRYDOCK_GITLAB_WEBHOOK_TOKENS; X-Gitlab-Event-UUID for the logs.
 * A token that is nobody's is refused before the body is read.
 */
export function gitlabWebhooks(tokens: string[], projects: ProjectSecrets = NO_PROJECT_SECRETS): ForgeWebhooks {
  return {
    kind: 'gitlab',
    async check(headers, readBody): Promise<CheckedDelivery> {
      const everyone = [...tokens, ...(await projects.all())];
      if (everyone.length === 0) {
        return {
          ok: false,
          status: 503,
          problem: 'GitLab webhooks are not configured (DRYDOCK_GITLAB_WEBHOOK_TOKENS)',
        };
      }
      const given = headers['x-gitlab-token'];
      if (!tokenMatches(everyone, given)) {
        return { ok: false, status: 401, problem: 'missing or wrong X-Gitlab-Token' };
      }
      const body = await readBody();
      const chosen = await secretsForDelivery(tokens, projects, body, PROJECT, 'DRYDOCK_GITLAB_WEBHOOK_TOKENS');
      if (!chosen.ok) return chosen;
      if (!tokenMatches(chosen.secrets, given)) {
        return { ok: false, status: 401, problem: `X-Gitlab-Token is not ${chosen.project ?? 'this project'}'s` };
      }
      const event = headers['x-gitlab-event'];
      // Not covered by the token: for the logs only, never for an id.
      const uuid = headers['x-gitlab-event-uuid'] ?? headers['idempotency-key'];
      if (!event || (uuid !== undefined && !/^[A-Za-z0-9-]{1,100}$/.test(uuid))) {
        return { ok: false, status: 400, problem: 'missing X-Gitlab-Event or a malformed X-Gitlab-Event-UUID' };
      }
      return { ok: true, event, delivery: uuid ?? 'gitlab', body };
    },
    route: routeGitLabEvent,
  };
}

/** A project or group access token's bot user ("project_5_bot_…"): its notes are drydock's or automation's. */
const isBot = (username: string) => /^(project|group)_\d+_bot(_|$)/.test(username);

/** What a GitLab delivery asks of drydock: the payload is validated first (`invalid` names the field). */
export function routeGitLabEvent(event: string, hash: string, payload: unknown): Trigger {
  if (!(event in GITLAB_PAYLOADS)) return ignore(`event '${event}' is not one drydock acts on`);
  const parsed = parsePayload(GITLAB_PAYLOADS[event as GitLabEvent], payload);
  if (!parsed.ok) return { kind: 'invalid', problem: parsed.problem };
  switch (event as GitLabEvent) {
    case 'Issue Hook':
      return fromIssue(parsed.payload as GitLabPayloadOf<'Issue Hook'>, hash);
    case 'Note Hook':
      return fromNote(parsed.payload as GitLabPayloadOf<'Note Hook'>);
    case 'Pipeline Hook':
      return fromPipeline(parsed.payload as GitLabPayloadOf<'Pipeline Hook'>);
    case 'Merge Request Hook':
      return fromMergeRequest(parsed.payload as GitLabPayloadOf<'Merge Request Hook'>);
  }
}

function fromIssue(p: GitLabPayloadOf<'Issue Hook'>, hash: string): Trigger {
  const titles = (labels: { title: string }[]) => labels.map((l) => l.title);
  const change = p.changes.labels;
  const added = change
    ? titles(change.current).includes(LABEL) && !titles(change.previous).includes(LABEL)
    : p.object_attributes.action === 'open' && titles(p.labels).includes(LABEL);
  if (!added) return ignore(`Issue Hook: the ${LABEL} label was not added`);
  const repo = p.project.path_with_namespace;
  const iid = p.object_attributes.iid;
  return {
    kind: 'start',
    sessionId: slug('gl', repo, 'issue', iid, hash),
    repo,
    task: `Resolve issue #${iid}: ${scrub(p.object_attributes.title).replace(/\s+/g, ' ').slice(0, 200)}`,
    requestedBy: p.user.username,
    source: `issue #${iid} labelled ${LABEL}`,
    origin: { repo, kind: 'issue', issue: iid, pullRequest: false },
    check: { writer: p.user.username },
  };
}

/** A drydock merge request: its branch is drydock/<session> in the project itself. */
function drydockSession(p: { id: number }, mr: GitLabPayloadOf<'Merge Request Hook'>['object_attributes']) {
  const ours = mr.source_branch.startsWith(BRANCH_PREFIX) && mr.source_project_id === p.id;
  return ours && mr.target_project_id === p.id ? mr.source_branch.slice(BRANCH_PREFIX.length) : undefined;
}

function fromNote(p: GitLabPayloadOf<'Note Hook'>): Trigger {
  const command = commandOf('Note Hook', p.object_attributes.note, isBot(p.user.username));
  if ('ignored' in command) return ignore(command.ignored);
  const repo = p.project.path_with_namespace;
  const text = scrub(command.text).slice(0, COMMAND_LIMIT);
  const by = p.user.username;
  const comment = p.object_attributes.id;
  const mr = p.object_attributes.noteable_type === 'MergeRequest' ? p.merge_request : undefined;
  if (mr) {
    const sessionId = drydockSession(p.project, { ...mr, url: '', state: '' });
    // A note on one of drydock's merge requests steers its session.
    if (sessionId) return { kind: 'followup', repo, pullRequest: mr.iid, sessionId, text, by, comment };
  } else if (p.object_attributes.noteable_type !== 'Issue' || !p.issue) {
    return ignore(`Note Hook: a note on a ${p.object_attributes.noteable_type} starts nothing`);
  }
  const number = mr ? mr.iid : p.issue!.iid;
  return {
    kind: 'start',
    sessionId: slug('gl', repo, 'note', comment),
    repo,
    // A merge request's note works on its head; GitLab keeps it at refs/merge-requests/<iid>/head.
    ref: mr ? `refs/merge-requests/${number}/head` : undefined,
    task: text,
    requestedBy: by,
    source: `/drydock on ${mr ? 'merge request !' : 'issue #'}${number}`,
    origin: { repo, kind: 'comment', issue: number, pullRequest: Boolean(mr), comment },
    check: { writer: by, ...(mr ? { pullRequest: number } : {}) },
  };
}

function fromPipeline(p: GitLabPayloadOf<'Pipeline Hook'>): Trigger {
  const run = p.object_attributes;
  const repo = p.project.path_with_namespace;
  if (run.status !== 'failed') return ignore(`Pipeline Hook: status ${run.status}, nothing to fix`);
  const mr = p.merge_request;
  if (mr && mr.source_project_id !== undefined && mr.source_project_id !== p.project.id) {
    return ignore(
      `Pipeline Hook: pipeline ${run.id} ran on a fork's merge request; drydock does not start from a fork`,
    );
  }
  if (run.tag) return ignore('Pipeline Hook: a tag pipeline is not on a branch');
  if (run.ref.startsWith(BRANCH_PREFIX)) return ignore(`Pipeline Hook: ${run.ref} is a drydock branch`);
  return {
    kind: 'start',
    // Keyed by the commit, as GitHub's failed runs are: every failed pipeline of one commit is one session.
    sessionId: slug('gl-ci', repo, run.sha.slice(0, 12)),
    repo,
    ref: run.sha,
    task: `Make CI green on ${run.ref}: pipeline ${run.id} failed at ${run.sha.slice(0, 12)}${run.url ? ` (${run.url})` : ''}.`,
    requestedBy: p.user.username,
    pullRequestBase: run.ref,
    source: `pipeline ${run.id} failed on ${run.ref}`,
    // A pipeline is GitLab's workflow run: its failed jobs and their logs are the context.
    origin: { repo, kind: 'workflow_run', run: run.id, commit: run.sha, pullRequest: false },
    check: { branchHead: { branch: run.ref, sha: run.sha } },
  };
}

function fromMergeRequest(p: GitLabPayloadOf<'Merge Request Hook'>): Trigger {
  const mr = p.object_attributes;
  const repo = p.project.path_with_namespace;
  if (mr.action !== 'merge' && mr.action !== 'close') {
    return ignore(`Merge Request Hook: action ${mr.action ?? 'none'}; only merge and close are read`);
  }
  const sessionId = drydockSession(p.project, mr);
  if (!sessionId) return ignore(`Merge Request Hook: ${mr.source_branch} is not a drydock branch of ${repo}`);
  return {
    kind: 'pr_closed',
    sessionId,
    repo,
    number: mr.iid,
    url: mr.url,
    merged: mr.action === 'merge',
    by: p.user.username,
  };
}
