/**
 * What a sandbox's TTY may send to a person's terminal (drydock attach): the
 * agent wrote the files the shell shows, so their bytes are hostile. The
 * bytes are parsed as a terminal parses them, by the state machine of Paul
 * Williams' DEC ANSI parser (https://vt100.net/emu/dec_ansi_parser, the one
 * xterm.js implements, ECMA-48's syntax): ground, escape, escape
 * intermediate, CSI entry/param/intermediate/ignore, OSC string, DCS
 * entry/param/intermediate/passthrough/ignore, SOS/PM/APC string. ESC
 * restarts a sequence wherever it comes, CAN and SUB abort one, C1 controls
 * (U+0080-U+009F) act as their ESC forms.
 *
 * Only an allowlist leaves: printable text, a few C0 controls (BS, HT, LF,
 * VT, FF, CR, SO, SI, BEL) and the colour, cursor, erase and screen-mode
 * sequences a shell and an editor use, each written out anew in its 7-bit
 * form from what was parsed (never the input's bytes). Everything else is
 * dropped whole: operating-system commands (the clipboard by OSC 52, the
 * title, hyperlinks), device control and the other strings, every sequence
 * a terminal answers on its input (device status and attributes, window
 * reports, mode requests: typed for the person), mouse and focus reporting,
 * and whatever is unknown. Invalid UTF-8 is dropped (as xterm.js does). The
 * filter is streaming: a sequence split across chunks is judged whole, and it
 * holds no more than a sequence's bounded parameters between chunks.
 *
 * The output is meant for a UTF-8 terminal (a terminal that reads 8-bit C1
 * controls from raw bytes would see some continuation bytes of UTF-8 text as
 * controls).
 */

const ESC = 0x1b;
const CAN = 0x18;
const SUB = 0x1a;
const BEL = 0x07;
const DEL = 0x7f;
/** Code points from here on are printable in ground and end a sequence elsewhere (xterm.js's NON_ASCII_PRINTABLE). */
const NON_ASCII = 0xa0;

/** The C0 controls that reach the terminal: BEL, BS, HT, LF, VT, FF, CR, SO, SI. */
const ALLOWED_C0 = new Set([0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f]);
/**
 * ESC sequences (intermediates + final) that reach the terminal: save and
 * restore the cursor, index, next line, tab set, reverse index, keypad modes,
 * and G0/G1 as ASCII, UK or line drawing.
 */
const ALLOWED_ESC = new Set(['7', '8', 'D', 'E', 'H', 'M', '=', '>', '(B', '(0', '(A', ')B', ')0', ')A']);
/**
 * CSI finals without prefix or intermediates that reach the terminal:
 * cursor movement and position, erase, insert and delete, scroll, tabs,
 * repeat, margins, save/restore cursor, SGR (m). `h`/`l` are judged per mode.
 */
const ALLOWED_CSI = new Set('@ABCDEFGHIJKLMPSTXZ`abdefgmrsu');
/** ANSI modes (CSI h/l) that may be set: 4, insert mode. */
const ALLOWED_ANSI_MODES = new Set(['4']);
/**
 * DEC private modes (CSI ? h/l) that may be set: cursor keys (1), reverse
 * video (5), origin (6), autowrap (7), cursor blink (12) and visibility (25),
 * reverse wraparound (45), the alternate screen (47, 1047, 1048, 1049),
 * keypad (66), bracketed paste (2004). Not the mouse or focus reports (they
 * make the terminal send on its input).
 */
const ALLOWED_DEC_MODES = new Set(['1', '5', '6', '7', '12', '25', '45', '47', '66', '1047', '1048', '1049', '2004']);
/** Prefixed or intermediate CSI sequences that reach the terminal: selective erase, cursor style, soft reset. */
const ALLOWED_OTHER_CSI = new Set(['?J', '?K', ' q', '!p']);
/** A CSI whose parameters are longer than this, or hold a number of more than 4 digits, is dropped. */
const MAX_PARAMS = 64;
const MAX_DIGITS = 4;

type State =
  | 'ground'
  | 'escape'
  | 'escape-intermediate'
  | 'csi-entry'
  | 'csi-param'
  | 'csi-intermediate'
  | 'csi-ignore'
  | 'osc-string'
  | 'dcs-entry'
  | 'dcs-param'
  | 'dcs-intermediate'
  | 'dcs-passthrough'
  | 'dcs-ignore'
  | 'sos-pm-apc-string';

/** UTF-8 to code points, across chunks; a byte that cannot be part of valid UTF-8 is dropped. */
class Utf8Decoder {
  private needed = 0;
  private codePoint = 0;
  private lower = 0x80;
  private upper = 0xbf;

  /** The code point `byte` completes, or -1. */
  decode(byte: number): number {
    if (this.needed === 0) return this.start(byte);
    if (byte < this.lower || byte > this.upper) {
      // The sequence is broken: it is dropped and this byte starts anew.
      this.needed = 0;
      return this.start(byte);
    }
    this.lower = 0x80;
    this.upper = 0xbf;
    this.codePoint = (this.codePoint << 6) | (byte & 0x3f);
    return --this.needed === 0 ? this.codePoint : -1;
  }

