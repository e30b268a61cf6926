/**
 * What Slack sends drydock, validated: slash commands (a form), Events API
 * callbacks (app mentions, thread replies) and interactions (the Approve and
 * Reject buttons). Pure: unit-tested with Slack's documented payloads.
 */
import { z } from 'zod';
import { scrub } from '../platform/scrub';
import { GATED_ACTIONS } from '../workflows/api';

const id = z.string().regex(/^[A-Z0-9]{1,30}$/, 'a Slack id');
const ts = z.string().regex(/^\d{1,12}\.\d{1,8}$/, 'a Slack message ts');

/** A task from Slack becomes the agent's request: bounded, and scrubbed of anything token-shaped. */
export const TASK_LIMIT = 4_000;

export const slashCommand = z.object({
  command: z.string().min(1),
  text: z.string().max(TASK_LIMIT * 2),
  team_id: id,
  channel_id: id,
  user_id: id,
  trigger_id: z.string().regex(/^[0-9a-zA-Z.]{1,100}$/, 'a trigger id'),
});
export type SlashCommand = z.infer<typeof slashCommand>;

export const appMention = z.object({
  type: z.literal('app_mention'),
  user: id,
  text: z.string().max(TASK_LIMIT * 2),
  ts,
  channel: id,
  thread_ts: ts.optional(),
});

/** A message in a channel: drydock reads only people's replies in a thread. */
export const channelMessage = z.object({
  type: z.literal('message'),
  subtype: z.string().optional(),
  bot_id: z.string().optional(),
  user: id.optional(),
  text: z
    .string()
    .max(TASK_LIMIT * 2)
    .optional(),
  ts,
  channel: id,
  thread_ts: ts.optional(),
});

export const eventEnvelope = z.discriminatedUnion('type', [
  z.object({ type: z.literal('url_verification'), challenge: z.string().min(1).max(200) }),
  z.object({
    type: z.literal('event_callback'),
    team_id: id,
    event_id: z.string().min(1).max(100),
    event: z.object({ type: z.string() }).loose(),
  }),
]);

/** The value an Approve or Reject button carries: the change it was shown for. */
export const buttonValue = z.object({
  session: z.string().min(1).max(200),
  action: z.enum(GATED_ACTIONS),
  change: z.string().regex(/^[0-9a-f]{12,64}$/, 'a change hash'),
});
export type ButtonValue = z.infer<typeof buttonValue>;

export const blockActions = z.object({
  type: z.literal('block_actions'),
  user: z.object({ id }),
  channel: z.object({ id }),
  message: z.object({ ts, thread_ts: ts.optional() }),
  actions: z
    .array(z.object({ action_id: z.string(), value: z.string().max(2000).optional() }))
    .min(1)
    .max(5),
});

/** The first problem of a payload, naming its field. */
export function problemOf(error: z.ZodError): string {
  const issue = error.issues[0];
  return `${issue.path.join('.') || 'payload'}: ${issue.message}`;
}

/**
 * `[owner/name] <task>`: a leading word shaped like a repo may name it (the
 * caller checks that drydock serves it; if not, `whole` is the task). A
 * mention of the app is dropped first; the texts are bounded and scrubbed.
 */
export function splitRequest(text: string): { repo?: string; task: string; whole: string } {
  const words = text.replace(/<@[A-Z0-9]+(\|[^>]*)?>/g, ' ').trim();
  const clean = (s: string) => scrub(s.trim()).slice(0, TASK_LIMIT);
  const m = /^([A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+)\s+([\s\S]+)$/.exec(words);
  return { ...(m ? { repo: m[1] } : {}), task: clean(m ? m[2] : words), whole: clean(words) };
}

/** A session id from signed content only: the same request (a retry, a redelivery) is the same session. */
export function slackSessionId(...parts: string[]): string {
  return ['slack', ...parts]
    .join('-')
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/-+/g, '-')
    .replace(/^-|-$/g, '')
    .slice(0, 100);
}
