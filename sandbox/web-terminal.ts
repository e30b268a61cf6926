/**
 * The console's terminal (issue 48 item 1): the rules of `drydock attach`
 * carried over a WebSocket from a browser. This module holds the protocol
 * and its limits, pure and unit-tested (test/unit/web-terminal.test.ts), and
 * the bridge between one socket and one shell; the route that authenticates
 * and attaches is workers/routes/terminal.ts, the page workers/console/terminal.ts.
 *
 * Browser to serve: a binary message is keystrokes (bytes for the TTY); a text
 * message is a control, JSON: `{"type":"resize","cols":n,"rows":n}` or
 * `{"type":"detach"}`. Serve to browser: a binary message is the TTY's output
 * through the escape filter (sandbox/terminal-escapes.ts, T4-M3); a text
 * message is a control: `attached`, `refused`, `detached`, `error`.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Duplex } from 'node:stream';
import type WebSocket from 'ws';
import { boundedSize } from './attach';
import type { SandboxShell, TtySize } from './provider';
import { TerminalEscapeFilter } from './terminal-escapes';

/** Limits of one terminal connection; units in the names. */
export interface TerminalLimits {
  maxMessageBytes: number;
  inputBytesPerSecond: number;
  inputBurstBytes: number;
  messageCostBytes: number;
  outputBufferedBytes: number;
  auditBatchMs: number;
  auditBatchBytes: number;
  ticketTtlMs: number;
  idleMs: number;
  pingMs: number;
}

export const TERMINAL_LIMITS: Readonly<TerminalLimits> = {
  /** The largest message the browser may send (a paste included); larger closes the socket (ws: 1009). */
  maxMessageBytes: 64 * 1024,
  /** Keystroke bytes per second, sustained; each message counts at least `messageCostBytes`. */
  inputBytesPerSecond: 32 * 1024,
  /** The most the browser may send at once above the sustained rate (a few pastes). */
  inputBurstBytes: 256 * 1024,
  /** What one message costs at the least, so a flood of tiny messages is bounded as well. */
  messageCostBytes: 64,
  /** Output waiting for a slow browser above this pauses the shell (its TTY blocks the program). */
  outputBufferedBytes: 1024 * 1024,
  /** Keystrokes go to the audit trail in batches: at most this often... */
  auditBatchMs: 2_000,
  /** ...or as soon as a batch holds this many bytes. */
  auditBatchBytes: 4 * 1024,
  /** How long the page's ticket opens a socket after the page was served. */
  ticketTtlMs: 60_000,
  /** No keystroke for this long detaches: a tab left open must not keep the agent waiting. */
  idleMs: 15 * 60_000,
  /** The browser is pinged this often; no pong by the next ping ends the connection (a vanished network). */
  pingMs: 30_000,
};

/** Why a connection was closed by the server: WebSocket close codes (4000-4999 are the application's). */
export const CLOSE = {
  normal: 1000,
  policy: 1008,
  tooBig: 1009,
  idle: 4408,
  refused: 4409,
  failed: 4500,
} as const;

/** A control message from the browser, checked; a string says what was wrong with it. */
export type Control = { type: 'resize'; size: TtySize } | { type: 'detach' };

export function parseControl(text: string): Control | string {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return 'a text message must be JSON: {"type":"resize","cols":n,"rows":n} or {"type":"detach"}';
  }
  const type = (value as { type?: unknown } | null)?.type;
  if (type === 'detach') return { type: 'detach' };
  if (type === 'resize') return { type: 'resize', size: boundedSize(value as { cols?: unknown; rows?: unknown }) };
  return `unknown control type ${JSON.stringify(type)}: send "resize" or "detach"`;
}

/**
 * A token bucket over the browser's input: `take` answers whether a message of
 * `bytes` fits now. The clock is passed in, so tests need no waiting.
 */
export class InputRate {
  private tokens: number;
  private at: number;

  constructor(
    now: number,
    private readonly limits: Pick<
      TerminalLimits,
      'inputBytesPerSecond' | 'inputBurstBytes' | 'messageCostBytes'
    > = TERMINAL_LIMITS,
  ) {
    this.tokens = limits.inputBurstBytes;
    this.at = now;
  }

  take(bytes: number, now: number): boolean {
    const refill = ((now - this.at) / 1000) * this.limits.inputBytesPerSecond;
    this.tokens = Math.min(this.limits.inputBurstBytes, this.tokens + refill);
    this.at = now;
    const cost = Math.max(bytes, this.limits.messageCostBytes);
    if (cost > this.tokens) return false;
    this.tokens -= cost;
    return true;
  }
}

