/** Characters of a command's output kept in status and history; the whole output goes to the artifact store. */
const TAIL_CHARS = 2_000;

/** The last `chars` characters of `text`, marked with "…" when cut. */
export function tail(text: string, chars = TAIL_CHARS): string {
  return text.length <= chars ? text : `…${text.slice(-chars)}`;
}

const MiB = 1024 ** 2;

/**
 * What the worker takes from a sandbox of each kind of large data
 * (docs/security.md, "One sandbox cannot exhaust the worker"). Past a cap the
 * copy stops and the activity fails naming it ("the checkpoint diff is over
 * 64 MiB"); the app log alone is cut to its end instead, since a long-running
 * app's log is expected to grow. Every other exec's stdout is capped by
 * STDOUT_CAP (sandbox/provider.ts).
 */
export const OUTPUT_CAPS = {
  /** Held in memory on its way to the database (sandbox_checkpoints). */
  checkpoint: { bytes: 64 * MiB, what: 'the checkpoint diff' },
  /** The diff of drydock's commit as the worker's git makes it (change.diff): written to disk, read only within the cap. */
  changeDiff: { bytes: 64 * MiB, what: "the change's diff" },
  /** Streamed to a file on the worker's disk, fetched from there into the mirror. */
  bundle: { bytes: 256 * MiB, what: 'the git bundle of the change' },
  /** Each file; held in memory to be scrubbed and parsed. */
  junit: { bytes: 16 * MiB, what: 'a JUnit report' },
  /** Each file; streamed to the artifact store. */
  screenshot: { bytes: 16 * MiB, what: 'a screenshot' },
  /** The browser check's video (WebM, half size); streamed to the artifact store. */
  video: { bytes: 64 * MiB, what: "the browser check's video" },
  /** Only the end of the app's log is kept (the start is dropped, and said so). */
  appLog: { bytes: 4 * MiB, what: "the app's log" },
} as const;
