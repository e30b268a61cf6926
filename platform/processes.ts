/**
 * The worker's short commands (git, mkfs, mount, tar), started by a small
 * helper process (process-helper.mjs) rather than by the worker itself.
 * Starting a process forks the process that starts it, and a fork copies its
 * page tables: a fork of the worker (hundreds of MB with its workflow
 * contexts and database) blocks its main thread, and every activity and
 * workflow task of the host with it, for 2–6 ms on a quiet machine and
 * 20–50 ms on a busy one (bench/RESULTS.md); the helper's fork costs a tenth
 * of that, on the helper's thread. One helper per process, started on first
 * use and again after it died; it ends with its parent.
 */
import { fork, type ChildProcess } from 'node:child_process';
import path from 'node:path';

export interface RunOptions {
  cwd?: string;
  /** The whole environment of the command. @default the worker's */
  env?: NodeJS.ProcessEnv;
  /** Written to the command's stdin (else it gets none). */
  input?: string | Buffer;
  /** Bytes of stdout and stderr together beyond which the command is killed and fails. @default 64 MiB */
  maxBuffer?: number;
}

export interface ProcessOutput {
  stdout: string;
  stderr: string;
}

/** The command ran and failed: a non-zero exit, a signal, or more output than `maxBuffer`. */
export class ProcessFailed extends Error {
  constructor(
    readonly command: string,
    /** The exit code, or null when a signal ended it. */
    readonly code: number | null,
    readonly signal: string | null,
    readonly stdout: string,
    readonly stderr: string,
    overflow?: string,
  ) {
    super(
      overflow
        ? `${command}: more output than allowed (${overflow})`
        : `${command} ${signal ? `killed by ${signal}` : `exited with ${code}`}: ${stderr.trim().slice(-2000)}`,
    );
    this.name = 'ProcessFailed';
  }
}

interface Answer {
  id: number;
  error?: string;
  errno?: string;
  code?: number | null;
  signal?: string | null;
  overflow?: string;
  stdout?: Uint8Array;
  stderr?: Uint8Array;
}

/** What a command wrote, as bytes. */
interface RawOutput {
  stdout: Buffer;
  stderr: Buffer;
}

interface Pending {
  command: string;
  resolve(out: RawOutput): void;
  reject(err: Error): void;
}

const HELPER = path.join(__dirname, 'process-helper.mjs');
let helper: { child: ChildProcess; pending: Map<number, Pending> } | undefined;
let nextId = 0;

/** Told each command and how long it took, start to answer (bench/instrument.ts). */
export const processObservers: ((file: string, args: string[], ms: number) => void)[] = [];

/**
 * Runs `file` with `args` to its end, through the helper; resolves with its
 * output (utf8), rejects with ProcessFailed, or with an Error carrying
 * `code` (e.g. ENOENT) when it could not start.
 */
export async function runProcess(file: string, args: string[], opts: RunOptions = {}): Promise<ProcessOutput> {
  const { stdout, stderr } = await run(file, args, opts);
  return { stdout: stdout.toString('utf8'), stderr: stderr.toString('utf8') };
}

/** As runProcess, with stdout as the bytes the command wrote (a file's content is not always text). */
export async function runProcessBytes(
  file: string,
  args: string[],
  opts: RunOptions = {},
): Promise<{ stdout: Buffer; stderr: string }> {
  const { stdout, stderr } = await run(file, args, opts);
  return { stdout, stderr: stderr.toString('utf8') };
}

function run(file: string, args: string[], opts: RunOptions): Promise<RawOutput> {
  const { child, pending } = theHelper();
  const id = nextId++;
  const since = performance.now();
  const command = [file, ...args].join(' ').slice(0, 200);
  return new Promise<RawOutput>((resolve, reject) => {
    pending.set(id, { command, resolve, reject });
    if (pending.size === 1) child.channel?.ref();
    const failed = (err: Error | null) => {
      if (!err || !pending.delete(id)) return;
      reject(new Error(`${command}: could not reach the process helper: ${err.message}`));
    };
    const request = {
      id,
      file,
      args,
      cwd: opts.cwd,
      env: { ...(opts.env ?? process.env) },
      input: opts.input,
      maxBuffer: opts.maxBuffer ?? 64 * 1024 * 1024,
    };
    try {
      child.send(request, failed);
    } catch (err) {
      failed(err as Error);
    }
  }).finally(() => {
    for (const observe of processObservers) observe(file, args, performance.now() - since);
  });
}

function theHelper(): NonNullable<typeof helper> {
  if (helper) return helper;
  // Plain node (no loader flags of this process): the helper is one small .mjs file.
  const child = fork(HELPER, [], {
    execArgv: [],
    serialization: 'advanced',
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const pending = new Map<number, Pending>();
  const current = { child, pending };
  helper = current;
  child.on('message', (answer: Answer) => settle(current, answer));
  child.on('exit', (code, signal) => {
    if (helper === current) helper = undefined;
    for (const p of pending.values())
      p.reject(new Error(`the process helper ended (${signal ?? code}) during ${p.command}`));
    pending.clear();
  });
  // The helper never keeps this process alive by itself: only while a command runs.
  child.unref();
  child.channel?.unref();
  return current;
}

function settle(current: NonNullable<typeof helper>, answer: Answer): void {
  const p = current.pending.get(answer.id);
  if (!p) return;
  current.pending.delete(answer.id);
  if (current.pending.size === 0) current.child.channel?.unref();
  if (answer.error !== undefined) {
    p.reject(Object.assign(new Error(`${p.command}: ${answer.error}`), { code: answer.errno }));
    return;
  }
  const bytes = (b?: Uint8Array) => (b ? Buffer.from(b.buffer, b.byteOffset, b.byteLength) : Buffer.alloc(0));
  const stdout = bytes(answer.stdout);
  const stderr = bytes(answer.stderr);
  if (answer.code === 0 && !answer.overflow) return p.resolve({ stdout, stderr });
  const [out, err] = [stdout.toString('utf8'), stderr.toString('utf8')];
  p.reject(new ProcessFailed(p.command, answer.code ?? null, answer.signal ?? null, out, err, answer.overflow));
}
