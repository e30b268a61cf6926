/**
 * The shape of each GitHub event payload drydock acts on: only the fields it
 * reads, checked with zod before anything else reads them. Other fields pass
 * through (GitHub adds fields over time). A signed delivery that does not
 * match answers 422 naming the field, never a TypeError and a 500.
 */
import { z } from 'zod';

const login = z.object({ login: z.string().min(1) });
const repository = z.object({ id: z.number().int(), full_name: z.string().min(1) });
const envelope = { repository, sender: login };

const issue = z.object({
  number: z.number().int().positive(),
  title: z.string(),
  body: z.string().nullable(),
  html_url: z.string(),
  /** Present (an object) when the issue is a pull request. */
  pull_request: z.object({}).optional(),
});

export const issueLabeled = z.object({
  ...envelope,
  action: z.literal('labeled'),
  label: z.object({ name: z.string() }),
  issue,
});

export const issueCommentCreated = z.object({
  ...envelope,
  action: z.literal('created'),
  issue,
  comment: z.object({
    id: z.number().int().positive(),
    body: z.string(),
    user: z.object({ login: z.string().min(1), type: z.string() }),
  }),
});

const runPullRequests = z.array(
  z.object({ head: z.object({ repo: z.object({ id: z.number().int() }) }), number: z.number().int() }),
);

export const checkRunCompleted = z.object({
  ...envelope,
  action: z.literal('completed'),
  check_run: z.object({
    id: z.number().int().positive(),
    name: z.string(),
    head_sha: z.string().regex(/^[0-9a-f]{40}$/, 'a commit sha'),
    conclusion: z.string().nullable(),
    html_url: z.string(),
    check_suite: z.object({ head_branch: z.string().nullable() }),
    pull_requests: runPullRequests,
  }),
});

export const workflowRunCompleted = z.object({
  ...envelope,
  action: z.literal('completed'),
  workflow_run: z.object({
    id: z.number().int().positive(),
    name: z.string(),
    head_sha: z.string().regex(/^[0-9a-f]{40}$/, 'a commit sha'),
    head_branch: z.string().nullable(),
    conclusion: z.string().nullable(),
    html_url: z.string(),
    head_repository: z.object({ full_name: z.string().min(1) }),
  }),
});

export const pullRequestClosed = z.object({
  ...envelope,
  action: z.literal('closed'),
  pull_request: z.object({
    number: z.number().int().positive(),
    html_url: z.string(),
    merged: z.boolean().nullable(),
    head: z.object({ ref: z.string(), repo: z.object({ full_name: z.string() }).nullable() }),
  }),
});

export const reviewCommentCreated = z.object({
  ...envelope,
  action: z.literal('created'),
  pull_request: z.object({
    number: z.number().int().positive(),
    head: z.object({ ref: z.string(), repo: z.object({ full_name: z.string() }).nullable() }),
  }),
  comment: z.object({
    id: z.number().int().positive(),
    body: z.string(),
    user: z.object({ login: z.string().min(1), type: z.string() }),
  }),
});

/** A review submitted on a pull request: its line comments are read from the API (GitHub sends them apart). */
export const reviewSubmitted = z.object({
  ...envelope,
  action: z.literal('submitted'),
  pull_request: z.object({
    number: z.number().int().positive(),
    head: z.object({ ref: z.string(), repo: z.object({ full_name: z.string() }).nullable() }),
  }),
  review: z.object({
    id: z.number().int().positive(),
    body: z.string().nullable(),
    state: z.string(),
    user: z.object({ login: z.string().min(1), type: z.string() }),
  }),
});

/** Per event: the action that is read, and the schema of that action's payload. */
export const PAYLOADS = {
  issues: { action: 'labeled', schema: issueLabeled },
  issue_comment: { action: 'created', schema: issueCommentCreated },
  check_run: { action: 'completed', schema: checkRunCompleted },
  workflow_run: { action: 'completed', schema: workflowRunCompleted },
  pull_request: { action: 'closed', schema: pullRequestClosed },
  pull_request_review_comment: { action: 'created', schema: reviewCommentCreated },
  pull_request_review: { action: 'submitted', schema: reviewSubmitted },
} as const;

export type PayloadEvent = keyof typeof PAYLOADS;
export type PayloadOf<E extends PayloadEvent> = z.infer<(typeof PAYLOADS)[E]['schema']>;

export { parsePayload, type Parsed } from '../forge/triggers';
