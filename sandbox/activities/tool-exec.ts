/**
 * The built-in loop's tool calls through drydock-exec (sandbox-images/base):
 * one long-lived process per sandbox, started on first use through one
 * attached exec, runs each command as a child and answers in JSON
 * lines. A call costs a process spawn instead of a docker exec. When the
 * executor is gone (killed by a tool call, by a script step's drydock-run,
 * or never started because the image has no node), the call falls back to a
 * plain exec; commands that must run once go through drydock-run, whose
 * record makes the fallback (or a retry on another worker) wait for or read
 * the run the executor started instead of running it again.
 */
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { STDOUT_CAP, type ExecOptions, type ExecResult, type SandboxProvider } from '../provider';
import { OutputOverCap } from '../../platform/output-cap';
import { HELPER } from '../toolchains';
import { sandboxOf, type SandboxHandle } from '../handle';

/** How long a new executor may take to say it is ready before the call falls back to exec. */
const READY_TIMEOUT_MS = 10_000;
/**
 * The longest answer line taken from an executor: drydock-exec keeps 64 MiB
 * per stream, base64 in JSON. A longer line (a step can write into the
 * executor's stdout through /proc) ends the executor instead of filling the
 * worker's memory.
 */
const MAX_LINE = 192 * 1024 ** 2;

interface Answer {
  id: string;
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** One running drydock-exec: the calls waiting for their answer, by id. */
class Executor {
  private readonly waiting = new Map<string, { resolve: (a: Answer) => void; reject: (e: Error) => void }>();
  private gone?: Error;

  /** Called once when the executor ends. */
  onEnd?: () => void;

  constructor(private readonly process: Awaited<ReturnType<SandboxProvider['attach']>>) {
    let pending = 0;
    process.stdout.on('data', (chunk: Buffer) => {
      const end = chunk.lastIndexOf(10);
      pending = end < 0 ? pending + chunk.length : chunk.length - end - 1;
      if (pending > MAX_LINE) {
        this.end(new Error(`drydock-exec sent a line over ${MAX_LINE / 1024 ** 2} MiB`));
        this.process.close();
      }
    });
    createInterface({ input: process.stdout }).on('line', (line) => this.onLine(line));
    process.stdout.on('end', () => this.end(new Error('drydock-exec ended')));
    process.stdout.on('error', (err: Error) => this.end(err));
  }

  get alive(): boolean {
    return !this.gone;
  }

  /** Resolves when the executor says it is ready; rejects when it ends first or takes too long. */
  ready(): Promise<void> {
    this.process.busy(true);
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.end(new Error('drydock-exec did not start'));
      }, READY_TIMEOUT_MS);
      this.waiting.set('ready', {
        resolve: () => {
          clearTimeout(timer);
          this.waiting.delete('ready');
          this.process.busy(false);
          resolve();
        },
        reject: (e) => (clearTimeout(timer), reject(e)),
      });
    });
  }

  call(argv: string[], opts: ExecOptions): Promise<ExecResult> {
    if (this.gone) return Promise.reject(this.gone);
    const id = randomUUID();
    const answered = new Promise<Answer>((resolve, reject) => this.waiting.set(id, { resolve, reject }));
    this.process.busy(true);
    const stdin = opts.stdin === undefined ? undefined : Buffer.from(opts.stdin).toString('base64');
    this.process.stdin.write(`${JSON.stringify({ id, argv, env: opts.env, stdin })}\n`);
    const aborted = new Promise<never>((_, reject) => {
      const abort = () => reject(opts.signal?.reason ?? new Error('aborted'));
      if (opts.signal?.aborted) abort();
      opts.signal?.addEventListener('abort', abort, { once: true });
    });
    aborted.catch(() => undefined);
    return Promise.race([answered, aborted])
      .then((a) => {
        const stdout = Buffer.from(a.stdout, 'base64');
        // drydock-exec cuts at 64 MiB without a word: as long as a cap is as good as over it.
        const cap = opts.stdoutCap ?? STDOUT_CAP;
        if (stdout.length >= cap.bytes) throw new OutputOverCap(cap);
        return { exitCode: a.exitCode, stdout, stderr: Buffer.from(a.stderr, 'base64') };
      })
      .finally(() => {
        this.waiting.delete(id);
        // An idle executor does not keep the worker's process alive.
        if (this.waiting.size === 0) this.process.busy(false);
      });
  }

  close(): void {
    this.end(new Error('drydock-exec closed'));
    this.process.close();
  }

  private onLine(line: string): void {
    let answer: Answer;
    try {
      answer = JSON.parse(line) as Answer;
    } catch {
      return; // not ours: nothing but drydock-exec's answers is expected on this stream
    }
    this.waiting.get(answer.id)?.resolve(answer);
  }

  private end(err: Error): void {
    if (this.gone) return;
    this.gone = err;
    this.onEnd?.();
    for (const w of this.waiting.values()) w.reject(err);
    this.waiting.clear();
  }
}

/** The executors of one worker, one per sandbox, started on first use. */
export class ToolExecutors {
  private readonly running = new Map<string, Promise<Executor | undefined>>();

  constructor(private readonly sandboxes: SandboxProvider) {}

  /**
   * Runs argv in `sandbox` through its executor, or through a plain exec when
   * there is none (or it ends before answering). The same result either way.
   */
  async exec(sandbox: string, argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const executor = await this.executor(sandbox);
    if (executor) {
      try {
        return await executor.call(argv, opts);
      } catch (err) {
        if (opts.signal?.aborted) throw err;
        // Gone while the call ran: drydock-run's record answers the fallback below.
      }
    }
    return this.sandboxes.exec(sandbox, argv, opts);
  }

  /** The sandbox's handle whose commands go through its executor. */
  sandbox(name: string): SandboxHandle {
    return sandboxOf(this.sandboxes, name, (argv, opts) => this.exec(name, argv, opts));
  }

  /** Lets go of every executor (their processes end with their stdin). */
  closeAll(): void {
    for (const [name, started] of this.running) {
      void started.then((e) => e?.close());
      this.running.delete(name);
    }
  }

  private async executor(sandbox: string): Promise<Executor | undefined> {
    const known = await this.running.get(sandbox);
    if (known?.alive) return known;
    const starting = this.start(sandbox);
    this.running.set(sandbox, starting);
    return starting;
  }

  private async start(sandbox: string): Promise<Executor | undefined> {
    try {
      const executor = new Executor(await this.sandboxes.attach(sandbox, [HELPER.exec]));
      const started = this.running.get(sandbox);
      executor.onEnd = () => {
        if (this.running.get(sandbox) === started) this.running.delete(sandbox);
      };
      await executor.ready();
      return executor;
    } catch {
      this.running.delete(sandbox);
      return undefined; // the call falls back to a plain exec, which reports a lost sandbox
    }
  }
}

const perWorker = new WeakMap<SandboxProvider, ToolExecutors>();

/** The worker's executors for these sandboxes (one set per provider). */
export function toolExecutors(sandboxes: SandboxProvider): ToolExecutors {
  let executors = perWorker.get(sandboxes);
  if (!executors) perWorker.set(sandboxes, (executors = new ToolExecutors(sandboxes)));
  return executors;
}
