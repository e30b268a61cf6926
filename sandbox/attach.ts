/**
 * drydock attach: a person's shell in a session's live sandbox. The session's
 * `attach` update records who is in (the agent waits), the shell is an exec
 * on a TTY through the sandbox provider, and `detach` lets the session go on
 * to verification. From the CLI on the sandbox's host, or from anywhere through `drydock serve`, which
 * bridges an HTTP Upgrade to the exec (workers/routes/attach.ts).
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Duplex } from 'node:stream';
import { WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import { attach, detach, type Attachment, type Detached } from '../workflows/api';
import type { SandboxProvider, SandboxShell, TtySize } from './provider';
import { TerminalEscapeFilter } from './terminal-escapes';
import { sandboxOf } from './handle';
import { AttachRefused, getStatus } from '../platform/sessions';

// Defined beside the follow-up's refusal, which the CLI reads without loading the sandbox room.
export { AttachRefused };

/** The Upgrade protocol name of `drydock serve`'s attach endpoint. */
export const ATTACH_PROTOCOL = 'drydock-attach';

async function update<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError) {
      throw new AttachRefused((err.cause as Error | undefined)?.message ?? err.message);
    }
    throw err;
  }
}

export function requestAttach(client: Client, id: string, by: string): Promise<Attachment> {
  return update(() => client.workflow.getHandle(id).executeUpdate(attach, { args: [{ by }] }));
}

export function requestDetach(client: Client, id: string, by: string): Promise<Detached> {
  return update(() => client.workflow.getHandle(id).executeUpdate(detach, { args: [{ by }] }));
}

/**
 * The session's sandbox, checked to be one this process reaches (before
 * anyone attaches: the agent would wait for nothing).
 */
export async function reachableSandbox(client: Client, sandboxes: SandboxProvider, id: string): Promise<string> {
  const current = await getStatus(client, id);
  const sandbox = current.sandbox;
  if (!sandbox) throw new AttachRefused(`${id} has no sandbox (phase ${current.phase})`);
  if (!(await sandboxes.exists(sandbox.name))) {
    throw new AttachRefused(
      `the sandbox ${sandbox.name} runs on host ${sandbox.host}, out of reach of this process's ${sandboxes.name} ` +
        'sandbox provider (sandbox/host-provider.ts): attach on that host, or through a drydock serve that runs there (--server)',
    );
  }
  return sandbox.name;
}

/**
 * Attaches, runs `shell` and detaches when it ends (or fails): the session
 * never stays paused by this process. Answers what `detach` said.
 */
export async function whileAttached(
  client: Client,
  id: string,
  by: string,
  shell: (attachment: Attachment) => Promise<void>,
): Promise<Detached> {
  const attachment = await requestAttach(client, id, by);
  let failure: unknown;
  try {
    await shell(attachment);
  } catch (err) {
    failure = err;
  }
  const detached = await requestDetach(client, id, by);
  if (failure) throw failure;
  return detached;
}

/** The terminal's size, or a default for one that has none (a pipe). */
export function sizeOf(out: { columns?: number; rows?: number }): TtySize {
  return { cols: out.columns || 80, rows: out.rows || 24 };
}

export interface Terminal {
  stdin: NodeJS.ReadStream;
  stdout: NodeJS.WriteStream;
}

/**
 * Puts the terminal in raw mode (every key goes to the sandbox's shell, Ctrl-C
 * too) and forwards its bytes and size changes; returns how to undo it.
 */
function takeTerminal(io: Terminal, send: (bytes: Buffer) => void, resize: (size: TtySize) => void): () => void {
  const raw = io.stdin.isTTY === true;
  if (raw) io.stdin.setRawMode(true);
  const onResize = () => resize(sizeOf(io.stdout));
  io.stdin.on('data', send).resume();
  io.stdout.on('resize', onResize);
  return () => {
    io.stdin.off('data', send).pause();
    io.stdout.off('resize', onResize);
    if (raw) io.stdin.setRawMode(false);
  };
}

/** Bridges this terminal to a shell of the sandbox until the shell exits; its exit code. */
export async function shellOnThisHost(
  sandboxes: SandboxProvider,
  name: string,
  io: Terminal,
  signal?: AbortSignal,
): Promise<number> {
  const shell = await sandboxOf(sandboxes, name).commands.shell({ ...sizeOf(io.stdout), term: process.env.TERM });
  // Closing the connection ends the shell's input: it exits.
  signal?.addEventListener('abort', () => (shell.stream as unknown as Duplex).destroy());
  const release = takeTerminal(
    io,
    (bytes) => shell.stream.write(bytes),
    (size) => void shell.resize(size),
  );
  try {
    await pipeUntilEnd(shell.stream, io.stdout);
  } finally {
    release();
  }
  return shell.exitCode();
}

