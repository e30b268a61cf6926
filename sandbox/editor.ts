/**
 * VS Code in the browser (issue 48 item 2, docs/editor.md): code-server, as
 * infra/code-server.sh builds it on the host, mounted read-only in every
 * sandbox at /opt/drydock-editor (never baked into an image), started on
 * demand in the sandbox as its user, on a loopback port, over /workspace,
 * and stopped when the last person in it leaves. Serve reaches it as it
 * reaches a previewed app (one `drydock-port` exec per connection; here kept
 * alive and reused, since the workbench loads many files), on an origin of
 * the session's own (`e<hash>.<preview host>`): the workspace is the agent's
 * work, so what the editor shows is untrusted. This module holds the pure
 * parts and the process in the sandbox; the routes are workers/routes/editor.ts.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { Agent, request as httpRequest, type AgentOptions } from 'node:http';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { sandboxOf } from './handle';
import { appConnection } from './preview';
import type { SandboxProvider } from './provider';

/** Where the editor is mounted in a sandbox (the agent CLIs are at /opt/drydock-agents). */
export const EDITOR_MOUNT = '/opt/drydock-editor';
/** The loopback port code-server listens on in the sandbox (nothing outside the sandbox's namespace sees it). */
export const EDITOR_PORT = 47813;
/** The editor's own files in the sandbox (its settings, log, pid): in /tmp, never in /workspace (not part of the change). */
export const EDITOR_STATE = '/tmp/drydock-editor';

export const EDITOR_LIMITS = {
  /** From the start to the workbench answering; longer is a failed start. */
  startMs: 180_000,
  /** The editor page's socket is pinged this often; no pong by the next ping ends it (a vanished network). */
  pingMs: 30_000,
  /** Messages from the browser shorter than this are the editor's keep-alives, not a person's doing. */
  activityBytes: 64,
  /** The exec connections kept open to the editor, at most (HTTP keep-alive over `drydock-port`). */
  connections: 8,
  /** How long a person's role, checked for a request, is trusted before it is checked again. */
  roleCheckMs: 5_000,
} as const;

/** The editor's folder when it holds code-server (infra/code-server.sh made it); undefined: no editor on this host. */
export function editorDirOf(dir: string | undefined): string | undefined {
  return dir && existsSync(path.join(dir, 'bin', 'code-server')) ? dir : undefined;
}

/** The DNS label of a session's editor origin: a hash of its id, unlike its preview's (`p…`). */
export function editorLabel(sessionId: string): string {
  return `e${createHash('sha256').update(`editor\n${sessionId}`).digest('hex').slice(0, 24)}`;
}

/** The session's editor origin under the previews' base (`http://e….preview.localhost:8080`). */
export function editorOrigin(base: string, sessionId: string): string {
  const url = new URL(base);
  return `${url.protocol}//${editorLabel(sessionId)}.${url.host}`;
}

/** The label of a Host when it is an editor origin under `base`; undefined otherwise. */
export function editorLabelOf(host: string | undefined, base: string): string | undefined {
  if (!host) return undefined;
  const name = host.replace(/:\d+$/, '').toLowerCase();
  const suffix = `.${new URL(base).hostname.toLowerCase()}`;
  if (!name.endsWith(suffix)) return undefined;
  const label = name.slice(0, -suffix.length);
  return /^e[0-9a-f]{24}$/.test(label) ? label : undefined;
}

/**
 * Starts code-server in the sandbox unless it runs: as the sandbox user, in
 * /workspace, on 127.0.0.1:$1, no password (only serve reaches the port, and
 * it checks who), its state in /tmp; its output to a log there. Exit 3: the
 * sandbox has no editor mounted (made before the host had one, or none built).
 */
