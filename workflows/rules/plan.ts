/**
 * A plan first (docs/agents.md, "A plan first"): the texts the agent is
 * given while it plans and once its plan is approved, the plan's bound and
 * its hash (what an approval of the plan binds to). Pure, so workflow code
 * can use it and it is unit-tested on its own.
 */

/** Characters of a plan kept, shown and given back to the agent; the rest is cut, and the plan says so. */
export const PLAN_LIMIT = 8_000;

/** The built-in loop's tools that change nothing: the only ones it may use while it plans. */
export const PLANNING_TOOLS: readonly string[] = ['read_file', 'list_files', 'search', 'service_logs'];

/** What the agent is asked first when the session wants a plan (a model's next user turn, or a CLI's prompt). */
export function planRequest(): string {
  return [
    'Before you change anything, write a plan for this task: the files you will change, how, and how you will check it.',
    'A person reviews the plan and must approve it before you may change files.',
    'While you plan you may only read the repository (read_file, list_files, search); do not change any file.',
    'Answer with the plan itself, in plain text, and no tool call.',
  ].join('\n');
}

/** A reviewer's amendments to the plan on display: the agent writes the whole plan again with them. */
export function amendRequest(amendments: { by: string; text: string }[]): string {
  return [
    'The reviewer asked for changes to your plan. Do not change any file yet.',
    ...amendments.map((a) => `From ${a.by}:\n${a.text}`),
    'Answer with the whole revised plan, in plain text, and no tool call.',
  ].join('\n\n');
}

/**
 * The plan as the agent wrote it, bounded: control characters dropped (line
 * breaks and tabs kept, so no terminal escape reaches `drydock status`), at
 * most PLAN_LIMIT characters, and said so when cut.
 */
export function boundPlan(text: string): string {
  const printable = Array.from(text.replace(/\r\n?/g, '\n'), (ch) => {
    const c = ch.charCodeAt(0);
    return ch === '\n' || ch === '\t' || (c >= 0x20 && c !== 0x7f && !(c >= 0x80 && c < 0xa0)) ? ch : '';
  }).join('');
  const trimmed = printable.trim();
  if (trimmed.length <= PLAN_LIMIT) return trimmed;
  const note = `\n[plan cut: the first ${PLAN_LIMIT} of ${trimmed.length} characters are kept]`;
  return trimmed.slice(0, PLAN_LIMIT - note.length) + note;
}

/**
 * The approved plan as the agent is given it when it starts to change files:
 * fenced as text the agent wrote (it may quote the repository), so nothing
 * inside can close the fence and speak as drydock.
 */
export function approvedPlanMessage(plan: string, by: string): string {
  // Any case: a model reading </APPROVED-PLAN> may take it for the fence's end as well.
  const body = plan.replace(/<\/(approved-plan)/gi, '<\\/$1');
  return [
    `Your plan was approved by ${by}. Carry it out now: all tools are available again.`,
    'The approved plan (your own text, as approved):',
    `<approved-plan>\n${body}\n</approved-plan>`,
  ].join('\n\n');
}

/** A script agent's plan: what its planSteps printed (their output tails, in order). */
export function scriptPlan(outputs: string[]): string {
  return boundPlan(outputs.filter((o) => o.trim() !== '').join('\n'));
}

/** The hash an approval of the plan binds to: sha256 of the plan's text and its version, as 64 hex characters. */
export function planHash(plan: string, version: number): string {
  return sha256Hex(`plan ${version}\n${plan}`);
}

const K = Uint32Array.from([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
  0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
  0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
  0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
  0xc67178f2,
]);

/** The text's UTF-8 bytes (written out: a workflow's isolate need not have TextEncoder). */
function utf8(text: string): Uint8Array {
  const out: number[] = [];
  for (const ch of text) {
    const point = ch.codePointAt(0)!;
    const c = point >= 0xd800 && point <= 0xdfff ? 0xfffd : point; // a lone surrogate, as Node encodes it
    if (c < 0x80) out.push(c);
    else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
    else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
  }
  return Uint8Array.from(out);
}

/** SHA-256 of the text's UTF-8 bytes, in workflow code (no Node crypto there). */
export function sha256Hex(text: string): string {
  const bytes = utf8(text);
  const padded = new Uint8Array((((bytes.length + 8) >> 6) + 1) * 64);
  padded.set(bytes);
  padded[bytes.length] = 0x80;
  const view = new DataView(padded.buffer);
  view.setUint32(padded.length - 8, Math.floor(bytes.length / 0x20000000));
  view.setUint32(padded.length - 4, (bytes.length * 8) >>> 0);
  const h = Uint32Array.from([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  const w = new Uint32Array(64);
  const rotr = (x: number, n: number) => (x >>> n) | (x << (32 - n));
  for (let off = 0; off < padded.length; off += 64) {
    for (let i = 0; i < 16; i++) w[i] = view.getUint32(off + i * 4);
    for (let i = 16; i < 64; i++) {
      const s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >>> 3);
      const s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >>> 10);
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) >>> 0;
    }
    let [a, b, c, d, e, f, g, hh] = h;
    for (let i = 0; i < 64; i++) {
      const t1 = (hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i]) >>> 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) >>> 0;
      [hh, g, f, e, d, c, b, a] = [g, f, e, (d + t1) >>> 0, c, b, a, (t1 + t2) >>> 0];
    }
    [a, b, c, d, e, f, g, hh].forEach((v, i) => (h[i] = (h[i] + v) >>> 0));
  }
  return Array.from(h, (v) => v.toString(16).padStart(8, '0')).join('');
}
