/**
 * The shape of each Gitea event payload drydock acts on: only the fields it
 * reads, checked with zod before anything reads them (Gitea adds fields over
 * time; they pass through). Read by X-Gitea-Event-Type, which is finer than
 * X-Gitea-Event: "pull_request_comment" and "issue_comment" both arrive as
 * the event "issue_comment", "issue_label" as "issues".
 */
import { z } from 'zod';

const login = z.object({ login: z.string().min(1) });
const repository = z.object({ id: z.number().int(), full_name: z.string().min(1) });
const envelope = { repository, sender: login };
const branch = z.object({ ref: z.string(), sha: z.string(), repo: z.object({ full_name: z.string() }).nullable() });

const issue = z.object({
  number: z.number().int().positive(),
  title: z.string(),
  body: z.string().nullable(),
  html_url: z.string(),
  labels: z.array(z.object({ name: z.string() })).nullable(),
});

/**
 * An issue's labels changed. Gitea's payload says neither which label was
 * added nor removed (its `changes` stays empty): only the labels it has now.
 */
export const issueLabelUpdated = z.object({
  ...envelope,
  action: z.literal('label_updated'),
  issue,
});

/** A comment on an issue, or on a pull request (`is_pull`). */
export const commentCreated = z.object({
  ...envelope,
  action: z.literal('created'),
  issue,
  is_pull: z.boolean(),
  comment: z.object({ id: z.number().int().positive(), body: z.string(), user: login }),
});

export const pullRequestClosed = z.object({
  ...envelope,
  action: z.literal('closed'),
  pull_request: z.object({
    number: z.number().int().positive(),
    html_url: z.string(),
    merged: z.boolean().nullable(),
    head: branch,
  }),
});

/** Per event type (X-Gitea-Event-Type): the action that is read, and the schema of that action's payload. */
export const GITEA_PAYLOADS = {
  issue_label: { action: 'label_updated', schema: issueLabelUpdated },
  issue_comment: { action: 'created', schema: commentCreated },
  pull_request_comment: { action: 'created', schema: commentCreated },
  pull_request: { action: 'closed', schema: pullRequestClosed },
} as const;

export type GiteaEvent = keyof typeof GITEA_PAYLOADS;
export type GiteaPayloadOf<E extends GiteaEvent> = z.infer<(typeof GITEA_PAYLOADS)[E]['schema']>;

export { parsePayload, type Parsed } from '../forge/triggers';
