/**
 * drydock's side of a Slack conversation, through Slack's Web API
 * (@slack/web-api): the session's status message, posted once and updated in
 * place, found again by its metadata before anything is posted (a retried
 * activity never posts twice); the session a thread belongs to; a reply in a
 * thread. No retries here: Temporal retries the activities.
 */
import { LogLevel, WebClient } from '@slack/web-api';
import type { MessageElement } from '@slack/web-api/dist/types/response/ConversationsHistoryResponse';
import { METADATA_TYPE, type StatusMessage } from './message';

export interface SlackSettings {
  /** The bot token (xoxb-…). */
  token: string;
  /** The Web API's base URL. @default https://slack.com/api/ */
  apiUrl: string;
}

/** How far before a session's start its message may be (clocks differ). */
const CLOCK_SLACK_S = 120;

export class SlackThreads {
  private readonly web: WebClient;
  private self?: Promise<{ botId: string; userId: string }>;

  constructor(settings: SlackSettings) {
    this.web = new WebClient(settings.token, {
      slackApiUrl: settings.apiUrl,
      retryConfig: { retries: 0 },
      rejectRateLimitedCalls: true,
      logLevel: LogLevel.ERROR,
      timeout: 10_000,
    });
  }

  /** drydock's bot and user ids (auth.test), asked once: only its own messages are read for metadata. */
  whoami(): Promise<{ botId: string; userId: string }> {
    this.self ??= this.web.auth.test().then(
      (r) => ({ botId: r.bot_id ?? '', userId: r.user_id ?? '' }),
      (err: unknown) => {
        this.self = undefined;
        throw err;
      },
    );
    return this.self;
  }

  /** drydock's message of `sessionId` in the thread (or the channel, since `since`), if it is there. */
  async findStatus(channel: string, sessionId: string, where: { thread?: string; since: string }) {
    const oldest = (Date.parse(where.since) / 1000 - CLOCK_SLACK_S).toFixed(6);
    const messages = where.thread
      ? (await this.web.conversations.replies({ channel, ts: where.thread, include_all_metadata: true, limit: 200 }))
          .messages
      : (await this.web.conversations.history({ channel, oldest, include_all_metadata: true, limit: 200 })).messages;
    const bot = (await this.whoami()).botId;
    return (messages ?? []).find((m) => sessionOf(m, bot) === sessionId)?.ts;
  }

  /** Updates the session's message, or posts it (in the thread, if any) when it is not there yet. */
  async showStatus(
    channel: string,
    message: StatusMessage,
    where: { ts?: string; thread?: string; since: string },
  ): Promise<string> {
    const ts = where.ts ?? (await this.findStatus(channel, message.metadata.event_payload.session_id, where));
    const { text, blocks, metadata } = message;
    if (ts) {
      await this.web.chat.update({ channel, ts, text, blocks, metadata });
      return ts;
    }
    const posted = await this.web.chat.postMessage({
      channel,
      text,
      blocks,
      metadata,
      unfurl_links: false,
      ...(where.thread ? { thread_ts: where.thread } : {}),
    });
    return posted.ts!;
  }

  /** The session whose status message is in this thread (its parent, or a reply), if any. */
  async sessionOfThread(channel: string, thread: string): Promise<string | undefined> {
    const { messages } = await this.web.conversations.replies({
      channel,
      ts: thread,
      include_all_metadata: true,
      limit: 50,
    });
    const bot = (await this.whoami()).botId;
    for (const m of messages ?? []) {
      const session = sessionOf(m, bot);
      if (session) return session;
    }
    return undefined;
  }

  /** A message from drydock in the thread. */
  async say(channel: string, thread: string, text: string): Promise<void> {
    await this.web.chat.postMessage({ channel, thread_ts: thread, text: text.slice(0, 3000), unfurl_links: false });
  }
}

/** The session drydock's own message names in its metadata. */
function sessionOf(m: MessageElement, bot: string): string | undefined {
  if (!bot || m.bot_id !== bot || m.metadata?.event_type !== METADATA_TYPE) return undefined;
  const session = (m.metadata.event_payload as { session_id?: unknown } | undefined)?.session_id;
  return typeof session === 'string' ? session : undefined;
}
