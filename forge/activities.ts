/**
 * A forge's activities, on the worker (which holds the credentials), the same
 * for every forge: the task with its context, progress reported back, the
 * change request opened or updated (never a second one, audited before and
 * after). The forge is chosen per repository (forge/registry.ts).
 *
 * The activity names are those of drydock's first forge (`reportToGitHub`,
 * `openPullRequest`): they are in every recorded workflow history, and a
 * renamed activity would not replay.
 */
import { randomBytes } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/api';
import type { TriggerOrigin } from '../workflows/input';
import type { Logger } from '../platform/log';
import { recordAction, type AuditTrail } from '../store/audit';
import { taskWithContext } from './context';
import type { ChangeRequestRef, Forge, ForgeKind, ForgePurpose } from './forge';
import { reportProgress, type ProgressInput } from './progress';
import { ForgeNotConfigured, type ForgeSet } from './registry';

export interface ChangeRequestInput {
  sessionId: string;
  /** "owner/name" (GitLab: the project's path). */
  repo: string;
  head: string;
  base?: string;
  draft: boolean;
  title: string;
  /** The body without the session link, which the worker adds. */
  body: string;
  /** The session's round: a follow-up round updates the same change request, audited on its own. */
  round?: number;
  /** Which forge; default: by `repoUrl`, else GitHub. */
  forge?: ForgeKind;
  repoUrl?: string;
}

/** What the forge activities use of the worker. */
export interface ForgeActivityDeps {
  forges: ForgeSet;
  /** Link to a session in the Temporal Web UI (change request bodies). */
  sessionLink: (sessionId: string) => string;
  /** Link to a session in the review console, for the forge (default: sessionLink). */
  reviewLink?: (sessionId: string) => string;
  /** The secrets a session may grant: scrubbed from what the forge's context brings in. */
  secrets: Record<string, string>;
  /** Values scrubbed besides the secrets (the worker's forge tokens). */
  knownSecrets?: () => string[];
  /** Absent: change requests are not audited (only tests leave it out). */
  audit?: AuditTrail;
  log: Logger;
}

/** A forge's permanent answers become non-retryable, typed by forge; the rest is retried by Temporal. */
export function forgeFailure(forge: Forge, err: unknown, context: { purpose: ForgePurpose; repo: string }): never {
  if (err instanceof ForgeNotConfigured) throw ApplicationFailure.nonRetryable(err.message, ErrorType.ForgeAuth);
  const failure = forge.failure(err, context);
  if (!failure) throw err;
  const github = forge.kind === 'github';
  const type =
    failure.kind === 'auth'
      ? github
        ? ErrorType.GitHubAuth
        : ErrorType.ForgeAuth
      : github
        ? ErrorType.GitHubRequest
        : ErrorType.ForgeRequest;
  throw ApplicationFailure.nonRetryable(failure.message, type);
}

function pick(forges: ForgeSet, of: { forge?: ForgeKind; url?: string }): Forge {
  try {
    return forges.pick(of);
  } catch (err) {
    if (err instanceof ForgeNotConfigured) throw ApplicationFailure.nonRetryable(err.message, ErrorType.ForgeAuth);
    throw err;
  }
}

export function createForgeActivities(deps: ForgeActivityDeps) {
  const { forges, sessionLink, reviewLink, secrets, audit, log } = deps;
  const linkTo = (sessionId: string) => (reviewLink ?? sessionLink)(sessionId);
  return {
    /** The task with what the forge holds about its origin, bounded, scrubbed and delimited as data. */
    async triggerTask(input: {
      sessionId: string;
      task: string;
      trigger: TriggerOrigin;
      repoUrl?: string;
    }): Promise<string> {
      const forge = pick(forges, { forge: input.trigger.forge, url: input.repoUrl });
      try {
        const sections = await forge.repo(input.trigger.repo, 'context').readContext(input.trigger);
        const known = [...(deps.knownSecrets?.() ?? []), ...Object.values(secrets)].filter(Boolean);
        return taskWithContext(input.task, sections, randomBytes(8).toString('hex'), known, forge.name);
      } catch (err) {
        forgeFailure(forge, err, { purpose: 'context', repo: input.trigger.repo });
      }
    },

    /** Tells the forge where the session is: an acknowledgement, the commit's report, the change request's link. */
    async reportToGitHub(input: ProgressInput): Promise<void> {
      const { sessionId, trigger, stage } = input;
      const forge = pick(forges, { forge: trigger.forge, url: input.repoUrl });
      try {
        await reportProgress(forge.repo(trigger.repo, 'progress'), input, linkTo(sessionId));
        log.info({ sessionId, stage, repo: trigger.repo, forge: forge.kind }, `reported to ${forge.name}`);
      } catch (err) {
        forgeFailure(forge, err, { purpose: 'progress', repo: trigger.repo });
      }
    },

    /** Opens or updates the change request for the pushed branch; never a second one. */
    async openPullRequest(input: ChangeRequestInput): Promise<ChangeRequestRef> {
      const forge = pick(forges, { forge: input.forge, url: input.repoUrl });
      const target = { repo: input.repo, head: input.head, base: input.base, draft: input.draft };
      if (audit) await recordAction(audit, input.sessionId, 'pull_request', 'intent', target, input.round);
      try {
        const cr = await forge.repo(input.repo, 'publish').upsertChangeRequest({
          head: input.head,
          base: input.base,
          draft: input.draft,
          title: input.title,
          body: `${input.body}\n\n---\nSession: ${sessionLink(input.sessionId)}\n`,
        });
        log.info({ sessionId: input.sessionId, pr: cr.url, created: cr.created, forge: forge.kind }, 'pull request');
        if (audit)
          await recordAction(audit, input.sessionId, 'pull_request', 'done', { ...target, ...cr }, input.round);
        return cr;
      } catch (err) {
        forgeFailure(forge, err, { purpose: 'publish', repo: input.repo });
      }
    },
  };
}