/** One batch of keystrokes as the audit trail records it. */
export interface InputBatch {
  /** 1, 2, ... within the connection. */
  seq: number;
  /** The bytes as text (UTF-8; control keys as their characters, e.g. "\r", "\u0003"). */
  input: string;
  bytes: number;
  firstAt: string;
  lastAt: string;
}

/**
 * Gathers keystrokes into batches: `push` answers a full batch once it holds
 * `auditBatchBytes`; `due` one whose first key is `auditBatchMs` old; `flush`
 * whatever is left (at the detach). Nothing typed is left out of a batch.
 */
export class InputBatcher {
  private chunks: Buffer[] = [];
  private size = 0;
  private firstAt = 0;
  private lastAt = 0;
  private seq = 0;

  constructor(private readonly limits: Pick<TerminalLimits, 'auditBatchMs' | 'auditBatchBytes'> = TERMINAL_LIMITS) {}

  push(bytes: Buffer, now: number): InputBatch | undefined {
    if (bytes.length === 0) return undefined;
    if (this.size === 0) this.firstAt = now;
    this.chunks.push(bytes);
    this.size += bytes.length;
    this.lastAt = now;
    return this.size >= this.limits.auditBatchBytes ? this.flush() : undefined;
  }

  due(now: number): InputBatch | undefined {
    return this.size > 0 && now - this.firstAt >= this.limits.auditBatchMs ? this.flush() : undefined;
  }

  flush(): InputBatch | undefined {
    if (this.size === 0) return undefined;
    const all = Buffer.concat(this.chunks);
    const batch = {
      seq: ++this.seq,
      input: all.toString('utf8'),
      bytes: all.length,
      firstAt: new Date(this.firstAt).toISOString(),
      lastAt: new Date(this.lastAt).toISOString(),
    };
    this.chunks = [];
    this.size = 0;
    return batch;
  }
}

/**
 * The page's ticket for its socket: who, for which session, until when,
 * signed with a key of this serve process. A socket opens only with a ticket
 * of the same person and session that has not run out (a CSRF token: another
 * site's page cannot read it), besides the Origin check and the cookie.
 */
export class TerminalTickets {
  constructor(
    private readonly key: Buffer = randomBytes(32),
    private readonly ttlMs: number = TERMINAL_LIMITS.ticketTtlMs,
  ) {}

  issue(sessionId: string, who: string, now: number): string {
    const until = now + this.ttlMs;
    return `${until}.${this.sign(sessionId, who, until)}`;
  }

  /** Why the ticket does not open this session's terminal for `who`; undefined when it does. */
  refusal(ticket: string | null, sessionId: string, who: string, now: number): string | undefined {
    const [untilText, mac] = (ticket ?? '').split('.');
    const until = Number(untilText);
    if (!mac || !Number.isSafeInteger(until)) return 'the terminal ticket is missing: open the terminal from its page';
    const expected = Buffer.from(this.sign(sessionId, who, until), 'base64url');
    const given = Buffer.from(mac, 'base64url');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      return 'the terminal ticket is not for this session and person: open the terminal from its page';
    }
    if (now > until) return 'the terminal ticket ran out: reload the terminal page';
    return undefined;
  }

  private sign(sessionId: string, who: string, until: number): string {
    return createHmac('sha256', this.key).update(`${sessionId}\n${who}\n${until}`).digest('base64url');
  }
}

/**
 * The console terminals of each session in this serve process, live and
 * pending (joined before the attach is asked for). The session's `attach`
 * lets the one attached attach again (a reconnect, workflows/rules/attach.ts),
 * so one attach may hold several sockets: a second tab, or a reload while the
 * old socket lingers (a dropped network is noticed after up to two pings).
 * The detach goes out only when the last of them leaves, or when one of them
 * asks for it (its Detach button), which ends the others first (M2). A
 * session's attach and detach updates go out one after another, and whether
 * to detach is decided in that turn: a detach never overtakes a newer socket's
 * attach, so it never leaves a live shell behind a detached session.
 */
export class SessionTerminals {
  private readonly sessions = new Map<string, SessionTerminalsEntry>();

