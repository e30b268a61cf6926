/** Characters of a command's output kept in status and history; the whole output goes to the artifact store. */
const TAIL_CHARS = 2_000;

/** The last `chars` characters of `text`, marked with "…" when cut. */
export function tail(text: string, chars = TAIL_CHARS): string {
  return text.length <= chars ? text : `…${text.slice(-chars)}`;
}
