/**
 * The desktop (issue 48 item 3, docs/desktop.md): a virtual display beside a
 * session's sandbox that people watch and drive from the console with noVNC.
 * It is a companion container in the sandbox's network namespace, made from
 * drydock's desktop image (sandbox-images/desktop-image.ts), started only when
 * a person opens it: TigerVNC's Xvnc is display :0 and the VNC server at once,
 * listening on a Unix socket in the companion's own /tmp and on X's local
 * sockets (the abstract one is the network namespace's, so the browser
 * check's container draws on it: sandbox/activities/verify.ts), never on TCP;
 * a Chromium on the display is the person's browser. Hardened as a sandbox:
 * non-root, no capabilities, read-only root, its own limits.
 *
 * The VNC bytes never cross a network: `drydock serve` runs `socat` in the
 * companion through the provider's exec (SandboxProvider.attach) and carries
 * its stdin and stdout over the console's WebSocket (bridgeDesktop), with the
 * terminal's rules for the socket (workers/routes/desktop.ts).
 */
import { randomBytes } from 'node:crypto';
import type WebSocket from 'ws';
import { CLOSE, InputRate, TERMINAL_LIMITS, type TerminalLimits } from './web-terminal';
import {
  LABELS,
  SandboxError,
  type AttachedProcess,
  type SandboxInfo,
  type SandboxProvider,
  type SandboxSpec,
} from './provider';

/** The desktop companion of a sandbox. */
export function desktopContainerName(sandbox: string): string {
  return `${sandbox}-desktop`;
}

/** The X display the desktop is, for every container of the sandbox's network namespace. */
export const DESKTOP_DISPLAY = ':0';
/** The display's size in pixels (a browser check's 1280×800 page and its window's frame fit). */
export const DESKTOP_SIZE = { width: 1280, height: 960 } as const;
/** Where Xvnc takes VNC connections, in the companion's own /tmp (mode 0600: the companion's user alone). */
export const VNC_SOCKET = '/tmp/drydock-vnc.sock';

/**
 * The display's X authority (an Xauthority file with one MIT-MAGIC-COOKIE-1),
 * in the companion's own /tmp (0600): Xvnc takes only clients that present its
 * cookie, the person's Chromium beside it and a browser check's Chromium,
 * given a copy for the check (sandbox/activities/verify.ts); a program in the
 * sandbox, which shares the display's abstract socket, has none.
 */
export const XAUTH_FILE = '/tmp/drydock.xauth';

/**
 * An Xauthority file of one entry for any host (FamilyWild) and display 0:
 * each field a big-endian 16-bit length, then its bytes (Xau's format).
 */
export function xauthority(cookie: Buffer): Buffer {
  const field = (bytes: Buffer) => Buffer.concat([u16(bytes.length), bytes]);
  const u16 = (n: number) => Buffer.from([n >> 8, n & 0xff]);
  return Buffer.concat([
    u16(0xffff),
    field(Buffer.alloc(0)),
    field(Buffer.from(DESKTOP_DISPLAY.slice(1))),
    field(Buffer.from('MIT-MAGIC-COOKIE-1')),
    field(cookie),
  ]);
}

/** The companion's own limits (Xvnc and a Chromium), besides the sandbox's. */
export const DESKTOP_LIMITS = {
  cpus: 1,
  memoryBytes: 1024 ** 3,
  pids: 256,
  tmpBytes: 256 * 1024 ** 2,
  diskBytes: 512 * 1024 ** 2,
} as const;

/** The sandbox has no desktop, or cannot have one here: said to the person. */
export class DesktopRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DesktopRefused';
  }
}

/**
 * The companion's spec: the sandbox's owner labels (teardown and the reaper
 * remove it with the sandbox), its network namespace, the desktop's limits.
 * `egressDir` is an empty folder: the desktop has no way out.
 */
export function desktopSpec(sandbox: SandboxInfo, image: string, egressDir: string): SandboxSpec {
  const keep = [LABELS.session, LABELS.repo, LABELS.host, LABELS.expires];
  const labels = Object.fromEntries(
    keep.filter((k) => sandbox.labels[k] !== undefined).map((k) => [k, sandbox.labels[k]]),
  );
  return {
    name: desktopContainerName(sandbox.name),
    image,
    labels: { ...labels, 'drydock.desktop': 'true' },
    companionOf: sandbox.name,
    egressDir,
    readonlyRoot: true,
    ...DESKTOP_LIMITS,
  };
}

/**
 * Starts Xvnc and the person's Chromium in the companion, unless Xvnc runs
 * already (a second viewer, a retry); exits once the VNC socket is there.
 * No clipboard either way (a program in the sandbox cannot put text into
 * the person's clipboard, nor read theirs), no TCP, no MIT-SHM (the browser
 * check's container has its own IPC namespace). Chromium is restarted when
 * the person closes it.
 */
