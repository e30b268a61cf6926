/**
 * The identities file's roles (identity/roles.ts) applied to what `drydock
 * serve` is asked, from the API, the console, attach, Slack, Linear and
 * GitHub alike. A session's repo is the registry's name for its URL (the
 * `DrydockRepo` search attribute every session and attempts workflow has
 * from its start). A session its caller may not read answers as one that
 * does not exist (404, the same words), so ids do not leak; every other
 * refusal is a 403 naming the role and the repo. Without a `roles` section
 * nothing is looked up and everything is allowed, as before.
 */
import type { IncomingMessage } from 'node:http';
import { WorkflowNotFoundError } from '@temporalio/client';
import { decisionRefusal, REQUESTER_UNKNOWN, steeringRefusal, type Role, type SessionRef } from '../identity/roles';
import { REPO_ATTRIBUTE, type SessionStatus } from '../workflows/api';
import { redactUrl } from '../workflows/rules/repo-url';
import { HttpError, identify, statusOr404, type ServeContext } from './http';

/**
 * What the rules need of a session (or an attempts workflow): its repo's URL
 * and its requester. A status from the memo (`unanswered`: no worker answered
 * in time) has no requester.
 */
type Session = { repo: string; requestedBy?: string; unanswered?: unknown };

/** A session, or how to read it: read only when roles are configured (without them nothing is asked). */
type SessionSource = Session | (() => Promise<Session>);

const notFound = (id: string) => new HttpError(404, `no session ${id}`);

/** The registered name of the repo cloned from `url`; undefined when the registry does not name it. */
async function registeredName(ctx: ServeContext, url: string): Promise<string | undefined> {
  const found = await ctx.repos.byUrl(url);
  return found.ok ? found.repo.name : undefined;
}

/** The session as the rules see it (no lookup without roles). */
export async function sessionRef(ctx: ServeContext, source: SessionSource): Promise<SessionRef> {
  if (!ctx.identities.roles.configured) return { repo: undefined };
  const s = typeof source === 'function' ? await source() : source;
  const repo = await registeredName(ctx, s.repo);
  const requesterUnknown = s.unanswered !== undefined && s.requestedBy === undefined;
  return { repo, shown: repo ?? redactUrl(s.repo), requestedBy: s.requestedBy, requesterUnknown };
}

/** Whether `who` may read the sessions of the repo cloned from `url`. */
export async function mayRead(ctx: ServeContext, who: string, url: string): Promise<boolean> {
  const roles = ctx.identities.roles;
  return !roles.configured || roles.holds(who, await registeredName(ctx, url), 'reader');
}

/**
 * Whether the request that opened a long-lived stream (the console's events)
 * still speaks for `who` (its token or cookie not revoked, not signed out) and
 * `who` still reads the repo cloned from `url`: checked again before each
 * event, not only at connect.
 */
export async function stillReads(ctx: ServeContext, req: IncomingMessage, who: string, url: string): Promise<boolean> {
  return (await identify(req, ctx.identities)) === who && (await mayRead(ctx, who, url));
}

/** Throws 404 for a session `who` may not read, as for one that does not exist. */
export async function requireReadable(ctx: ServeContext, who: string, id: string, s: Session): Promise<void> {
  if (!(await mayRead(ctx, who, s.repo))) throw notFound(id);
}

/** A session's status for `who`: 404 when there is none or they may not read it. */
export async function readableStatus(ctx: ServeContext, id: string, who: string): Promise<SessionStatus> {
  const s = await statusOr404(ctx.client, id);
  await requireReadable(ctx, who, id, s);
  return s;
}

/** For what needs no status (an artifact): the workflow's repo from its search attribute; 404 as above. */
export async function requireReadableId(ctx: ServeContext, who: string, id: string): Promise<void> {
  if (!ctx.identities.roles.configured) return;
  let repo: string | undefined;
  try {
    repo = (await ctx.client.workflow.getHandle(id).describe()).typedSearchAttributes.get(REPO_ATTRIBUTE);
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) throw notFound(id);
    throw err;
  }
  if (repo === undefined || !(await mayRead(ctx, who, repo))) throw notFound(id);
}

/**
 * The repo URLs whose sessions `who` may list; undefined: every repo (no
 * roles, or a role on `*`, which also covers repos the registry does not name).
 */
export async function readableRepos(ctx: ServeContext, who: string): Promise<string[] | undefined> {
  const roles = ctx.identities.roles;
  if (roles.readsEverything(who)) return undefined;
  return (await ctx.repos.list()).filter((r) => roles.holds(who, r.name, 'reader')).map((r) => r.url);
}

/** 403 unless `who` holds `role` on the registered repo `name` (starting a session: requester). */
export function requireRole(ctx: ServeContext, who: string, name: string, role: Role): void {
  const refused = ctx.identities.roles.refusal(who, name, role);
  if (refused) throw new HttpError(403, refused);
}

/** Why `who` may not approve or reject this session (or pick one of its attempts); undefined when they may. */
export async function decisionRefused(
  ctx: ServeContext,
  who: string,
  s: SessionSource,
  decision: 'approve' | 'reject',
): Promise<string | undefined> {
  return decisionRefusal(ctx.identities.roles, who, await sessionRef(ctx, s), decision);
}

/** 403 unless `who` may approve or reject this session (or pick one of its attempts). */
export async function requireDecider(
  ctx: ServeContext,
  who: string,
  s: SessionSource,
  decision: 'approve' | 'reject',
): Promise<void> {
  const refused = await decisionRefused(ctx, who, s, decision);
  if (refused) throw new HttpError(refused === REQUESTER_UNKNOWN ? 503 : 403, refused);
}

/** Why `who` may not send this session a follow-up or attach to it; undefined when they may. */
export async function steeringRefused(ctx: ServeContext, who: string, s: SessionSource): Promise<string | undefined> {
  return steeringRefusal(ctx.identities.roles, who, await sessionRef(ctx, s));
}

/** 403 unless `who` reads every repo: the figures, reports and pilots span them all. */
export function requireReadsEverything(ctx: ServeContext, who: string): void {
  if (!ctx.identities.roles.readsEverything(who)) {
    throw new HttpError(
      403,
      `${who} may not read the figures of every repo: that needs the reader role on "*" in the identities file's roles`,
    );
  }
}
