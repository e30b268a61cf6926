/**
 * A local Slack: the Web API methods drydock calls (auth.test,
 * chat.postMessage, chat.update, conversations.history and .replies), spoken
 * as Slack speaks them (form or JSON bodies, the bot token as a Bearer, `ok`
 * answers, Slack's error codes), over messages it keeps per channel; and the
 * people's side: slash commands, events and button clicks sent to drydock
 * serve, signed with the app's signing secret like Slack signs them.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { signSlackRequest } from '../../slack/signature';

export interface SlackMessage {
  channel: string;
  ts: string;
  thread_ts?: string;
  text: string;
  user?: string;
  bot_id?: string;
  blocks?: any[];
  metadata?: { event_type: string; event_payload: Record<string, unknown> };
  /** Every text the message had, oldest first (updates in place add to it). */
  versions: { text: string; phase?: string }[];
}

export interface FakeSlack {
  /** The Web API's base URL, as DRYDOCK_SLACK_API_URL. */
  apiUrl: string;
  botUserId: string;
  messages: SlackMessage[];
  /** Web API calls, in order. */
  calls: { method: string; body: Record<string, any> }[];
  /** `/drydock <text>` by `user` in `channel`; resolves with serve's answer. */
  command(serve: string, a: { user: string; channel: string; text: string }): Promise<Answer>;
  /** A message mentioning the app: kept in the channel (or thread), and sent as app_mention (and message). */
  mention(serve: string, a: { user: string; channel: string; text: string; thread?: string }): Promise<Answer>;
  /** A person's reply in a thread, sent as a message event. */
  reply(serve: string, a: { user: string; channel: string; thread: string; text: string }): Promise<Answer>;
  /** A click on a message's Approve or Reject button (its value as shown then). */
  click(
    serve: string,
    a: { user: string; message: SlackMessage; action: 'approve' | 'reject'; value?: string },
  ): Promise<Answer>;
  /** Sends raw bytes with the given headers (for forged requests). */
  send(serve: string, path: string, body: string, headers: Record<string, string>): Promise<Answer>;
  thread(channel: string, ts: string): SlackMessage[];
  close(): Promise<void>;
}

export interface Answer {
  status: number;
  body: any;
}

const TEAM = 'T0DRYDOCK';