export const START_DESKTOP = [
  // Its stdin is a fresh X authority (xauthority()), read always, kept only by the Xvnc it starts.
  `umask 077; cat >${XAUTH_FILE}.new`,
  `if pgrep -x Xvnc >/dev/null && [ -S ${VNC_SOCKET} ]; then rm -f ${XAUTH_FILE}.new; exit 0; fi`,
  `mv -f ${XAUTH_FILE}.new ${XAUTH_FILE}`,
  `nohup Xvnc ${DESKTOP_DISPLAY} -geometry ${DESKTOP_SIZE.width}x${DESKTOP_SIZE.height} -depth 24 -desktop drydock ` +
    `-auth ${XAUTH_FILE} ` +
    `-rfbunixpath ${VNC_SOCKET} -rfbunixmode 0600 -rfbport -1 -SecurityTypes None -nolisten tcp -extension MIT-SHM ` +
    '-AcceptCutText=0 -SendCutText=0 -SetPrimary=0 -SendPrimary=0 -AlwaysShared >/tmp/xvnc.log 2>&1 &',
  `for i in $(seq 100); do [ -S ${VNC_SOCKET} ] && break; sleep 0.1; done`,
  `[ -S ${VNC_SOCKET} ] || { cat /tmp/xvnc.log >&2; exit 1; }`,
  `nohup sh -c 'while :; do DISPLAY=${DESKTOP_DISPLAY} XAUTHORITY=${XAUTH_FILE} chromium --no-sandbox --disable-gpu --disable-dev-shm-usage ` +
    '--disable-background-networking --no-first-run --user-data-dir=/tmp/chromium --window-position=0,0 ' +
    `--window-size=${DESKTOP_SIZE.width},${DESKTOP_SIZE.height} about:blank; sleep 2; done' >/tmp/chromium.log 2>&1 &`,
].join('\n');

/** The command serve runs in the companion for one viewer: the VNC socket on its stdin and stdout. */
export const VNC_BRIDGE = ['socat', 'STDIO', `UNIX-CONNECT:${VNC_SOCKET}`];

/**
 * Makes the sandbox's desktop (or finds it) and starts its display; answers
 * the companion's name. Refused, saying why, on a provider that cannot add
 * a companion to a running sandbox (Kubernetes: a pod's containers are
 * fixed when it is made) and for a sandbox that is gone.
 */
export async function startDesktop(
  sandboxes: SandboxProvider,
  sandbox: string,
  opts: { image: string; egressDir: string },
): Promise<string> {
  if (!sandboxes.capabilities.lateCompanions) {
    throw new DesktopRefused(
      `the ${sandboxes.name} provider cannot add the desktop to a running sandbox (a pod's containers are fixed when it is made)`,
    );
  }
  const info = await sandboxes.info(sandbox);
  if (!info) throw new DesktopRefused(`the sandbox ${sandbox} is gone`);
  try {
    await sandboxes.create(desktopSpec(info, opts.image, opts.egressDir));
  } catch (err) {
    if (err instanceof SandboxError && err.kind === 'permanent') throw new DesktopRefused(err.message);
    throw err;
  }
  const name = desktopContainerName(sandbox);
  const started = await sandboxes.exec(name, ['sh', '-c', START_DESKTOP], { stdin: xauthority(randomBytes(16)) });
  if (started.exitCode !== 0) {
    throw new Error(`the desktop's display did not start: ${started.stderr.toString().slice(0, 500)}`);
  }
  return name;
}

/**
 * The X authority of the sandbox's desktop when it is up (its Xvnc runs): a
 * browser check then draws on it, presenting that cookie. Undefined otherwise.
 */
export async function desktopShown(sandboxes: SandboxProvider, sandbox: string): Promise<Buffer | undefined> {
  const name = desktopContainerName(sandbox);
  if (!(await sandboxes.exists(name))) return undefined;
  const probe = await sandboxes
    .exec(name, ['sh', '-c', `pgrep -x Xvnc >/dev/null && cat ${XAUTH_FILE}`], {
      stdoutCap: { bytes: 4096, what: "the desktop's X authority" },
    })
    .catch(() => undefined);
  return probe?.exitCode === 0 && probe.stdout.length > 0 ? probe.stdout : undefined;
}

/** What one viewer's connection carried, for the audit trail. */
export interface DesktopUse {
  inputBytes: number;
  inputMessages: number;
  outputBytes: number;
}

/** Why a desktop bridge ended. */
export type DesktopEnd = 'vnc-ended' | 'socket-closed' | { closed: number; reason: string };

/**
 * Carries one socket and one VNC connection until either ends: the
 * browser's RFB messages to Xvnc (rate-bounded like a terminal's keys), the
 * screen's updates back with back-pressure; no input for `idleMs` closes it.
 * Answers why it ended and what it carried.
 */