const START = {
  name: 'drydock-editor-start',
  text: `d=${EDITOR_STATE}
if [ -f "$d/pid" ] && kill -0 "$(cat "$d/pid")" 2>/dev/null; then echo running; exit 0; fi
[ -x ${EDITOR_MOUNT}/bin/code-server ] || { echo "no editor is mounted at ${EDITOR_MOUNT}" >&2; exit 3; }
mkdir -p "$d/home" || exit 1
cd /workspace || exit 1
HOME="$d/home" XDG_CONFIG_HOME="$d/home/.config" XDG_DATA_HOME="$d/home/.local/share" XDG_CACHE_HOME="$d/home/.cache" \\
  nohup ${EDITOR_MOUNT}/bin/code-server --auth none --bind-addr "127.0.0.1:$1" --disable-telemetry \\
  --disable-update-check --disable-workspace-trust --disable-getting-started-override \\
  --user-data-dir "$d/data" --extensions-dir "$d/extensions" --config "$d/config.yaml" /workspace \\
  >"$d/log" 2>&1 </dev/null &
echo $! >"$d/pid"
echo started`,
};

/** Stops it: TERM, then KILL after 5 s, and any process left of the mount's (its helpers). */
const STOP = {
  name: 'drydock-editor-stop',
  text: `d=${EDITOR_STATE}
if [ -f "$d/pid" ]; then
  pid=$(cat "$d/pid"); kill -TERM "$pid" 2>/dev/null
  i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 10 ]; do sleep 0.5; i=$((i+1)); done
  rm -f "$d/pid"
fi
for p in /proc/[0-9]*; do
  n=\${p#/proc/}; [ "$n" = "$$" ] && continue
  case "$(tr '\\0' ' ' <"$p/cmdline" 2>/dev/null)" in *"$1"*) kill -KILL "$n" 2>/dev/null ;; esac
done
exit 0`,
};

/** Why the editor could not be opened, in words for the person (a sandbox without the mount, a failed start). */
export class EditorRefused extends Error {}

/**
 * HTTP connections to the editor over `drydock-port` execs, kept alive and
 * reused (one exec per connection, not per request), at most
 * EDITOR_LIMITS.connections at once; destroyed with the editor.
 */
export class EditorAgent extends Agent {
  constructor(
    private readonly sandboxes: SandboxProvider,
    private readonly sandbox: string,
    opts: AgentOptions = {},
  ) {
    super({
      keepAlive: true,
      maxSockets: EDITOR_LIMITS.connections,
      maxFreeSockets: EDITOR_LIMITS.connections,
      ...opts,
    });
  }

  createConnection(_opts: unknown, done: (err: Error | null, socket?: Duplex) => void): undefined {
    appConnection(this.sandboxes, this.sandbox, EDITOR_PORT).then(
      (socket) => done(null, socket),
      (err: Error) => done(err),
    );
    return undefined;
  }
}

/** One GET to the editor; its status (or the error). */
function ask(agent: Agent, pathname: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ agent, path: pathname, headers: { host: `localhost:${EDITOR_PORT}` } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.setTimeout(10_000, () => req.destroy(new Error('no answer in 10 s')));
    req.end();
  });
}

/** Starts code-server in the sandbox (unless it runs) and waits until it answers; true when this call started it. */
export async function startEditor(
  sandboxes: SandboxProvider,
  sandbox: string,
  agent: Agent,
  limits: Pick<typeof EDITOR_LIMITS, 'startMs'> = EDITOR_LIMITS,
): Promise<boolean> {
  const started = await sandboxOf(sandboxes, sandbox).commands.script(START, [String(EDITOR_PORT)]);
  if (started.exitCode === 3) {
    throw new EditorRefused(
      `the sandbox ${sandbox} has no editor mounted (made before this host had one: DRYDOCK_EDITOR_DIR, infra/code-server.sh)`,
    );
  }
  if (started.exitCode !== 0) throw new Error(`starting the editor failed: ${started.stderr.toString().slice(0, 500)}`);
  for (const until = Date.now() + limits.startMs; ;) {
    const status = await ask(agent, '/healthz').catch(() => 0);
    if (status === 200) return started.stdout.toString().trim() === 'started';
    if (Date.now() > until) {
      const log = await sandboxOf(sandboxes, sandbox).files.tail(`${EDITOR_STATE}/log`, 2000);
      throw new Error(`the editor did not answer within ${limits.startMs / 1000} s: ${log.text}`);
    }
    await new Promise((r) => setTimeout(r, 400));
  }
}

