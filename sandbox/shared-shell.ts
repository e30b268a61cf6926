/**
 * Several people in one session (issue 48 item 5): the console's terminals of
 * a session share one shell, as people at one screen do. Each person (or
 * watcher) joins with a view of it, a SandboxShell of their own that
 * bridgeWebTerminal (sandbox/web-terminal.ts) carries as it carries a shell:
 * the shell's output goes to every view from its join on (the last screenful
 * replayed first), a typist's keys go into the shell, a watcher's go nowhere.
 * Who is there is told to each view's owner whenever it changes. The shell
 * ends when its last typist leaves (watchers alone hold nothing).
 */
import { Duplex } from 'node:stream';
import type { SandboxShell, TtySize } from './provider';

/** Who is at a shared shell, as the others see it. */
export interface ShellMember {
  who: string;
  /** A watcher: sees the output, types nothing. */
  watching: boolean;
}

/** Output kept for the next to join (a screenful or so); a view that falls this far behind is cut off. */
export const SHARED_SHELL_LIMITS = { replayBytes: 16 * 1024, behindBytes: 4 * 1024 * 1024 } as const;

interface View extends ShellMember {
  stream: Duplex;
  tell(people: ShellMember[]): void;
}

export class SharedShell {
  private readonly views = new Set<View>();
  private replay: Buffer[] = [];
  private replayBytes = 0;
  private ended = false;

  constructor(
    private readonly shell: SandboxShell,
    /** Called once, when the shell ended (its last typist left, or it exited). */
    private readonly onEnd: () => void = () => undefined,
  ) {
    shell.stream.on('data', (chunk: Buffer) => this.output(chunk));
    const end = () => this.end();
    shell.stream.on('end', end).on('close', end).on('error', end);
  }

  /** Whether the shell still runs (a new typist may join it). */
  get open(): boolean {
    return !this.ended;
  }

  /** Who is here now, in the order they came. */
  people(): ShellMember[] {
    return [...this.views].map(({ who, watching }) => ({ who, watching }));
  }

  /**
   * A view of the shell for `member`; `tell` hears who is here at every
   * change (this join included). Destroying the view's stream is leaving.
   */
  join(member: ShellMember, tell: (people: ShellMember[]) => void): SandboxShell {
    const shell = this.shell;
    const view: View = {
      ...member,
      tell,
      stream: new Duplex({
        write(chunk: Buffer, _encoding, done) {
          if (!member.watching) shell.stream.write(chunk);
          done();
        },
        read() {},
        destroy: (err, done) => {
          this.leave(view);
          done(err);
        },
      }),
    };
    if (this.ended) {
      view.stream.push(null);
    } else {
      this.views.add(view);
      for (const chunk of this.replay) view.stream.push(chunk);
      this.changed();
    }
    return {
      stream: view.stream as unknown as NodeJS.ReadWriteStream,
      resize: (size: TtySize) => (member.watching ? Promise.resolve() : shell.resize(size)),
      exitCode: () => shell.exitCode(),
    };
  }

  private output(chunk: Buffer): void {
    this.replay.push(chunk);
    this.replayBytes += chunk.length;
    while (this.replayBytes - this.replay[0].length >= SHARED_SHELL_LIMITS.replayBytes) {
      this.replayBytes -= this.replay.shift()!.length;
    }
    for (const view of this.views) {
      view.stream.push(chunk);
      // A browser this far behind would hold the others' output in memory: it is cut off.
      if (view.stream.readableLength > SHARED_SHELL_LIMITS.behindBytes) view.stream.destroy();
    }
  }

  private leave(view: View): void {
    if (!this.views.delete(view)) return;
    if (![...this.views].some((v) => !v.watching)) {
      (this.shell.stream as unknown as Duplex).destroy?.(); // the last typist left: the shell ends
      this.end();
    } else {
      this.changed();
    }
  }

  private end(): void {
    if (this.ended) return;
    this.ended = true;
    for (const view of this.views) view.stream.push(null);
    this.views.clear();
    this.onEnd();
  }

  private changed(): void {
    const people = this.people();
    for (const view of this.views) view.tell(people);
  }
}

/** The shared shells of this serve process, by session. */
export class SessionShells {
  private readonly shells = new Map<string, SharedShell>();

  /** The session's shell when one runs. */
  get(sessionId: string): SharedShell | undefined {
    const shared = this.shells.get(sessionId);
    return shared?.open ? shared : undefined;
  }

  /** The session's shell, opened with `open` when none runs. */
  async getOrOpen(sessionId: string, open: () => Promise<SandboxShell>): Promise<SharedShell> {
    const running = this.get(sessionId);
    if (running) return running;
    const shell = await open();
    // Another typist may have opened one meanwhile: theirs is kept, this one ends.
    const raced = this.get(sessionId);
    if (raced) {
      (shell.stream as unknown as Duplex).destroy?.();
      return raced;
    }
    const shared = new SharedShell(shell, () => {
      if (this.shells.get(sessionId) === shared) this.shells.delete(sessionId);
    });
    this.shells.set(sessionId, shared);
    return shared;
  }
}