/** The sandbox's TTY to the person's terminal, without the escapes that reach beyond the screen. */
function pipeUntilEnd(from: NodeJS.ReadableStream, to: NodeJS.WritableStream): Promise<void> {
  const filter = new TerminalEscapeFilter();
  return new Promise((resolve) => {
    from.on('data', (chunk: Buffer) => to.write(filter.push(chunk)));
    from.on('end', resolve).on('close', resolve).on('error', resolve);
  });
}

/**
 * What the client sends through `drydock serve` after the Upgrade: frames of
 * [type: 1 byte][length: 4 bytes, big-endian][payload], type 0 the terminal's
 * bytes, 1 a resize ({cols, rows} as JSON). What comes back is the TTY's bytes through the
 * escape filter (sandbox/terminal-escapes.ts), as the CLI filters them again: a client
 * other than drydock's gets no escape that reaches beyond its screen either.
 */
export const FRAME = { data: 0, resize: 1 } as const;
const FRAME_LIMIT = 64 * 1024;

export function frame(type: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt8(type, 0);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

/** Splits the client's bytes into frames; a frame over 64 KiB is a protocol error. */
export class FrameReader {
  private pending = Buffer.alloc(0);

  push(chunk: Buffer): { type: number; payload: Buffer }[] {
    this.pending = Buffer.concat([this.pending, chunk]);
    const frames: { type: number; payload: Buffer }[] = [];
    while (this.pending.length >= 5) {
      const length = this.pending.readUInt32BE(1);
      if (length > FRAME_LIMIT) throw new Error(`a frame of ${length} bytes; at most ${FRAME_LIMIT}`);
      if (this.pending.length < 5 + length) break;
      frames.push({ type: this.pending[0], payload: this.pending.subarray(5, 5 + length) });
      this.pending = this.pending.subarray(5 + length);
    }
    return frames;
  }
}

/** Serve's side of the bridge: the client's frames into the shell, the shell's bytes back, until either ends. */
export function bridgeShell(socket: Duplex, shell: SandboxShell): Promise<void> {
  const reader = new FrameReader();
  socket.on('data', (chunk: Buffer) => {
    try {
      for (const { type, payload } of reader.push(chunk)) {
        if (type === FRAME.data) shell.stream.write(payload);
        else if (type === FRAME.resize) void shell.resize(boundedSize(JSON.parse(payload.toString('utf8'))));
      }
    } catch {
      socket.destroy();
    }
  });
  const filter = new TerminalEscapeFilter();
  shell.stream.on('data', (chunk: Buffer) => socket.write(filter.push(chunk)));
  return new Promise((resolve) => {
    const done = () => {
      socket.end();
      (shell.stream as unknown as Duplex).destroy?.();
      resolve();
    };
    shell.stream.on('end', done).on('close', done).on('error', done);
    socket.on('close', done).on('error', done);
  });
}

/** A terminal size from the client, bounded (1 to 1000 each; anything else is 80). */
export function boundedSize(raw: { cols?: unknown; rows?: unknown }): TtySize {
  const bounded = (n: unknown) =>
    Number.isInteger(n) && (n as number) > 0 && (n as number) <= 1000 ? (n as number) : 80;
  return { cols: bounded(raw.cols), rows: bounded(raw.rows) };
}

/**
 * The CLI's side through `drydock serve`: Upgrade to the attach endpoint with
 * an API token, then this terminal until the shell ends. Serve attaches as the
 * token's owner and detaches when the connection closes.
 */
export async function shellThroughServer(server: string, token: string, id: string, io: Terminal): Promise<void> {
  const url = new URL(`/api/sessions/${encodeURIComponent(id)}/attach`, server);
  const size = sizeOf(io.stdout);
  url.searchParams.set('cols', String(size.cols));
  url.searchParams.set('rows', String(size.rows));
  const socket = await upgrade(url, token);
  const release = takeTerminal(
    io,
    (bytes) => socket.write(frame(FRAME.data, bytes)),
    (next) => socket.write(frame(FRAME.resize, Buffer.from(JSON.stringify(next)))),
  );
  try {
    await pipeUntilEnd(socket, io.stdout);
  } finally {
    release();
    socket.destroy();
  }
}

function upgrade(url: URL, token: string): Promise<Duplex> {
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = send(url, {
      headers: { connection: 'Upgrade', upgrade: ATTACH_PROTOCOL, authorization: `Bearer ${token}` },
    });
    req.on('upgrade', (_res, socket, head) => {
      if (head.length) socket.unshift(head);
      resolve(socket);
    });
    req.on('response', (res) => void refusal(res).then(reject, reject));
    req.on('error', reject);
    req.end();
  });
}

/** A non-Upgrade answer of serve: its error, in one line. */
async function refusal(res: IncomingMessage): Promise<AttachRefused> {
  let body = '';
  for await (const chunk of res) body += chunk;
  let message = body.trim();
  try {
    message = (JSON.parse(body) as { error?: string }).error ?? message;
  } catch {
    // not JSON: the body as it is
  }
  return new AttachRefused(`${res.statusCode}: ${message || res.statusMessage}`);
}
