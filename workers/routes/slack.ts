/**
 * The Slack app's endpoints: `POST /slack/commands` (`/drydock <task>`),
 * `POST /slack/events` (a mention of the app starts a session; a reply in a
 * session's thread is a follow-up) and `POST /slack/interactions` (Approve and
 * Reject). Every request is checked against the signing secret first; each is
 * answered within Slack's 3 seconds, the work going on in Temporal.
 */
import type { IncomingMessage } from 'node:http';
import { WorkflowNotFoundError, WorkflowUpdateFailedError } from '@temporalio/client';
import { FollowupRefused, getStatus, sendFollowup } from '../../platform/sessions';
import { SlackThreads } from '../../slack/client';
import {
  appMention,
  blockActions,
  buttonValue,
  channelMessage,
  eventEnvelope,
  problemOf,
  slackSessionId,
  slashCommand,
  splitRequest,
} from '../../slack/requests';
import { checkSlackSignature } from '../../slack/signature';
import { decide } from '../../workflows/api';
import { decisionRefused, steeringRefused } from '../access';
import { header, HttpError, parseJson, readBody, type ServeContext } from '../http';
import { boundRepo, startFromChat } from './triggered';

type Answer = [number, unknown];

const clients = new WeakMap<ServeContext, SlackThreads>();

/** Serve's Slack client (the bot token): replies in threads, the session of a thread. */
function threadsOf(ctx: ServeContext): SlackThreads {
  const token = ctx.config.DRYDOCK_SLACK_BOT_TOKEN;
  if (!token) throw new HttpError(503, 'Slack is not configured (DRYDOCK_SLACK_BOT_TOKEN)');
  let threads = clients.get(ctx);
  if (!threads) clients.set(ctx, (threads = new SlackThreads({ token, apiUrl: ctx.config.DRYDOCK_SLACK_API_URL })));
  return threads;
}

/** The raw body, once its signature checks out: nothing is parsed before. */
async function signedBody(ctx: ServeContext, req: IncomingMessage): Promise<Buffer> {
  const secret = ctx.config.DRYDOCK_SLACK_SIGNING_SECRET;
  if (!secret) throw new HttpError(503, 'Slack is not configured (DRYDOCK_SLACK_SIGNING_SECRET)');
  const body = await readBody(req, ctx.config.DRYDOCK_HTTP_MAX_BODY);
  const headers = { timestamp: header(req, 'x-slack-request-timestamp'), signature: header(req, 'x-slack-signature') };
  const check = checkSlackSignature(secret, headers, body);
  if (!check.ok) throw new HttpError(401, check.reason);
  return body;
}

function notMapped(user: string): string {
  return `<@${user}> is not anyone in drydock's identities file: ask the operator to add your Slack member id ${user}`;
}

/** The repo a request names (when drydock serves it) and the task; else the channel's repo and the whole text. */
async function repoOf(ctx: ServeContext, channel: string, text: string) {
  const { repo: named, task, whole } = splitRequest(text);
  if (named && (await ctx.repos.byName(named)).ok) return { repo: named, task };
  return { repo: boundRepo(ctx.config.DRYDOCK_SLACK_CHANNELS, channel), task: whole };
}

/**
 * A request to start a session, from a command or a mention: its person, its
 * repo and task, then the session. Resolves with what to tell the person.
 */
async function startFromSlack(
  ctx: ServeContext,
  r: { user: string; channel: string; text: string; sessionId: string; thread?: string; source: string; usage: string },
): Promise<{ started: boolean; say: string }> {
  const person = ctx.identities.directory.personOf('slack', r.user);
  if (!person) return { started: false, say: notMapped(r.user) };
  const { repo, task } = await repoOf(ctx, r.channel, r.text);
  if (!task) return { started: false, say: `Say what to do: ${r.usage} [owner/name] <task>` };
  if (!repo)
    return { started: false, say: `No repository is bound to this channel: name one, ${r.usage} owner/name <task>` };
  const notify = { slack: { channel: r.channel, ...(r.thread ? { thread: r.thread } : {}) } };
  const { sessionId, source } = r;
  const started = await startFromChat(ctx, { sessionId, repo, task, requestedBy: person, source, notify }, sessionId);
  if (!started.ok) return { started: false, say: `drydock did not start a session: ${started.reason}` };
  return { started: true, say: `Session ${sessionId} on ${repo} is starting; its message follows it.` };
}

