/**
 * A bound on what one command may send the worker (a sandbox exec, a git
 * bundle read on the worker), and the error when it sends more: shared by the
 * sandbox and the repos' git, so a step and a commit fail the same way.
 */

/** A bound on what one exec may send the worker, and what to call it in the error. */
export interface OutputCap {
  bytes: number;
  /** e.g. "the checkpoint diff": the error reads "the checkpoint diff is over 64 MiB". */
  what: string;
}

const MiB = 1024 ** 2;

/** A sandbox sent more than its cap: the exec is cut off, nothing past the cap was kept. */
export class OutputOverCap extends Error {
  constructor(readonly cap: OutputCap) {
    super(`${cap.what} is over ${cap.bytes % MiB === 0 ? `${cap.bytes / MiB} MiB` : `${cap.bytes} bytes`}`);
    this.name = 'OutputOverCap';
  }
}
