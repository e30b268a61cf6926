/**
 * Several people in one session (issue 48 item 5): the console's terminals of
 * a session share one shell, as people at one screen do. Each person (or
 * watcher) joins with a view of it, a SandboxShell of their own that
 * bridgeWebTerminal (sandbox/web-terminal.ts) carries as it carries a shell:
 * the shell's output goes to every view from its join on (the last screenful
 * replayed first), a typist's keys go into the shell, a watcher's go nowhere.
 * The shell ends when its last typist leaves (watchers alone hold nothing).
 * Who is in a session, by any way in (the terminal, VS Code, the desktop),
 * is SessionPeople's, told to every page at each change.
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

  /** A view of the shell for `member`. Destroying the view's stream is leaving. */
  join(member: ShellMember): SandboxShell {
    const shell = this.shell;
    const view: View = {
      ...member,
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
    }
  }

  private end(): void {
    if (this.ended) return;
    this.ended = true;
    for (const view of this.views) view.stream.push(null);
    this.views.clear();
    this.onEnd();
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

/** A person in a session, as the others see them: by which way in, and whether they only watch. */
export interface Person {
  who: string;
  way: 'terminal' | 'editor' | 'desktop';
  /** A watcher: sees, changes nothing (a reader may watch). */
  watching: boolean;
}

interface Present {
  person: Person;
  tell: (people: Person[]) => void;
}

/**
 * Who is in each session of this serve process, by any way in (issue 48
 * item 5): each connection joins with how to tell its page, and every page
 * of the session hears the whole list, in the order people came, at each
 * arrival and departure (its own included).
 */
export class SessionPeople {
  private readonly sessions = new Map<string, Set<Present>>();

  /** Counts `person` in the session until the answered function is called (once is enough; more do nothing). */
  join(sessionId: string, person: Person, tell: (people: Person[]) => void): () => void {
    let present = this.sessions.get(sessionId);
    if (!present) this.sessions.set(sessionId, (present = new Set()));
    const member: Present = { person: { ...person }, tell };
    present.add(member);
    this.changed(present);
    return () => {
      if (!present.delete(member)) return;
      if (present.size === 0) this.sessions.delete(sessionId);
      else this.changed(present);
    };
  }

  /** Who is in the session now, in the order they came. */
  people(sessionId: string): Person[] {
    return [...(this.sessions.get(sessionId) ?? [])].map((m) => ({ ...m.person }));
  }

  private changed(present: Set<Present>): void {
    const people = [...present].map((m) => ({ ...m.person }));
    for (const member of present) member.tell(people);
  }
}