  private start(byte: number): number {
    if (byte < 0x80) return byte;
    // The bounds of the second byte exclude overlong forms, surrogates and code points past U+10FFFF.
    if (byte >= 0xc2 && byte <= 0xdf) this.expect(1, byte & 0x1f, 0x80, 0xbf);
    else if (byte >= 0xe0 && byte <= 0xef)
      this.expect(2, byte & 0x0f, byte === 0xe0 ? 0xa0 : 0x80, byte === 0xed ? 0x9f : 0xbf);
    else if (byte >= 0xf0 && byte <= 0xf4)
      this.expect(3, byte & 0x07, byte === 0xf0 ? 0x90 : 0x80, byte === 0xf4 ? 0x8f : 0xbf);
    return -1;
  }

  private expect(needed: number, bits: number, lower: number, upper: number): void {
    this.needed = needed;
    this.codePoint = bits;
    this.lower = lower;
    this.upper = upper;
  }
}

/**
 * The filter's output of one chunk: at most the chunk's length plus one
 * sequence held over from the chunk before (text is re-encoded as it came,
 * a sequence written anew is no longer than it was).
 */
class Output {
  private readonly bytes: Buffer;
  private at = 0;

  constructor(inputLength: number) {
    this.bytes = Buffer.allocUnsafe(inputLength + MAX_PARAMS + 16);
  }

  codePoint(c: number): void {
    const b = this.bytes;
    if (c < 0x80) {
      b[this.at++] = c;
    } else if (c < 0x800) {
      b[this.at++] = 0xc0 | (c >> 6);
      b[this.at++] = 0x80 | (c & 0x3f);
    } else if (c < 0x10000) {
      b[this.at++] = 0xe0 | (c >> 12);
      b[this.at++] = 0x80 | ((c >> 6) & 0x3f);
      b[this.at++] = 0x80 | (c & 0x3f);
    } else {
      b[this.at++] = 0xf0 | (c >> 18);
      b[this.at++] = 0x80 | ((c >> 12) & 0x3f);
      b[this.at++] = 0x80 | ((c >> 6) & 0x3f);
      b[this.at++] = 0x80 | (c & 0x3f);
    }
  }

  ascii(text: string): void {
    this.at += this.bytes.write(text, this.at, 'latin1');
  }

  done(): Buffer {
    return this.bytes.subarray(0, this.at);
  }
}

export class TerminalEscapeFilter {
  private readonly decoder = new Utf8Decoder();
  private state: State = 'ground';
  /** The CSI or ESC sequence under way: its private prefix (< = > ?), parameters and intermediates. */
  private prefix = '';
  private params = '';
  private intermediates = '';
  private overflow = false;
  private out = new Output(0);

  /** The bytes of `chunk` that may reach the person's terminal. */
  push(chunk: Buffer): Buffer {
    this.out = new Output(chunk.length);
    for (let i = 0; i < chunk.length; i++) {
      const c = this.decoder.decode(chunk[i]);
      if (c >= 0) this.step(c);
    }
    return this.out.done();
  }

  private step(c: number): void {
    if (this.anywhere(c)) return;
    switch (this.state) {
      case 'ground':
        if (c < 0x20) this.execute(c);
        else if (c !== DEL) this.out.codePoint(c);
        return;
      case 'escape':
      case 'escape-intermediate':
        return this.inEscape(c);
      case 'csi-entry':
      case 'csi-param':
      case 'csi-intermediate':
      case 'csi-ignore':
        return this.inCsi(c);
      case 'osc-string':
        if (c === BEL) this.state = 'ground';
        return;
      case 'dcs-entry':
      case 'dcs-param':
      case 'dcs-intermediate':
        return this.inDcsHeader(c);
      case 'dcs-passthrough':
      case 'dcs-ignore':
        return; // until ESC, ST, CAN or SUB (anywhere)
      case 'sos-pm-apc-string':
        if (c >= NON_ASCII) this.state = 'ground'; // as xterm.js: a non-ASCII character ends the string, unprinted
        return;
    }
  }

  /** The transitions from any state: ESC restarts, CAN and SUB abort, the C1 controls act as their ESC forms. */
  private anywhere(c: number): boolean {
    if (c === ESC) this.enter('escape');
    else if (c === CAN || c === SUB || (c >= 0x80 && c <= 0x9a && c !== 0x90 && c !== 0x98) || c === 0x9c)
      this.state = 'ground'; // executed, or ST: nothing reaches the terminal
    else if (c === 0x9b) this.enter('csi-entry');
    else if (c === 0x90) this.enter('dcs-entry');
    else if (c === 0x9d) this.state = 'osc-string';
    else if (c === 0x98 || c === 0x9e || c === 0x9f) this.state = 'sos-pm-apc-string';
    else return false;
    return true;
  }