/** Stops code-server in the sandbox (what it saved stays in /workspace). */
export async function stopEditor(sandboxes: SandboxProvider, sandbox: string): Promise<void> {
  await sandboxOf(sandboxes, sandbox).commands.script(STOP, [`${EDITOR_MOUNT}/`]);
}

/** One person's way into a session's editor (a console page's socket). */
interface Holder {
  who: string;
}

interface SessionEditor {
  sandbox: string;
  agent: EditorAgent;
  holders: Set<Holder>;
  ready: Promise<boolean>;
  /** The last request or message that was a person's doing (ms). */
  lastInput: number;
}

/**
 * The editors of this serve process: one per session (one per sandbox),
 * started by its first holder, shared by the people in it, stopped when the
 * last of them leaves. Stops and starts of a session go one after another.
 */
export class SessionEditors {
  private readonly editors = new Map<string, SessionEditor>();
  private readonly turns = new Map<string, Promise<unknown>>();

  constructor(
    private readonly sandboxes: SandboxProvider,
    private readonly now: () => number = Date.now,
  ) {}

  /** Joins (starting the editor if needed); answers the holder and whether this call started it. */
  async hold(sessionId: string, sandbox: string, who: string): Promise<{ holder: Holder; started: boolean }> {
    const holder = { who };
    const ready = await this.inTurn(sessionId, async () => {
      let editor = this.editors.get(sessionId);
      if (!editor || editor.sandbox !== sandbox) {
        const agent = new EditorAgent(this.sandboxes, sandbox);
        const entry: SessionEditor = {
          sandbox,
          agent,
          holders: new Set(),
          ready: startEditor(this.sandboxes, sandbox, agent),
          lastInput: this.now(),
        };
        this.editors.set(sessionId, (editor = entry));
        // A failed start is each holder's error (hold throws); the last of them to leave stops what started.
        entry.ready.catch(() => undefined);
      }
      editor.holders.add(holder);
      editor.lastInput = this.now(); // someone opening it is someone's doing
      return editor.ready;
    }).catch(async (err: unknown) => {
      await this.release(sessionId, holder);
      throw err;
    });
    // Its start is not a person's idleness (seconds on a busy host): the idle clock starts when it runs.
    this.touch(sessionId);
    return { holder, started: ready };
  }

  /** Leaves; the last holder to leave stops the editor. Answers whether it was stopped. */
  release(sessionId: string, holder: Holder): Promise<boolean> {
    return this.inTurn(sessionId, async () => {
      const editor = this.editors.get(sessionId);
      if (!editor?.holders.delete(holder) || editor.holders.size > 0) return false;
      this.editors.delete(sessionId);
      editor.agent.destroy();
      await stopEditor(this.sandboxes, editor.sandbox);
      return true;
    });
  }

  /** The session's running editor, when `who` is one of the people in it. */
  live(sessionId: string, who: string): { sandbox: string; agent: Agent } | undefined {
    const editor = this.editors.get(sessionId);
    return editor && [...editor.holders].some((h) => h.who === who) ? editor : undefined;
  }

  /** Whether the session has an editor with someone in it (running or starting). */
  running(sessionId: string): boolean {
    return (this.editors.get(sessionId)?.holders.size ?? 0) > 0;
  }

  /** A person's doing reached the editor. */
  touch(sessionId: string): void {
    const editor = this.editors.get(sessionId);
    if (editor) editor.lastInput = this.now();
  }

  /** How long since anything of a person's reached the session's editor (ms); 0 when it has none. */
  idleFor(sessionId: string): number {
    const editor = this.editors.get(sessionId);
    return editor ? this.now() - editor.lastInput : 0;
  }

  /** How many sessions have an editor (running or starting). */
  get size(): number {
    return this.editors.size;
  }

  private inTurn<T>(sessionId: string, work: () => Promise<T>): Promise<T> {
    const answer = (this.turns.get(sessionId) ?? Promise.resolve()).then(work);
    const settled = answer.then(
      () => undefined,
      () => undefined,
    );
    this.turns.set(sessionId, settled);
    void settled.then(() => {
      if (this.turns.get(sessionId) === settled) this.turns.delete(sessionId);
    });
    return answer;
  }
}
