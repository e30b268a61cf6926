/**
 * What a sandbox's TTY may send to a person's terminal (drydock attach): the
 * agent wrote the files the shell shows, so their bytes are hostile. Colours,
 * cursor movement and the screen modes editors use pass; the escapes that
 * reach beyond the screen are dropped: operating-system commands (OSC: the
 * clipboard by OSC 52, the title, hyperlinks), device control and the other
 * strings (DCS, APC, PM, SOS), the reports a terminal answers on its input
 * (device status and attributes, window reports, mode requests: typed for the
 * person), and the C1 forms of the same introducers. A stateful filter: an
 * escape split across chunks is judged whole.
 */

const ESC = 0x1b;
const BEL = 0x07;
/** ESC followed by these starts a string that runs to BEL or ESC \: ] OSC, P DCS, _ APC, ^ PM, X SOS. */
const STRING_INTRODUCERS = new Set([0x5d, 0x50, 0x5f, 0x5e, 0x58]);
/** The same strings' C1 introducers (U+0090 DCS, U+0098 SOS, U+009D OSC, U+009E PM, U+009F APC). */
const C1_STRING_INTRODUCERS = new Set([0x90, 0x98, 0x9d, 0x9e, 0x9f]);
/** CSI final bytes of sequences that make the terminal answer: n device status, c attributes, t window reports, x DECREQTPARM. */
const ANSWERED_FINALS = new Set([0x6e, 0x63, 0x74, 0x78]);
/** A CSI longer than this is no sequence a shell needs: dropped. */
const MAX_CSI = 64;

type State = 'text' | 'esc' | 'csi' | 'string' | 'string-esc' | 'c2';

export class TerminalEscapeFilter {
  private state: State = 'text';
  private csi: number[] = [];

  /** The bytes of `chunk` that may reach the person's terminal. */
  push(chunk: Buffer): Buffer {
    const out: number[] = [];
    for (const byte of chunk) this.step(byte, out);
    return Buffer.from(out);
  }

  private step(byte: number, out: number[]): void {
    switch (this.state) {
      case 'text':
        if (byte === ESC) this.state = 'esc';
        else if (byte === 0xc2) this.state = 'c2';
        else out.push(byte);
        return;
      case 'c2':
        // U+0080–U+009F: C1 controls, which a terminal may read as CSI or OSC: judged as their ESC forms, the rest dropped.
        this.state = 'text';
        if (byte === 0x9b) return this.afterEsc(0x5b, out);
        if (C1_STRING_INTRODUCERS.has(byte)) return this.afterEsc(0x5d, out);
        if (byte >= 0x80 && byte <= 0x9f) return;
        out.push(0xc2);
        return this.step(byte, out);
      case 'esc':
        return this.afterEsc(byte, out);
      case 'csi':
        return this.inCsi(byte, out);
      case 'string':
        if (byte === BEL) this.state = 'text';
        else if (byte === ESC) this.state = 'string-esc';
        return;
      case 'string-esc':
        this.state = byte === 0x5c ? 'text' : 'string';
        return;
    }
  }

  private afterEsc(byte: number, out: number[]): void {
    if (STRING_INTRODUCERS.has(byte)) {
      this.state = 'string';
    } else if (byte === 0x5b) {
      this.state = 'csi';
      this.csi = [ESC, byte];
    } else {
      this.state = 'text';
      out.push(ESC, byte);
    }
  }

  private inCsi(byte: number, out: number[]): void {
    this.csi.push(byte);
    if (byte < 0x40 || byte > 0x7e) {
      if (this.csi.length > MAX_CSI) this.state = 'text'; // dropped, and what follows is text again
      return;
    }
    this.state = 'text';
    // A request ($ intermediate: DECRQM and the like) or a sequence the terminal answers never reaches it.
    if (ANSWERED_FINALS.has(byte) || this.csi.includes(0x24)) return;
    out.push(...this.csi);
  }
}