export function bridgeDesktop(
  socket: WebSocket,
  vnc: AttachedProcess,
  opts: { limits?: TerminalLimits; now?: () => number; signal?: AbortSignal } = {},
): Promise<{ end: DesktopEnd; use: DesktopUse }> {
  const limits = opts.limits ?? TERMINAL_LIMITS;
  const now = opts.now ?? Date.now;
  const rate = new InputRate(now(), limits);
  const use: DesktopUse = { inputBytes: 0, inputMessages: 0, outputBytes: 0 };
  let lastInput = now();
  let answered = true;
  let resolveEnd!: (value: { end: DesktopEnd; use: DesktopUse }) => void;
  const ended = new Promise<{ end: DesktopEnd; use: DesktopUse }>((resolve) => (resolveEnd = resolve));
  const timer = setInterval(
    () => {
      if (now() - lastInput >= limits.idleMs) {
        close({ closed: CLOSE.idle, reason: `no input for ${Math.round(limits.idleMs / 1000)} s: closed` });
      }
    },
    Math.min(limits.idleMs, 10_000),
  );
  const pings = setInterval(() => {
    if (!answered) return socket.terminate();
    answered = false;
    socket.ping();
  }, limits.pingMs);
  let over = false;
  function close(end: DesktopEnd): void {
    if (over) return;
    over = true;
    clearInterval(timer);
    clearInterval(pings);
    vnc.close();
    if (typeof end === 'object' && socket.readyState === socket.OPEN) socket.close(end.closed, end.reason);
    if (end === 'vnc-ended' && socket.readyState === socket.OPEN) socket.close(CLOSE.normal, 'the desktop ended');
    resolveEnd({ end, use });
  }
  socket.on('pong', () => (answered = true));
  socket.on('message', (data: Buffer, isBinary: boolean) => {
    if (over) return;
    if (!isBinary)
      return close({ closed: CLOSE.policy, reason: 'the desktop socket carries binary RFB messages only' });
    if (!rate.take(data.length, now())) {
      return close({ closed: CLOSE.policy, reason: `input over ${limits.inputBytesPerSecond} bytes/s` });
    }
    lastInput = now();
    use.inputBytes += data.length;
    use.inputMessages++;
    vnc.stdin.write(data);
  });
  vnc.stdout.on('data', (chunk: Buffer) => {
    if (socket.readyState !== socket.OPEN) return;
    use.outputBytes += chunk.length;
    socket.send(chunk, { binary: true }, () => {
      if (socket.bufferedAmount <= limits.outputBufferedBytes) vnc.stdout.resume();
    });
    if (socket.bufferedAmount > limits.outputBufferedBytes) vnc.stdout.pause();
  });
  vnc.stdout.on('end', () => close('vnc-ended')).on('close', () => close('vnc-ended'));
  socket.on('close', () => close('socket-closed')).on('error', () => close('socket-closed'));
  const endedElsewhere = () => close({ closed: CLOSE.normal, reason: String(opts.signal?.reason) });
  if (opts.signal?.aborted) endedElsewhere();
  else opts.signal?.addEventListener('abort', endedElsewhere, { once: true });
  if (socket.readyState !== socket.OPEN) close('socket-closed');
  return ended;
}

/**
 * The desktops this serve process started and how many people watch each:
 * when the last viewer of a sandbox's desktop leaves, it is removed after
 * `idleMs` unless someone opens it again (and never while `busy` says a
 * browser check may be drawing on it; then it is asked again later).
 */
export class SessionDesktops {
  private readonly viewers = new Map<string, number>();
  private readonly timers = new Map<string, NodeJS.Timeout>();

  constructor(
    private readonly stop: (sandbox: string) => Promise<void>,
    private readonly busy: (sandbox: string) => Promise<boolean>,
    private readonly idleMs: number = TERMINAL_LIMITS.idleMs,
  ) {}

  join(sandbox: string): void {
    clearTimeout(this.timers.get(sandbox));
    this.timers.delete(sandbox);
    this.viewers.set(sandbox, (this.viewers.get(sandbox) ?? 0) + 1);
  }

  leave(sandbox: string): void {
    const left = (this.viewers.get(sandbox) ?? 1) - 1;
    if (left > 0) return void this.viewers.set(sandbox, left);
    this.viewers.delete(sandbox);
    this.schedule(sandbox);
  }

  /** How many people watch the sandbox's desktop through this process. */
  count(sandbox: string): number {
    return this.viewers.get(sandbox) ?? 0;
  }

  /** Forgets every timer (serve's close): the desktops stay until their sandbox goes. */
  close(): void {
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }

  private schedule(sandbox: string): void {
    const timer = setTimeout(() => {
      this.timers.delete(sandbox);
      if (this.count(sandbox) > 0) return;
      void this.busy(sandbox).then(
        (busy) => (busy ? this.schedule(sandbox) : this.stop(sandbox)),
        () => this.schedule(sandbox),
      );
    }, this.idleMs);
    timer.unref();
    this.timers.set(sandbox, timer);
  }
}
