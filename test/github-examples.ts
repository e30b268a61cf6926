/**
 * GitHub's own example webhook payloads (@octokit/webhooks-examples), picked
 * by event and action. A test sets only the fields that select drydock's
 * behaviour (a label's name, a comment's text, a run's conclusion, a commit
 * that exists in the fixture repo); the rest is GitHub's payload as is.
 */
// eslint-disable-next-line @typescript-eslint/no-require-imports
const examples: { name: string; examples: any[] }[] = require('@octokit/webhooks-examples');

export function example(event: string, pick: (payload: any) => boolean = () => true): any {
  const found = examples.find((e) => e.name === event)?.examples.find(pick);
  if (!found) throw new Error(`no example payload for ${event}`);
  return structuredClone(found);
}

export const EXAMPLE_REPO = 'Codertocat/Hello-World';