  /** Counts a socket of `sessionId` (of `who`) from now until its `leave`. */
  join(sessionId: string, who: string): TerminalPresence {
    let entry = this.sessions.get(sessionId);
    if (!entry) this.sessions.set(sessionId, (entry = { members: new Set(), updates: Promise.resolve(), queued: 0 }));
    const presence = new TerminalPresence(entry, who, () => {
      if (entry.members.size === 0 && entry.queued === 0 && !entry.attachedBy) this.sessions.delete(sessionId);
    });
    entry.members.add(presence);
    return presence;
  }

  /** How many sockets of the session are counted (live or pending). */
  count(sessionId: string): number {
    return this.sessions.get(sessionId)?.members.size ?? 0;
  }
}

interface SessionTerminalsEntry {
  members: Set<TerminalPresence>;
  /** Who the session is attached to through these sockets, as the updates so far left it. */
  attachedBy?: string;
  /** The session's updates, one after another. */
  updates: Promise<void>;
  queued: number;
}

/** One socket's place among its session's terminals. */
export class TerminalPresence {
  private readonly ending = new AbortController();

  constructor(
    private readonly entry: SessionTerminalsEntry,
    /** Whose socket this is. */
    readonly who: string,
    private readonly forget: () => void,
  ) {}

  /** Aborted (with the reason) when another terminal of the session detached: this one ends as well. */
  get signal(): AbortSignal {
    return this.ending.signal;
  }

  /**
   * Sends the attach in the session's turn; once it is answered, the session
   * counts as attached to `by`. Attached through this process to someone
   * else already, nothing is sent: `by` joins the attach under way
   * (several people in one session; the route checked their role) and the
   * answer is undefined.
   */
  attach<T>(by: string, request: () => Promise<T>): Promise<T | undefined> {
    return this.inTurn(async () => {
      if (this.entry.attachedBy !== undefined && this.entry.attachedBy !== by) return undefined;
      const answer = await request();
      this.entry.attachedBy = by;
      return answer;
    });
  }

  /**
   * This socket is done. `detach` (as the person attached) is called, in the
   * session's turn, when no other socket is left, or at once when this one
   * asked to detach and nobody else is in (this person's other sockets are
   * ended first; other people's stay, and the last of them detaches).
   * Answers whether it was. When the person attached leaves while others
   * stay, the attach is handed over (`handOver`, true when the workflow took
   * it) to one of them, so the session names someone who is in.
   */
  leave(
    asked: boolean,
    detach: (attachedBy: string) => Promise<void>,
    handOver?: (from: string, to: string) => Promise<boolean>,
  ): Promise<boolean> {
    this.entry.members.delete(this);
    if (asked) {
      for (const other of this.entry.members) {
        if (other.who === this.who) other.ending.abort('detached from another terminal of this session');
      }
    }
    return this.inTurn(async () => {
      const by = this.entry.attachedBy;
      const other = [...this.entry.members].find((m) => m.who !== this.who);
      const mineLeft = [...this.entry.members].some((m) => m.who === this.who);
      if (by === this.who && other && !mineLeft && handOver) {
        if (await handOver(by, other.who)) this.entry.attachedBy = other.who;
        return false;
      }
      if (!by || other || (!asked && this.entry.members.size > 0)) return false;
      this.entry.attachedBy = undefined;
      await detach(by);
      return true;
    }).finally(this.forget);
  }

  private inTurn<T>(update: () => Promise<T>): Promise<T> {
    const entry = this.entry;
    entry.queued++;
    const answer = entry.updates.then(update);
    entry.updates = answer.then(
      () => undefined,
      () => undefined,
    );
    return answer.finally(() => entry.queued--);
  }
}

/** What the bridge needs besides the socket and the shell. */
export interface BridgeHooks {
  /** Called with each batch of keystrokes, in order; a rejection ends the connection (nothing typed goes unrecorded for long). */
  audit(batch: InputBatch): Promise<void>;
  now?: () => number;
  /** Ends the bridge when aborted (another terminal of the session detached); the socket closes with the reason. */
  signal?: AbortSignal;
  /** Default: TERMINAL_LIMITS. */
  limits?: TerminalLimits;
  /** A watcher's connection: keys and resizes are dropped (nothing audited: nothing was typed into the shell). */
  watchOnly?: boolean;
}

/** Why the bridge ended. */
export type BridgeEnd = 'shell-ended' | 'detach' | 'socket-closed' | { closed: number; reason: string };

