/**
 * A command in a pod's container through the API server: the `exec`
 * subresource over a WebSocket with the channel protocol v5.channel.k8s.io
 * (the version that can close stdin, Kubernetes 1.30 and later), as kubectl
 * speaks it. stdout and stderr arrive apart, the exit code on the status
 * channel; a slow reader holds the connection back, stdin is sent with
 * back-pressure, a TTY takes resizes. @kubernetes/client-node's Exec does
 * none of the holding back and cannot say how a connection ended, hence this.
 */
import { Writable } from 'node:stream';
import type { KubeConfig, V1Status } from '@kubernetes/client-node';
import WebSocket from 'ws';

const CHANNEL = { stdin: 0, stdout: 1, stderr: 2, status: 3, resize: 4, close: 255 } as const;
const PROTOCOL = 'v5.channel.k8s.io';

/** One container of one pod. */
export interface PodContainer {
  namespace: string;
  pod: string;
  container: string;
}

/** The API refused the exec before anything ran: its HTTP status (404: no such pod; 400: its container is not running). */
export class ExecRefused extends Error {
  constructor(
    readonly status: number,
    body: string,
  ) {
    super(`exec refused (HTTP ${status}): ${body.trim().slice(0, 500)}`);
    this.name = 'ExecRefused';
  }
}

/** The connection ended without the command's exit status: the pod, its node or the connection went away. */
export class ExecCutOff extends Error {
  constructor(why: string) {
    super(`exec cut off: ${why}`);
    this.name = 'ExecCutOff';
  }
}

export interface ExecOutput {
  stdout: Writable;
  /** Ignored with a TTY (which merges stderr into stdout). */
  stderr?: Writable;
}

export interface OpenExec {
  /** The command's stdin (with `stdin: true`): ending it closes the command's stdin. */
  stdin?: Writable;
  /** The exit code once the command ended; a command that could not start is 127 (not found) or 126, its reason on stderr. */
  exit: Promise<number>;
  resize(size: { cols: number; rows: number }): void;
  /** Drops the connection (the command goes on until its stdin or the pod ends). */
  close(): void;
  /** Whether the connection keeps the worker's event loop alive. */
  ref(busy: boolean): void;
}

/**
 * Starts `argv` in the container. Output goes to the sinks as it comes; a
 * sink whose write returns false pauses the connection until it drains.
 * Rejects with ExecRefused when the API will not start it.
 */
export async function openExec(
  kubeconfig: KubeConfig,
  target: PodContainer,
  argv: string[],
  output: ExecOutput,
  opts: { stdin?: boolean; tty?: boolean } = {},
): Promise<OpenExec> {
  const ws = await connect(kubeconfig, execPath(target, argv, opts));
  let settle: { resolve: (code: number) => void; reject: (err: Error) => void } | undefined;
  const exit = new Promise<number>((resolve, reject) => (settle = { resolve, reject }));
  const sinkOf = (channel: number) =>
    channel === CHANNEL.stdout ? output.stdout : channel === CHANNEL.stderr ? output.stderr : undefined;
  ws.on('message', (data: Buffer) => {
    const channel = data[0];
    const body = data.subarray(1);
    if (channel === CHANNEL.status) return settle!.resolve(exitOf(JSON.parse(body.toString()) as V1Status, output));
    const sink = sinkOf(channel);
    if (!sink || body.length === 0 || sink.write(body)) return;
    ws.pause();
    sink.once('drain', () => ws.resume());
  });
  ws.on('close', () => settle!.reject(new ExecCutOff('the connection closed before the command ended')));
  ws.on('error', (err) => settle!.reject(new ExecCutOff(err.message)));
  // Its rejection is the caller's to handle when it awaits `exit`; never unhandled here.
  exit.catch(() => undefined);
  const send = (channel: number, data: Buffer) =>
    new Promise<void>((resolve, reject) =>
      ws.send(Buffer.concat([Buffer.of(channel), data]), (err) => (err ? reject(err) : resolve())),
    );
  const stdin = opts.stdin
    ? new Writable({
        write: (chunk: Buffer, _encoding, done) => void send(CHANNEL.stdin, chunk).then(() => done(), done),
        final: (done) => void send(CHANNEL.close, Buffer.of(CHANNEL.stdin)).then(() => done(), done),
      })
    : undefined;
  // Its errors (the connection gone) surface through `exit`.
  stdin?.on('error', () => undefined);
  const socket = () => (ws as unknown as { _socket?: { ref(): void; unref(): void } })._socket;
  return {
    stdin,
    exit,
    resize: ({ cols, rows }) => {
      if (ws.readyState === WebSocket.OPEN)
        void send(CHANNEL.resize, Buffer.from(JSON.stringify({ Width: cols, Height: rows }))).catch(() => undefined);
    },
    close: () => ws.terminate(),
    ref: (busy) => (busy ? socket()?.ref() : socket()?.unref()),
  };
}

function execPath(target: PodContainer, argv: string[], opts: { stdin?: boolean; tty?: boolean }): string {
  const query = new URLSearchParams({ container: target.container, stdout: 'true' });
  if (!opts.tty) query.set('stderr', 'true');
  if (opts.stdin) query.set('stdin', 'true');
  if (opts.tty) query.set('tty', 'true');
  for (const arg of argv) query.append('command', arg);
  const pod = `/api/v1/namespaces/${encodeURIComponent(target.namespace)}/pods/${encodeURIComponent(target.pod)}`;
  return `${pod}/exec?${query.toString()}`;
}

/** A WebSocket to the API server with the kubeconfig's credentials; the API's refusal as ExecRefused. */
async function connect(kubeconfig: KubeConfig, path: string): Promise<WebSocket> {
  const server = kubeconfig.getCurrentCluster()?.server;
  if (!server) throw new Error('the kubeconfig names no cluster');
  const opts: WebSocket.ClientOptions = {};
  await kubeconfig.applyToHTTPSOptions(opts);
  const ws = new WebSocket(`${server.replace(/^http/, 'ws').replace(/\/$/, '')}${path}`, [PROTOCOL], opts);
  return new Promise<WebSocket>((resolve, reject) => {
    ws.once('open', () => {
      if (ws.protocol === PROTOCOL) return resolve(ws);
      ws.terminate();
      reject(
        new Error(`the API server speaks ${ws.protocol || 'no channel protocol'}, not ${PROTOCOL} (Kubernetes 1.30+)`),
      );
    });
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => reject(new ExecRefused(res.statusCode ?? 0, body)));
      res.on('error', reject);
    });
    ws.once('error', reject);
  });
}

/**
 * The exit code in an exec's final status: Success is 0, a non-zero exit is
 * named in a cause; a command that could not start (no such file, not
 * executable) gets the shell's codes, 127 and 126, with the reason on stderr.
 */
function exitOf(status: V1Status, output: ExecOutput): number {
  if (status.status === 'Success') return 0;
  const code = status.details?.causes?.find((c) => c.reason === 'ExitCode')?.message;
  if (code !== undefined) return Number(code);
  const message = status.message ?? JSON.stringify(status);
  (output.stderr ?? output.stdout).write(`${message}\n`);
  return /not found|no such file/i.test(message) ? 127 : 126;
}
