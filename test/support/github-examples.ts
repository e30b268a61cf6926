/**
 * GitHub's own example webhook payloads (@octokit/webhooks-examples), picked
 * by event and action. A test sets only the fields that select drydock's
 * behaviour (a label's name, a comment's text, a run's conclusion, a commit
 * that exists in the fixture repo); the rest is GitHub's payload as is.
 */
import { PAYLOADS, type PayloadEvent } from '../../github/webhook-payloads';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const examples: { name: string; examples: any[] }[] = require('@octokit/webhooks-examples');

export function example(event: string, pick: (payload: any) => boolean = () => true): any {
  const found = examples.find((e) => e.name === event)?.examples.find(pick);
  if (!found) throw new Error(`no example payload for ${event}`);
  return structuredClone(found);
}

export const EXAMPLE_REPO = 'Codertocat/Hello-World';

/** For each event drydock reads, GitHub's example of the action that is read, set up to act. */
export function actionable(event: PayloadEvent): any {
  const payload = example(event, (p) => p.action === PAYLOADS[event].action);
  if (event === 'issues') payload.label.name = 'drydock';
  if (event === 'issue_comment') payload.comment.body = '/drydock fix it';
  if (event === 'workflow_run') payload.workflow_run.conclusion = 'failure';
  return payload;
}

/**
 * Every field a zod object schema requires, as dotted paths, nested objects
 * included: the fields a test drops in turn to build schema-invalid payloads.
 */
export function requiredPaths(schema: unknown, prefix: string[] = []): string[][] {
  const shape = (schema as { shape?: Record<string, { safeParse(v: unknown): { success: boolean } }> }).shape;
  if (!shape) return [];
  return Object.entries(shape).flatMap(([key, field]) => {
    if (field.safeParse(undefined).success) return [];
    const path = [...prefix, key];
    return [path, ...requiredPaths(field, path)];
  });
}

/** A copy of `payload` without the field at `path`. */
export function without(payload: any, path: string[]): any {
  const copy = structuredClone(payload);
  const parent = path.slice(0, -1).reduce((o, k) => o[k], copy);
  delete parent[path[path.length - 1]];
  return copy;
}
