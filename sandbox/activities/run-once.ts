/**
 * The worker's side of drydock-run (sandbox-images/base/drydock-run): the
 * argv of one run-once command, and its one-call answer (exit code, output
 * size, the output cut to a limit, the cgroup counters) parsed back.
 */
import { ApplicationFailure } from '@temporalio/common';
import { ErrorType } from '../../workflows/api';
import type { CgroupCounters } from '../faults';
import { STATE_DIR } from './container';
import { HELPER } from '../toolchains';

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
  /** The run's input ($DRYDOCK_INPUT in the command): the exec's stdin, saved whole by the first run only. */
  stdin?: string;
  /** Each call also takes the session's checkpoint: the working tree as a diff against this commit. */
  checkpointBase?: string;
  /** Each call also lists the XML files the command wrote (a test step's reports): RunOnceResult.reports. */
  listReports?: boolean;
}

/** drydock-run's argv, environment and stdin (for the exec) for `command`, run once per `nonce`. */
export function runOnceCommand(
  nonce: string,
  command: string,
  opts: RunOnceOptions,
): { argv: string[]; env: string[]; stdin?: string } {
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
    env: [
      ...(opts.listReports ? ['DRYDOCK_REPORTS=1'] : []),
      // The runner checks that it got all of it (a worker killed while it sent it leaves a part).
      ...(opts.stdin === undefined ? [] : [`DRYDOCK_STDIN=${Buffer.byteLength(opts.stdin)}`]),
    ],
    ...(opts.stdin === undefined ? {} : { stdin: opts.stdin }),
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
  /** With listReports: the paths (relative to the workspace) of the XML files the command wrote. */
  reports?: string[];
}

/**
 * drydock-run's answer for `nonce`, or undefined when the runner did not
 * exit 0 or stdout does not end with its trailer (the runner did not get
 * to report: missing, killed, no room for its state). Only the last line of
 * a run that exited 0 counts: the step can write into the runner's stdout
 * (through /proc/<pid>/fd/1) while it runs, or kill the runner after
 * writing a trailer, but the runner writes its own trailer after every
 * process of the step is gone and exits 0 only then. The output is the
 * SENT bytes before it, the checkpoint (when asked) the bytes before those,
 * the list of reports (when asked) the bytes before those; anything the step
 * wrote before that is ignored.
 */
export function parseRunOnce(
  { exitCode: runner, stdout }: { exitCode: number; stdout: Buffer },
  nonce: string,
): RunOnceResult | undefined {
  if (runner !== 0 || stdout.length === 0 || stdout[stdout.length - 1] !== 10) return undefined;
  const start = stdout.lastIndexOf(10, stdout.length - 2);
  if (start < 0) return undefined;
  const trailer = new RegExp(
    `^drydock-run ${nonce} (\\d+) (\\d+) (\\d+) (-?\\d+) (-?\\d+) (-?\\d+) (-?\\d+)(?: ([01]) (\\d+))?(?: reports (\\d+))?$`,
  ).exec(stdout.subarray(start + 1, stdout.length - 1).toString());
  if (!trailer) return undefined;
  const [exitCode, bytes, sent, oomBefore, oomAfter, pidsBefore, pidsAfter] = trailer.slice(1, 8).map(Number);
  const outputStart = start - sent;
  const checkpointStart = outputStart - Number(trailer[9] ?? 0);
  const reportsStart = checkpointStart - Number(trailer[10] ?? 0);
  if (reportsStart < 0) return undefined;
  const checkpoint =
    trailer[8] === undefined
      ? undefined
      : { ok: trailer[8] === '0', data: stdout.subarray(checkpointStart, outputStart) };
  const reports =
    trailer[10] === undefined
      ? undefined
      : stdout
          .subarray(reportsStart, checkpointStart)
          .toString()
          .split('\n')
          .map((f) => f.replace(/^\.\//, ''))
          .filter(Boolean);
  return {
    exitCode,
    bytes,
    output: stdout.subarray(outputStart, start),
    ...(checkpoint ? { checkpoint } : {}),
    ...(reports ? { reports } : {}),
    before: { oomKills: oomBefore, pidsMax: pidsBefore },
    after: { oomKills: oomAfter, pidsMax: pidsAfter },
  };
}