/** POST /slack/commands: `/drydock [owner/name] <task>`. Answered in the channel by the session's own message. */
export async function slackCommand(ctx: ServeContext, req: IncomingMessage): Promise<Answer> {
  const body = await signedBody(ctx, req);
  const parsed = slashCommand.safeParse(Object.fromEntries(new URLSearchParams(body.toString('utf8'))));
  if (!parsed.success) throw new HttpError(422, `slash command: ${problemOf(parsed.error)}`);
  const c = parsed.data;
  const sessionId = slackSessionId(c.team_id, c.trigger_id);
  const { say } = await startFromSlack(ctx, {
    user: c.user_id,
    channel: c.channel_id,
    text: c.text,
    sessionId,
    source: `Slack ${c.command}`,
    usage: c.command,
  });
  return [200, { response_type: 'ephemeral', text: say }];
}

/** POST /slack/events: the URL check, mentions of the app and replies in a session's thread. */
export async function slackEvents(ctx: ServeContext, req: IncomingMessage): Promise<Answer> {
  const body = await signedBody(ctx, req);
  const envelope = eventEnvelope.safeParse(parseJson(body));
  if (!envelope.success) throw new HttpError(422, `event: ${problemOf(envelope.error)}`);
  const e = envelope.data;
  if (e.type === 'url_verification') return [200, { challenge: e.challenge }];
  const retry = header(req, 'x-slack-retry-num');
  ctx.log.info({ eventId: e.event_id, type: e.event.type, retry }, 'Slack event');
  if (e.event.type === 'app_mention') {
    const mention = appMention.safeParse(e.event);
    if (!mention.success) throw new HttpError(422, `app_mention: ${problemOf(mention.error)}`);
    const m = mention.data;
    const reply = { channel: m.channel, ts: m.ts, user: m.user, text: m.text };
    if (m.thread_ts) return threadReply(ctx, { ...reply, thread: m.thread_ts });
    const sessionId = slackSessionId(e.team_id, m.channel, m.ts);
    const { started, say } = await startFromSlack(ctx, {
      ...reply,
      sessionId,
      thread: m.ts,
      source: 'Slack mention',
      usage: '@drydock',
    });
    return started ? [200, { sessionId }] : refusedInThread(threadsOf(ctx), m.channel, m.ts, say);
  }
  if (e.event.type === 'message') {
    const message = channelMessage.safeParse(e.event);
    if (!message.success) throw new HttpError(422, `message: ${problemOf(message.error)}`);
    const m = message.data;
    if (m.subtype || m.bot_id || !m.user || !m.thread_ts || m.thread_ts === m.ts || !m.text) {
      return [200, { ignored: 'not a person’s reply in a thread' }];
    }
    // A mention of the app comes as app_mention too: that one answers it.
    const { userId } = await threadsOf(ctx).whoami();
    if (userId && m.text.includes(`<@${userId}`)) return [200, { ignored: 'a mention: answered as app_mention' }];
    return threadReply(ctx, { channel: m.channel, thread: m.thread_ts, ts: m.ts, user: m.user, text: m.text });
  }
  return [200, { ignored: `event ${e.event.type}` }];
}

async function refusedInThread(threads: SlackThreads, channel: string, thread: string, text: string): Promise<Answer> {
  await threads.say(channel, thread, text);
  return [200, { refused: text }];
}