/**
 * Carries one socket and one shell until either ends: keystrokes into the
 * TTY (rate-bounded, audited in batches), the TTY's output back through the
 * escape filter with back-pressure. Answers why it ended; the last batch is
 * audited before it answers.
 */
export function bridgeWebTerminal(socket: WebSocket, shell: SandboxShell, hooks: BridgeHooks): Promise<BridgeEnd> {
  const now = hooks.now ?? Date.now;
  const limits = hooks.limits ?? TERMINAL_LIMITS;
  const rate = new InputRate(now(), limits);
  const batcher = new InputBatcher(limits);
  let lastInput = now();
  let audited = Promise.resolve();
  const record = (batch: InputBatch | undefined) => {
    if (batch) audited = audited.then(() => hooks.audit(batch));
    audited.catch(() => close({ closed: CLOSE.failed, reason: 'the audit trail is unreachable: detached' }));
  };
  const timer = setInterval(
    () => {
      record(batcher.due(now()));
      if (now() - lastInput >= limits.idleMs) {
        close({ closed: CLOSE.idle, reason: `no input for ${Math.round(limits.idleMs / 1000)} s: detached` });
      }
    },
    Math.min(limits.auditBatchMs, limits.idleMs),
  );
  const stopPings = keepAlive(socket, limits.pingMs);
  let resolveEnd!: (end: BridgeEnd) => void;
  const ended = new Promise<BridgeEnd>((resolve) => (resolveEnd = resolve));
  let over = false;
  function close(end: BridgeEnd): void {
    if (over) return;
    over = true;
    clearInterval(timer);
    stopPings();
    record(batcher.flush());
    (shell.stream as unknown as Duplex).destroy?.();
    if (typeof end === 'object' && socket.readyState === socket.OPEN) socket.close(end.closed, end.reason);
    void audited.catch(() => undefined).then(() => resolveEnd(end));
  }

  socket.on('message', (data: Buffer, isBinary: boolean) => {
    if (over) return;
    if (!rate.take(data.length, now())) {
      return close({ closed: CLOSE.policy, reason: `input over ${limits.inputBytesPerSecond} bytes/s` });
    }
    lastInput = now();
    if (isBinary && hooks.watchOnly) return;
    if (isBinary) {
      shell.stream.write(data);
      return record(batcher.push(data, now()));
    }
    const control = parseControl(data.toString('utf8'));
    if (typeof control === 'string') return close({ closed: CLOSE.policy, reason: control.slice(0, 120) });
    if (control.type === 'resize') {
      if (!hooks.watchOnly) void shell.resize(control.size).catch(() => undefined);
      return;
    }
    close('detach');
  });
  pipeOutput(socket, shell);
  shell.stream.on('end', () => close('shell-ended')).on('close', () => close('shell-ended'));
  shell.stream.on('error', () => close('shell-ended'));
  socket.on('close', () => close('socket-closed')).on('error', () => close('socket-closed'));
  const endedElsewhere = () => close({ closed: CLOSE.normal, reason: String(hooks.signal?.reason) });
  if (hooks.signal?.aborted) endedElsewhere();
  else hooks.signal?.addEventListener('abort', endedElsewhere, { once: true });
  // Closed before the bridge began (the page went away while the shell was opened): its close event is past.
  if (socket.readyState !== socket.OPEN) close('socket-closed');
  return ended;
}

/** Pings every `pingMs`; a socket that did not answer the last ping is ended (its close detaches). */
function keepAlive(socket: WebSocket, pingMs: number): () => void {
  let answered = true;
  socket.on('pong', () => (answered = true));
  const timer = setInterval(() => {
    if (!answered) return socket.terminate();
    answered = false;
    socket.ping();
  }, pingMs);
  return () => clearInterval(timer);
}

/** The TTY's bytes to the browser, filtered; the shell pauses while the browser is behind. */
function pipeOutput(socket: WebSocket, shell: SandboxShell): void {
  const filter = new TerminalEscapeFilter();
  const resumeWhenDrained = () => {
    if (socket.bufferedAmount <= TERMINAL_LIMITS.outputBufferedBytes) shell.stream.resume();
  };
  shell.stream.on('data', (chunk: Buffer) => {
    if (socket.readyState !== socket.OPEN) return;
    const clean = filter.push(chunk);
    if (clean.length === 0) return;
    socket.send(clean, { binary: true }, resumeWhenDrained);
    if (socket.bufferedAmount > TERMINAL_LIMITS.outputBufferedBytes) shell.stream.pause();
  });
}
