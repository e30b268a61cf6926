/**
 * Dead-sandbox detection in sandbox/commands.ts, the one place every provider
 * shares (issue 45 item 2): how a command's end, or its start's refusal, is
 * classified, given what the engine says about the sandbox (isRunning) and
 * whether the provider lets the error mean "gone" (mayBeGone). An engine
 * stand-in gives each case's answers, so each row says exactly what the
 * layer did with them: the result passed on, SandboxNotFound, or the
 * error as it was; and which questions it asked the engine.
 */
import { PassThrough } from 'node:stream';
import { OutputOverCap } from '../../platform/output-cap';
import { ExecOverStream } from '../../sandbox/commands';
import { SandboxNotFound, type CommandOutput, type StartedCommand } from '../../sandbox/provider';

interface Case {
  /** How the command ends: its exit code with what it wrote, or its start or its connection failing. */
  end:
    | { exitCode: number; stdout?: string }
    | { startFails: Error }
    | { cutOff: Error }
    | { stdoutBytes: number; capBytes: number };
  /** Whether the sandbox runs when asked, and still does after settling (polled). */
  running: boolean;
  runningAfterSettle?: boolean;
  /** The provider's mayBeGone for the error (Docker: any; Kubernetes: a refusal or a cut). */
  mayBeGone?: boolean;
}

/** A provider whose engine answers as the case says, recording what it was asked. */
class Engine extends ExecOverStream {
  readonly asked: string[] = [];

  constructor(private readonly c: Case) {
    super();
  }

  async start(_name: string, _argv: string[], output: CommandOutput): Promise<StartedCommand> {
    const { end } = this.c;
    if ('startFails' in end) throw end.startFails;
    let exit: Promise<number>;
    if ('cutOff' in end) exit = Promise.reject(end.cutOff);
    else if ('stdoutBytes' in end) {
      output.stdout.write(Buffer.alloc(end.stdoutBytes));
      exit = Promise.resolve(0);
    } else {
      if (end.stdout) output.stdout.write(end.stdout);
      exit = Promise.resolve(end.exitCode);
    }
    exit.catch(() => undefined);
    return {
      stdin: new PassThrough(),
      exit,
      resize: async () => undefined,
      close: () => undefined,
      ref: () => undefined,
    };
  }

  protected async isRunning(_name: string, settleMs = 0): Promise<boolean> {
    this.asked.push(`isRunning(${settleMs})`);
    return settleMs > 0 ? (this.c.runningAfterSettle ?? this.c.running) : this.c.running;
  }

  protected mayBeGone(): boolean {
    this.asked.push('mayBeGone');
    return this.c.mayBeGone ?? true;
  }
}

const SETNS =
  'OCI runtime exec failed: exec failed: unable to start container process: error executing setns process: exit status 1: unknown\n';

/** [what, case, what exec gives, what the engine was asked] */
const CASES: [string, Case, string, string[]][] = [
  ['a command that succeeds', { end: { exitCode: 0 }, running: true }, 'exit 0', []],
  ['a command that fails in a running sandbox', { end: { exitCode: 1 }, running: true }, 'exit 1', ['isRunning(0)']],
  [
    'a command that fails because its sandbox stopped',
    { end: { exitCode: 1 }, running: false },
    'SandboxNotFound',
    ['isRunning(0)'],
  ],
  [
    'a command killed (137) with its sandbox, which counts as stopped only a moment later',
    { end: { exitCode: 137 }, running: true, runningAfterSettle: false },
    'SandboxNotFound',
    ['isRunning(2000)'],
  ],
  [
    'a command with no exit code (-1) as its sandbox went',
    { end: { exitCode: -1 }, running: true, runningAfterSettle: false },
    'SandboxNotFound',
    ['isRunning(2000)'],
  ],
  [
    'a command killed (137) by itself in a sandbox that runs on',
    { end: { exitCode: 137 }, running: true },
    'exit 137',
    ['isRunning(2000)'],
  ],
  [
    "the runtime's setns failure in a dying sandbox the engine still says runs",
    { end: { exitCode: 126, stdout: SETNS }, running: true },
    'SandboxNotFound',
    [],
  ],
  [
    "a command's own 126 (not executable) in a running sandbox",
    { end: { exitCode: 126, stdout: 'sh: ./x: Permission denied\n' }, running: true },
    'exit 126',
    ['isRunning(0)'],
  ],
  [
    'a start the provider refused as gone',
    { end: { startFails: new SandboxNotFound('s', 'stopped') }, running: true },
    'SandboxNotFound',
    [],
  ],
  [
    'a start that failed, the sandbox stopped',
    { end: { startFails: new Error('socket hang up') }, running: false },
    'SandboxNotFound',
    ['mayBeGone', 'isRunning(0)'],
  ],
  [
    'a start that failed, the sandbox running',
    { end: { startFails: new Error('socket hang up') }, running: true },
    'Error: socket hang up',
    ['mayBeGone', 'isRunning(0)'],
  ],
  [
    "a start's error the provider says cannot mean gone",
    { end: { startFails: new Error('forbidden') }, running: false, mayBeGone: false },
    'Error: forbidden',
    ['mayBeGone'],
  ],
  [
    'a connection cut off as the sandbox went',
    { end: { cutOff: new Error('stream ended') }, running: false },
    'SandboxNotFound',
    ['mayBeGone', 'isRunning(0)'],
  ],
  ['output over its cap', { end: { stdoutBytes: 2048, capBytes: 1024 }, running: false }, 'OutputOverCap', []],
];

test.each(CASES)('%s', async (_what, c, gives, asked) => {
  const engine = new Engine(c);
  const cap = 'capBytes' in c.end ? { stdoutCap: { bytes: c.end.capBytes, what: 'output' } } : {};
  const got = await engine.exec('s', ['true'], cap).then(
    (r) => `exit ${r.exitCode}`,
    (err: Error) =>
      err instanceof SandboxNotFound || err instanceof OutputOverCap ? err.name : `${err.name}: ${err.message}`,
  );
  expect({ got, asked: engine.asked }).toEqual({ got: gives, asked });
});

test('attach and shell: a start refused for a stopped sandbox is SandboxNotFound, for a running one the error', async () => {
  const outcome = (running: boolean) => {
    const engine = new Engine({ end: { startFails: new Error('upgrade refused') }, running });
    return Promise.all([
      engine.attach('s', ['helper']).then(
        () => 'attached',
        (err: Error) => err.name,
      ),
      engine.shell('s', { cols: 80, rows: 24 }).then(
        () => 'shell',
        (err: Error) => err.name,
      ),
    ]);
  };
  expect(await outcome(false)).toEqual(['SandboxNotFound', 'SandboxNotFound']);
  expect(await outcome(true)).toEqual(['Error', 'Error']);
});
