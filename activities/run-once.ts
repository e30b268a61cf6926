/**
 * The worker's side of drydock-run (sandbox-images/base/drydock-run): the
 * argv of one run-once command, and its one-call answer (exit code, output
 * size, the output cut to a limit, the cgroup counters) parsed back.
 */
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../workflows/api';
import type { CgroupCounters } from '../lib/sandbox';
import { STATE_DIR } from './container';
import { HELPER } from '../lib/toolchains';

/** A step's nonce: 32 hex digits chosen by the workflow (uuid4 without dashes), never by the sandbox. */
const NONCE = /^[0-9a-f]{32}$/;

/** Where drydock-run keeps the state of the run named by `nonce`. */
export function runDir(nonce: string): string {
  if (!NONCE.test(nonce)) {
    throw ApplicationFailure.nonRetryable(
      `nonce must be 32 hex digits, got ${JSON.stringify(nonce)}`,
      ErrorType.InvalidSessionInput,
    );
  }
  return `${STATE_DIR}/steps/${nonce}`;
}

export interface RunOnceOptions {
  timeoutMs: number;
  /** Bytes of output returned: the first `limit`, or with `fromEnd` the last. */
  limit: number;
  fromEnd?: boolean;
  /** The run's input is the exec's stdin ($DRYDOCK_INPUT in the command). */
  withInput?: boolean;
  /** Each call also takes the session's checkpoint: the working tree as a diff against this commit. */
  checkpointBase?: string;
}

/** drydock-run's argv (and environment) for `command`, run once per `nonce`. */
export function runOnceCommand(
  nonce: string,
  command: string,
  opts: RunOnceOptions,
): { argv: string[]; env: string[] } {
  runDir(nonce);
  const seconds = String(Math.max(1, Math.ceil(opts.timeoutMs / 1000)));
  const limit = String(opts.fromEnd ? -opts.limit : opts.limit);
  return {
    argv: [
      HELPER.run,
      STATE_DIR,
      nonce,
      seconds,
      limit,
      command,
      ...(opts.checkpointBase ? [opts.checkpointBase] : []),
    ],
    env: opts.withInput ? ['DRYDOCK_STDIN=1'] : [],
  };
}

export interface RunOnceResult {
  exitCode: number;
  /** The whole output's size; `output` holds at most the limit of it. */
  bytes: number;
  output: Buffer;
  before: CgroupCounters;
  after: CgroupCounters;
  /** With checkpointBase: the diff (ok), or why git could not take it. */
  checkpoint?: { ok: boolean; data: Buffer };
}

const CHECKPOINT_LINE = /^drydock-checkpoint ([01]) (\d+)$/;

/** The checkpoint drydock-run put right after its header, and where the output starts after it. */
function checkpointAt(stdout: Buffer, start: number): { checkpoint: RunOnceResult['checkpoint']; next: number } {
  const end = stdout.indexOf(10, start);
  const line = end < 0 ? undefined : CHECKPOINT_LINE.exec(stdout.subarray(start, end).toString());
  if (!line || end + 1 + Number(line[2]) > stdout.length) return { checkpoint: undefined, next: start };
  const next = end + 1 + Number(line[2]);
  return { checkpoint: { ok: line[1] === '0', data: stdout.subarray(end + 1, next) }, next };
}

/**
 * drydock-run's answer for `nonce` (`withCheckpoint`: asked with a
 * checkpoint base), or undefined when stdout does not start with its header (the runner did not get to report: missing, killed, no
 * room for its state).
 */
export function parseRunOnce(stdout: Buffer, nonce: string, withCheckpoint = false): RunOnceResult | undefined {
  const end = stdout.indexOf(10);
  if (end < 0) return undefined;
  const header = new RegExp(`^drydock-run ${nonce} (\\d+) (\\d+) (\\d+) (\\d+) (\\d+) (\\d+)$`).exec(
    stdout.subarray(0, end).toString(),
  );
  if (!header) return undefined;
  const [exitCode, bytes, oomBefore, oomAfter, pidsBefore, pidsAfter] = header.slice(1).map(Number);
  const { checkpoint, next } = withCheckpoint
    ? checkpointAt(stdout, end + 1)
    : { checkpoint: undefined, next: end + 1 };
  return {
    exitCode,
    bytes,
    output: stdout.subarray(next),
    ...(checkpoint ? { checkpoint } : {}),
    before: { oomKills: oomBefore, pidsMax: pidsBefore },
    after: { oomKills: oomAfter, pidsMax: pidsAfter },
  };
}
