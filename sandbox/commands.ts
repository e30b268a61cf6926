/**
 * Commands in a sandbox, written once for every provider over the one
 * streaming exec primitive each provider gives (ExecOverStream.start): exec
 * with its output caps (to memory or to a file), dead-sandbox detection
 * (SandboxNotFound whenever the sandbox is found gone), a long-lived helper
 * (attach), a person's shell on a TTY, and a tar unpacked by the sandbox's
 * own tar. A provider writes how a command starts on its engine and how it
 * tells whether a sandbox still runs; nothing here knows an engine.
 */
import { createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { Duplex, PassThrough, Readable, Writable } from 'node:stream';
import { OutputOverCap, type OutputCap } from '../platform/output-cap';
import { execFoundContainerGone } from './container-gone';
import {
  ATTACH_PROMPT,
  ATTACH_SHELL,
  HOME,
  SandboxNotFound,
  STDERR_KEPT,
  STDOUT_CAP,
  type AttachedProcess,
  type CommandOutput,
  type ExecOptions,
  type ExecResult,
  type SandboxShell,
  type StartedCommand,
  type StartOptions,
  type TtySize,
} from './provider';

/**
 * exec, execToFile, attach, shell and copyIn (by tar) of SandboxProvider over a
 * provider's start. A sink whose write returns false must hold the command
 * back (the provider pauses its connection until the sink drains).
 */
export abstract class ExecOverStream {
  /**
   * Starts argv as the sandbox user in /workspace, its output to `output`.
   * Rejects with SandboxNotFound when the engine refuses it for a sandbox
   * that is gone.
   */
  abstract start(name: string, argv: string[], output: CommandOutput, opts?: StartOptions): Promise<StartedCommand>;
  /** Whether the sandbox runs, and still does after `settleMs` (polled). */
  protected abstract isRunning(name: string, settleMs?: number): Promise<boolean>;
  /**
   * Whether an error of a command (its start refused, its connection cut)
   * may mean the sandbox went: then the engine is asked (isRunning).
   */
  protected abstract mayBeGone(err: unknown): boolean;

  /**
   * Runs argv as the sandbox user in /workspace; stdout and stderr apart.
   * Throws SandboxNotFound when the sandbox is gone or stopped, whenever that
   * is noticed: before the command starts, while it runs, or as it ends;
   * OutputOverCap past the stdout cap.
   */
  async exec(name: string, argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    return this.checked(name, () => this.execOnce(name, argv, opts), opts.signal);
  }

  /**
   * Like exec, but stdout streams to `file` on the worker's disk (never held
   * in memory), at most `cap.bytes` of it: past that the command is cut off,
   * the file removed and OutputOverCap thrown. Returns the exit code,
   * stdout's size and stderr.
   */
  async execToFile(
    name: string,
    argv: string[],
    file: string,
    cap: OutputCap,
  ): Promise<{ exitCode: number; bytes: number; stderr: Buffer }> {
    const out = createWriteStream(file);
    const closed = () => new Promise((resolve) => out.end(resolve));
    let result: ExecResult;
    try {
      result = await this.checked(name, () => this.execOnce(name, argv, { stdoutCap: cap }, out));
    } catch (err) {
      await closed();
      await rm(file, { force: true });
      throw err;
    }
    await closed();
    return { exitCode: result.exitCode, bytes: out.bytesWritten, stderr: result.stderr };
  }

  /** Starts a long-lived helper with its stdin and stdout open (one command); stdout and stderr end with it. */
  async attach(name: string, argv: string[]): Promise<AttachedProcess> {
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    const command = await this.opened(name, () => this.start(name, argv, { stdout, stderr }, { stdin: true }));
    const ended = () => {
      stdout.end();
      stderr.end();
    };
    command.exit.then(ended, ended);
    return { stdin: command.stdin!, stdout, stderr, close: () => command.close(), busy: (b) => command.ref(b) };
  }

  /**
   * An interactive shell on a TTY as the sandbox user in /workspace, with the
   * sandbox's own environment (no secrets are in it) and its limits: a person
   * in the sandbox (drydock attach). The agent wrote ~/.bashrc and ~/.profile:
   * no startup file runs (ENV is sh's), the prompt is drydock's.
   */
  async shell(name: string, tty: TtySize & { term?: string }): Promise<SandboxShell> {
    const output = new PassThrough();
    const env = [`TERM=${tty.term ?? 'xterm'}`, `HOME=${HOME}`, `PS1=${ATTACH_PROMPT}`];
    const size = { cols: tty.cols, rows: tty.rows };
    const command = await this.opened(name, () =>
      this.start(name, ['sh', '-c', ATTACH_SHELL], { stdout: output }, { stdin: true, tty: size, env }),
    );
    const ended = () => output.end();
    command.exit.then(ended, ended);
    return {
      stream: Duplex.from({ readable: output, writable: command.stdin! }),
      resize: (size) => command.resize(size),
      exitCode: () => command.exit.catch(() => -1),
    };
  }

  /**
   * Extracts a tar stream into a folder of the sandbox with the image's own
   * tar (GNU tar: the sandbox user owns what it unpacks), for a provider
   * whose engine has no copy of its own.
   */
  protected async copyInByTar(name: string, tar: Readable, dest: string, flags: string[] = []): Promise<void> {
    // Read from now on: a child process's stdout left unread is discarded when the child exits.
    const source = tar.pipe(new PassThrough({ highWaterMark: 1 << 20 }));
    const stderr: Buffer[] = [];
    const output = {
      stdout: new PassThrough().resume(),
      stderr: new PassThrough().on('data', (c: Buffer) => stderr.push(c)),
    };
    const result = await this.checked(name, async () => {
      const command = await this.start(name, ['tar', '-x', '-f', '-', '-C', dest, ...flags], output, { stdin: true });
      source.pipe(command.stdin!);
      return { exitCode: await command.exit, stdout: Buffer.alloc(0), stderr: Buffer.concat(stderr) };
    });
    if (result.exitCode !== 0) {
      throw new Error(
        `unpacking into ${dest} of ${name} failed (${result.exitCode}): ${result.stderr.toString().trim()}`,
      );
    }
  }

  /** A command's start, with a sandbox that is gone or stopped as SandboxNotFound. */
  private async opened(name: string, start: () => Promise<StartedCommand>): Promise<StartedCommand> {
    try {
      return await start();
    } catch (err) {
      if (err instanceof SandboxNotFound) throw err;
      if (this.mayBeGone(err) && !(await this.isRunning(name))) throw new SandboxNotFound(name, 'stopped');
      throw err;
    }
  }

  /** One command, with a sandbox that is gone or stopped reported as SandboxNotFound (see exec). */
  protected async checked(name: string, once: () => Promise<ExecResult>, signal?: AbortSignal): Promise<ExecResult> {
    let result: ExecResult;
    try {
      result = await once();
    } catch (err) {
      if (err instanceof SandboxNotFound || err instanceof OutputOverCap || signal?.aborted) throw err;
      if (this.mayBeGone(err) && !(await this.isRunning(name))) throw new SandboxNotFound(name, 'stopped');
      throw err;
    }
    // The runtime could not start the command in a sandbox going away (whatever its engine says yet).
    if (execFoundContainerGone(result)) throw new SandboxNotFound(name, 'stopped');
    // A command cut off because its sandbox died (killed, deleted, OOM of init, host trouble) can
    // end a moment before the sandbox counts as stopped: one killed by a signal (no exit code,
    // or 137) gets two seconds to see it go.
    const killed = result.exitCode === -1 || result.exitCode === 137;
    if (result.exitCode !== 0 && !(await this.isRunning(name, killed ? 2_000 : 0))) {
      throw new SandboxNotFound(name, 'stopped');
    }
    return result;
  }

  /** One command: its exit code and output, stdout to `toFile` instead of memory when given, within its cap. */
  private async execOnce(name: string, argv: string[], opts: ExecOptions, toFile?: Writable): Promise<ExecResult> {
    const sinks = outputSinks(opts.stdoutCap ?? STDOUT_CAP, toFile);
    const command = await this.start(name, argv, sinks, { stdin: opts.stdin !== undefined, env: opts.env });
    let abort: (err: unknown) => void = () => undefined;
    const aborted = new Promise<never>((_resolve, reject) => (abort = reject));
    aborted.catch(() => undefined);
    const onAbort = () => abort(opts.signal?.reason ?? new Error('aborted'));
    if (opts.signal?.aborted) onAbort();
    opts.signal?.addEventListener('abort', onAbort);
    try {
      if (opts.stdin !== undefined) {
        const data = Buffer.from(opts.stdin);
        // What fits one piece is written and closed at once; more goes with back-pressure.
        if (data.length <= CHUNK) command.stdin!.end(data);
        else Readable.from(chunksOf(data)).pipe(command.stdin!);
      }
      const exitCode = await Promise.race([command.exit, sinks.overCap, aborted]);
      // What arrived before the exit status may still wait for the file.
      await Promise.race([sinks.flushed(), sinks.overCap]);
      return { exitCode, stdout: sinks.stdoutBytes(), stderr: sinks.stderrBytes() };
    } catch (err) {
      command.close();
      if (opts.signal?.aborted) throw opts.signal.reason ?? new Error('aborted');
      throw err;
    } finally {
      opts.signal?.removeEventListener('abort', onAbort);
    }
  }
}

const CHUNK = 1 << 20;

/** A buffer in pieces of at most 1 MiB, so that a large stdin goes with back-pressure. */
function* chunksOf(data: Buffer): Generator<Buffer> {
  for (let i = 0; i < data.length; i += CHUNK) yield data.subarray(i, i + CHUNK);
}

/** Where a command's output goes: stdout within its cap (to a file or memory), the first STDERR_KEPT of stderr. */
function outputSinks(cap: OutputCap, toFile?: Writable) {
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  let outBytes = 0;
  let errBytes = 0;
  let fail: (err: Error) => void = () => undefined;
  const overCap = new Promise<never>((_resolve, reject) => (fail = reject));
  overCap.catch(() => undefined);
  const sinks = {
    stdout: new Writable({
      write(chunk: Buffer, _encoding, done) {
        outBytes += chunk.length;
        if (outBytes > cap.bytes) {
          fail(new OutputOverCap(cap));
          return done();
        }
        if (!toFile) {
          // A copy: the chunk may be a slice of a larger buffer of the engine's, which it would keep alive.
          stdout.push(Buffer.from(chunk));
          return done();
        }
        // The disk is slower than the connection: hold the sandbox back rather than buffer here.
        if (toFile.write(chunk)) done();
        else toFile.once('drain', () => done());
      },
    }),
    stderr: new Writable({
      write(chunk: Buffer, _encoding, done) {
        if (errBytes < STDERR_KEPT) stderr.push(Buffer.from(chunk.subarray(0, STDERR_KEPT - errBytes)));
        errBytes += chunk.length;
        done();
      },
    }),
    overCap,
    flushed: () => new Promise((resolve) => sinks.stdout.end(resolve)),
    stdoutBytes: () => Buffer.concat(stdout),
    stderrBytes: () => {
      const more =
        errBytes > STDERR_KEPT ? [Buffer.from(`\n[${errBytes - STDERR_KEPT} more bytes of stderr not kept]`)] : [];
      return Buffer.concat([...stderr, ...more]);
    },
  };
  return sinks;
}