  private enter(state: State): void {
    this.state = state;
    this.prefix = '';
    this.params = '';
    this.intermediates = '';
    this.overflow = false;
  }

  /** A C0 control inside or outside a sequence: the terminal executes it there, so it is judged on its own. */
  private execute(c: number): void {
    if (ALLOWED_C0.has(c)) this.out.codePoint(c);
  }

  /** Controls, DEL and non-ASCII inside a sequence's header (escape, CSI, DCS): true when the byte was one of them. */
  private inHeader(c: number, executes: boolean): boolean {
    if (c < 0x20) {
      if (executes) this.execute(c);
    } else if (c >= NON_ASCII) {
      this.state = 'ground'; // as xterm.js: the sequence ends there, the character unprinted
    } else if (c !== DEL) {
      return false;
    }
    return true;
  }

  private inEscape(c: number): void {
    if (this.inHeader(c, true)) return;
    if (c < 0x30) {
      this.collect(c, 'escape-intermediate');
    } else if (this.state === 'escape-intermediate') {
      this.dispatchEsc(c);
    } else if (c === 0x5b) {
      this.enter('csi-entry');
    } else if (c === 0x5d) {
      this.state = 'osc-string';
    } else if (c === 0x50) {
      this.enter('dcs-entry');
    } else if (c === 0x58 || c === 0x5e || c === 0x5f) {
      this.state = 'sos-pm-apc-string';
    } else {
      this.dispatchEsc(c);
    }
  }

  private inCsi(c: number): void {
    if (this.state === 'csi-ignore') {
      if (c < 0x20) this.execute(c);
      else if (c >= 0x40 && c <= 0x7e) this.state = 'ground';
      return;
    }
    if (this.inHeader(c, true)) return;
    if (c < 0x30) {
      this.collect(c, 'csi-intermediate');
    } else if (c >= 0x40) {
      this.dispatchCsi(c);
    } else if (this.state === 'csi-intermediate') {
      this.state = 'csi-ignore';
    } else if (c >= 0x3c) {
      if (this.state === 'csi-entry') this.prefix = String.fromCharCode(c);
      this.state = this.state === 'csi-entry' ? 'csi-param' : 'csi-ignore';
    } else {
      this.state = 'csi-param';
      if (this.params.length < MAX_PARAMS) this.params += String.fromCharCode(c);
      else this.overflow = true;
    }
  }

  /** A DCS's header: whatever it is, its string is never passed. */
  private inDcsHeader(c: number): void {
    if (this.inHeader(c, false)) return;
    if (c >= 0x40) this.state = 'dcs-passthrough';
    else if (c < 0x30) this.state = 'dcs-intermediate';
    else if (this.state === 'dcs-intermediate' || (c >= 0x3c && this.state === 'dcs-param')) this.state = 'dcs-ignore';
    else this.state = 'dcs-param';
  }

  private collect(c: number, state: State): void {
    this.state = state;
    if (this.intermediates.length < 2) this.intermediates += String.fromCharCode(c);
    else this.overflow = true;
  }

  private dispatchEsc(final: number): void {
    this.state = 'ground';
    const sequence = this.intermediates + String.fromCharCode(final);
    if (!this.overflow && ALLOWED_ESC.has(sequence)) this.out.ascii(`\x1b${sequence}`);
  }

  private dispatchCsi(final: number): void {
    this.state = 'ground';
    const params = this.overflow ? undefined : allowedParams(this.prefix, this.params, this.intermediates, final);
    if (params !== undefined)
      this.out.ascii(`\x1b[${this.prefix}${params}${this.intermediates}${String.fromCharCode(final)}`);
  }
}

/** The parameters a CSI may carry to the terminal, or undefined when the sequence is dropped. */
function allowedParams(prefix: string, params: string, intermediates: string, final: number): string | undefined {
  const f = String.fromCharCode(final);
  const fields = params.split(';');
  // Colons (sub-parameters) only in SGR's colours; no number past 4 digits.
  if ((f !== 'm' && params.includes(':')) || fields.some((p) => p.split(':').some((n) => n.length > MAX_DIGITS))) {
    return undefined;
  }
  if (!prefix && !intermediates && (f === 'h' || f === 'l')) return modes(fields, ALLOWED_ANSI_MODES);
  if (prefix === '?' && !intermediates && (f === 'h' || f === 'l')) return modes(fields, ALLOWED_DEC_MODES);
  if (!prefix && !intermediates && ALLOWED_CSI.has(f)) return params;
  return ALLOWED_OTHER_CSI.has(prefix + intermediates + f) ? params : undefined;
}

/** Of the modes a CSI h/l sets, those on the allowlist (without leading zeros); undefined when none is. */
function modes(fields: string[], allowed: Set<string>): string | undefined {
  const kept = fields.map((m) => m.replace(/^0+(?=\d)/, '')).filter((m) => allowed.has(m));
  return kept.length ? kept.join(';') : undefined;
}