export async function startFakeSlack(opts: { token: string; signingSecret: string }): Promise<FakeSlack> {
  const botId = 'B0DRYDOCK';
  const botUserId = 'U0DRYDOCK';
  const messages: SlackMessage[] = [];
  const calls: FakeSlack['calls'] = [];
  let clock = Math.floor(Date.now() / 1000);
  let seq = 0;
  const nextTs = () => `${clock}.${String(++seq).padStart(6, '0')}`;
  const find = (channel: string, ts: string) => messages.find((m) => m.channel === channel && m.ts === ts);
  const shown = (m: SlackMessage, withMetadata: boolean) => {
    const rest: Partial<SlackMessage> = { ...m };
    delete rest.versions;
    if (!withMetadata) delete rest.metadata;
    return { type: 'message', ...rest };
  };

  const methods: Record<string, (b: Record<string, any>) => Record<string, unknown>> = {
    'auth.test': () => ({
      url: 'https://drydock-test.slack.com/',
      team: 'drydock',
      user: 'drydock',
      team_id: TEAM,
      user_id: botUserId,
      bot_id: botId,
    }),
    'chat.postMessage': (b) => {
      if (!b.channel) return { error: 'channel_not_found' };
      if (!b.text && !b.blocks) return { error: 'no_text' };
      if (b.thread_ts && !find(b.channel, b.thread_ts)) return { error: 'thread_not_found' };
      const m: SlackMessage = {
        channel: b.channel,
        ts: nextTs(),
        ...(b.thread_ts ? { thread_ts: b.thread_ts } : {}),
        text: b.text ?? '',
        user: botUserId,
        bot_id: botId,
        ...(b.blocks ? { blocks: b.blocks } : {}),
        ...(b.metadata ? { metadata: b.metadata } : {}),
        versions: [{ text: b.text ?? '', phase: b.metadata?.event_payload?.phase }],
      };
      messages.push(m);
      return { channel: m.channel, ts: m.ts, message: shown(m, true) };
    },
    'chat.update': (b) => {
      const m = find(b.channel, b.ts);
      if (!m) return { error: 'message_not_found' };
      if (m.bot_id !== botId) return { error: 'cant_update_message' };
      Object.assign(m, {
        text: b.text ?? m.text,
        ...(b.blocks ? { blocks: b.blocks } : {}),
        ...(b.metadata ? { metadata: b.metadata } : {}),
      });
      m.versions.push({ text: m.text, phase: m.metadata?.event_payload?.phase as string | undefined });
      return { channel: m.channel, ts: m.ts, text: m.text };
    },
    'conversations.history': (b) => {
      const oldest = Number(b.oldest ?? 0);
      const top = messages
        .filter((m) => m.channel === b.channel && (!m.thread_ts || m.thread_ts === m.ts) && Number(m.ts) > oldest)
        .reverse()
        .slice(0, Number(b.limit ?? 100));
      return {
        messages: top.map((m) => shown(m, b.include_all_metadata === true || b.include_all_metadata === 'true')),
        has_more: false,
      };
    },
    'conversations.replies': (b) => {
      const parent = find(b.channel, b.ts);
      if (!parent) return { error: 'thread_not_found' };
      const all = [parent, ...messages.filter((m) => m.channel === b.channel && m.thread_ts === b.ts && m.ts !== b.ts)];
      return {
        messages: all
          .slice(0, Number(b.limit ?? 1000))
          .map((m) => shown(m, b.include_all_metadata === true || b.include_all_metadata === 'true')),
        has_more: false,
      };
    },
  };

  const server: Server = createServer(async (req, res) => {
    const send = (data: unknown) => {
      res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' });
      res.end(JSON.stringify(data));
    };
    const method = new URL(req.url!, 'http://x').pathname.replace(/^\/api\//, '');
    const body = await readBody(req);
    calls.push({ method, body });
    if (req.headers.authorization !== `Bearer ${opts.token}`) return send({ ok: false, error: 'invalid_auth' });
    const handler = methods[method];
    if (!handler) return send({ ok: false, error: 'unknown_method' });
    const answer = handler(body);
    send('error' in answer ? { ok: false, ...answer } : { ok: true, ...answer });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;

  const post = (serve: string, path: string, body: string, contentType: string) =>
    sendRaw(`${serve}${path}`, body, { 'content-type': contentType, ...signSlackRequest(opts.signingSecret, body) });
  const event = (serve: string, e: Record<string, unknown>) =>
    post(
      serve,
      '/slack/events',
      JSON.stringify({
        token: 'unused',
        team_id: TEAM,
        api_app_id: 'A0DRYDOCK',
        event: e,
        type: 'event_callback',
        event_id: `Ev${randomBytes(6).toString('hex').toUpperCase()}`,
        event_time: clock,
      }),
      'application/json',
    );
  const userMessage = (a: { user: string; channel: string; text: string; thread?: string }) => {
    clock++;
    const m: SlackMessage = {
      channel: a.channel,
      ts: nextTs(),
      ...(a.thread ? { thread_ts: a.thread } : {}),
      text: a.text,
      user: a.user,
      versions: [{ text: a.text }],
    };
    messages.push(m);
    return m;
  };

  return {
    apiUrl: `${url}/api/`,
    botUserId,
    messages,
    calls,
    command: (serve, a) =>
      post(
        serve,
        '/slack/commands',
        new URLSearchParams({
          token: 'unused',
          team_id: TEAM,
          team_domain: 'drydock-test',
          channel_id: a.channel,
          channel_name: 'shop',
          user_id: a.user,
          user_name: a.user.toLowerCase(),
          command: '/drydock',
          text: a.text,
          api_app_id: 'A0DRYDOCK',
          response_url: `${url}/commands/response`,
          trigger_id: `${clock}.${++seq}.${randomBytes(8).toString('hex')}`,
        }).toString(),
        'application/x-www-form-urlencoded',
      ),
    async mention(serve, a) {
      const m = userMessage({ ...a, text: `<@${botUserId}> ${a.text}` });
      return event(serve, {
        type: 'app_mention',
        user: a.user,
        text: m.text,
        ts: m.ts,
        channel: a.channel,
        event_ts: m.ts,
        ...(a.thread ? { thread_ts: a.thread } : {}),
      });
    },
    async reply(serve, a) {
      const m = userMessage(a);
      return event(serve, {
        type: 'message',
        channel: a.channel,
        user: a.user,
        text: a.text,
        ts: m.ts,
        thread_ts: a.thread,
        channel_type: 'channel',
        event_ts: m.ts,
      });
    },
    click(serve, a) {
      const button = (a.message.blocks ?? [])
        .flatMap((b) => b.elements ?? [])
        .find((e: any) => e.action_id === a.action);
      if (!button && !a.value) throw new Error(`the message has no ${a.action} button`);
      const payload = {
        type: 'block_actions',
        user: { id: a.user, username: a.user.toLowerCase(), team_id: TEAM },
        api_app_id: 'A0DRYDOCK',
        team: { id: TEAM, domain: 'drydock-test' },
        channel: { id: a.message.channel, name: 'shop' },
        message: {
          type: 'message',
          ts: a.message.ts,
          ...(a.message.thread_ts ? { thread_ts: a.message.thread_ts } : {}),
          text: a.message.text,
        },
        actions: [
          {
            action_id: a.action,
            block_id: 'decide',
            value: a.value ?? button.value,
            type: 'button',
            action_ts: `${clock}.000001`,
          },
        ],
        response_url: `${url}/actions/response`,
        trigger_id: `${clock}.${++seq}.${randomBytes(8).toString('hex')}`,
      };
      return post(
        serve,
        '/slack/interactions',
        new URLSearchParams({ payload: JSON.stringify(payload) }).toString(),
        'application/x-www-form-urlencoded',
      );
    },
    send: (serve, path, body, headers) => sendRaw(`${serve}${path}`, body, headers),
    thread: (channel, ts) => messages.filter((m) => m.channel === channel && (m.ts === ts || m.thread_ts === ts)),
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** A form (its JSON-valued fields parsed, as Slack reads them) or a JSON body. */
async function readBody(req: IncomingMessage): Promise<Record<string, any>> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  if (!text) return {};
  if (/json/.test(req.headers['content-type'] ?? '')) return JSON.parse(text);
  const fields: Record<string, any> = Object.fromEntries(new URLSearchParams(text));
  for (const key of ['blocks', 'metadata', 'attachments'])
    if (typeof fields[key] === 'string') fields[key] = JSON.parse(fields[key]);
  return fields;
}

async function sendRaw(url: string, body: string, headers: Record<string, string>): Promise<Answer> {
  const res = await fetch(url, { method: 'POST', headers, body });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: res.status, body: parsed };
}