/** A person's reply in a session's thread: a follow-up to the session, refused there with the reason. */
async function threadReply(
  ctx: ServeContext,
  r: { channel: string; thread: string; ts: string; user: string; text: string },
): Promise<Answer> {
  const threads = threadsOf(ctx);
  const sessionId = await threads.sessionOfThread(r.channel, r.thread);
  if (!sessionId) return [200, { ignored: 'not a drydock thread' }];
  const person = ctx.identities.directory.personOf('slack', r.user);
  if (!person) return refusedInThread(threads, r.channel, r.thread, notMapped(r.user));
  const text = splitRequest(r.text).task;
  try {
    const refused = await steeringRefused(ctx, person, () => getStatus(ctx.client, sessionId));
    if (refused) return refusedInThread(threads, r.channel, r.thread, `Follow-up not taken: ${refused}`);
    const accepted = await sendFollowup(ctx.client, sessionId, { by: person, text, id: `slack-${r.channel}-${r.ts}` });
    ctx.log.info({ sessionId, by: person, round: accepted.round }, 'Slack: follow-up sent');
    await threads.say(r.channel, r.thread, `Follow-up from ${person} taken: round ${accepted.round}.`);
    return [200, { sessionId, ...accepted }];
  } catch (err) {
    if (err instanceof FollowupRefused)
      return refusedInThread(threads, r.channel, r.thread, `Follow-up not taken: ${err.message}`);
    if (err instanceof WorkflowNotFoundError)
      return refusedInThread(threads, r.channel, r.thread, `Session ${sessionId} has ended.`);
    throw err;
  }
}

/** POST /slack/interactions: Approve / Reject, under the same rules as every other client. */
export async function slackInteractions(ctx: ServeContext, req: IncomingMessage): Promise<Answer> {
  const body = await signedBody(ctx, req);
  const payload = parseJson(Buffer.from(new URLSearchParams(body.toString('utf8')).get('payload') ?? ''));
  if (payload?.type !== 'block_actions') return [200, { ignored: `interaction ${String(payload?.type)}` }];
  const parsed = blockActions.safeParse(payload);
  if (!parsed.success) throw new HttpError(422, `block_actions: ${problemOf(parsed.error)}`);
  const { user, channel, message, actions } = parsed.data;
  const action = actions[0];
  if (action.action_id !== 'approve' && action.action_id !== 'reject') return [200, { ignored: action.action_id }];
  const value = buttonValue.safeParse(parseJson(Buffer.from(action.value ?? '')));
  if (!value.success) throw new HttpError(422, `button value: ${problemOf(value.error)}`);
  const threads = threadsOf(ctx);
  const thread = message.thread_ts ?? message.ts;
  const person = ctx.identities.directory.personOf('slack', user.id);
  if (!person) return refusedInThread(threads, channel.id, thread, notMapped(user.id));
  const { session, change } = value.data;
  const decision = action.action_id;
  try {
    const refused = await decisionRefused(ctx, person, () => getStatus(ctx.client, session), decision);
    if (refused) {
      ctx.log.info({ sessionId: session, by: person, reason: refused }, 'Slack: decision refused by the roles');
      return refusedInThread(threads, channel.id, thread, `<@${user.id}>'s ${decision} was not counted: ${refused}`);
    }
    await ctx.client.workflow
      .getHandle(session)
      .executeUpdate(decide, { args: [{ decision, action: value.data.action, by: person, change }] });
    ctx.log.info({ sessionId: session, by: person, decision }, 'Slack: decision accepted');
    return [200, {}];
  } catch (err) {
    const reason =
      err instanceof WorkflowUpdateFailedError
        ? ((err.cause as Error | undefined)?.message ?? err.message)
        : err instanceof WorkflowNotFoundError
          ? `session ${session} has ended`
          : undefined;
    if (!reason) throw err;
    ctx.log.info({ sessionId: session, by: person, reason }, 'Slack: decision refused');
    return refusedInThread(threads, channel.id, thread, `<@${user.id}>'s ${decision} was not counted: ${reason}`);
  }
}
