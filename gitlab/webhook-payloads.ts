/**
 * The shape of each GitLab webhook payload drydock acts on (by X-Gitlab-Event):
 * only the fields it reads, checked with zod before anything reads them.
 * Other fields pass through. A delivery that does not match answers 422
 * naming the field.
 */
import { z } from 'zod';

const user = z.object({ id: z.number().int(), username: z.string().min(1) });
const project = z.object({ id: z.number().int(), path_with_namespace: z.string().min(1) });
const label = z.object({ title: z.string() });
const envelope = { user, project };

export const issueHook = z.object({
  ...envelope,
  object_kind: z.literal('issue'),
  object_attributes: z.object({
    iid: z.number().int().positive(),
    title: z.string(),
    action: z.string().optional(),
  }),
  labels: z.array(label).default([]),
  changes: z.object({ labels: z.object({ previous: z.array(label), current: z.array(label) }).optional() }).default({}),
});

const mergeRequestRef = z.object({
  iid: z.number().int().positive(),
  source_branch: z.string(),
  source_project_id: z.number().int(),
  target_project_id: z.number().int(),
});

export const noteHook = z.object({
  ...envelope,
  object_kind: z.literal('note'),
  object_attributes: z.object({
    id: z.number().int().positive(),
    note: z.string(),
    noteable_type: z.string(),
  }),
  issue: z.object({ iid: z.number().int().positive() }).optional(),
  merge_request: mergeRequestRef.optional(),
});

export const pipelineHook = z.object({
  ...envelope,
  object_kind: z.literal('pipeline'),
  object_attributes: z.object({
    id: z.number().int().positive(),
    ref: z.string(),
    tag: z.boolean().default(false),
    sha: z.string().regex(/^[0-9a-f]{40}$/, 'a commit sha'),
    status: z.string(),
    url: z.string().optional(),
  }),
  merge_request: mergeRequestRef.partial().nullable().optional(),
});

export const mergeRequestHook = z.object({
  ...envelope,
  object_kind: z.literal('merge_request'),
  object_attributes: mergeRequestRef.extend({
    url: z.string(),
    state: z.string(),
    action: z.string().optional(),
  }),
});

/** Per X-Gitlab-Event: the schema of its payload. */
export const GITLAB_PAYLOADS = {
  'Issue Hook': issueHook,
  'Note Hook': noteHook,
  'Pipeline Hook': pipelineHook,
  'Merge Request Hook': mergeRequestHook,
} as const;

export type GitLabEvent = keyof typeof GITLAB_PAYLOADS;
export type GitLabPayloadOf<E extends GitLabEvent> = z.infer<(typeof GITLAB_PAYLOADS)[E]>;
