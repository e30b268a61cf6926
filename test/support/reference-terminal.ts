/**
 * A reference terminal for the attach filter's tests: xterm.js headless (the
 * parser of VS Code's and many web terminals, Paul Williams' state machine),
 * watched at its parser. What it printed, which CSI and ESC sequences it
 * dispatched, whether it began an OSC or a DCS, and what it answered on its
 * input (onData: device status, attributes, mode and colour reports).
 *
 * The hooks reach into xterm's parser (`_core._inputHandler._parser`), pinned
 * by the devDependency's exact version: a release that moves them fails these
 * tests loudly (observe() checks that the hooks are there).
 */
import { Terminal } from '@xterm/headless';

export interface Observed {
  /** The code points the parser printed, in order. */
  prints: number[];
  /** CSI sequences dispatched, as prefix + intermediates + final (`?h`, ` q`, `m`). */
  csi: string[];
  /** ESC sequences dispatched, as intermediates + final (`7`, `(B`). */
  esc: string[];
  /** OSC strings and DCS sequences begun. */
  oscs: number;
  dcs: number;
  /** What the terminal sent on its input. */
  replies: string[];
  titles: string[];
}

interface Parser {
  _printHandler: (data: Uint32Array, start: number, end: number) => void;
  _csiHandlers: Record<number, unknown>;
  _escHandlers: Record<number, unknown>;
  _oscParser: { start: () => void };
  _dcsParser: { hook: (ident: number, params: unknown) => void };
  identToString: (ident: number) => string;
}

/** Reads of a handler table by identifier: each is one dispatch. */
function recorded(table: Record<number, unknown>, record: (ident: number) => void): Record<number, unknown> {
  return new Proxy(table, {
    get(target, key) {
      if (typeof key === 'string' && /^\d+$/.test(key)) record(Number(key));
      return Reflect.get(target, key) as unknown;
    },
  });
}

function watch(term: Terminal, seen: Observed): void {
  const parser = (term as unknown as { _core: { _inputHandler: { _parser: Parser } } })._core._inputHandler._parser;
  if (!parser?._printHandler || !parser._csiHandlers || !parser._oscParser?.start || !parser._dcsParser?.hook) {
    throw new Error("@xterm/headless's parser is not where test/support/reference-terminal.ts looks for it");
  }
  const print = parser._printHandler;
  parser._printHandler = (data, start, end) => {
    seen.prints.push(...data.subarray(start, end));
    print(data, start, end);
  };
  parser._csiHandlers = recorded(parser._csiHandlers, (ident) => seen.csi.push(parser.identToString(ident)));
  parser._escHandlers = recorded(parser._escHandlers, (ident) => seen.esc.push(parser.identToString(ident)));
  const osc = parser._oscParser;
  const start = osc.start.bind(osc);
  osc.start = () => {
    seen.oscs++;
    start();
  };
  const dcs = parser._dcsParser;
  const hook = dcs.hook.bind(dcs);
  dcs.hook = (ident, params) => {
    seen.dcs++;
    hook(ident, params);
  };
}

/** Writes the chunks to a fresh 80x24 terminal, in order, and says what it did. */
export async function observe(chunks: Uint8Array[]): Promise<Observed> {
  const term = new Terminal({ cols: 80, rows: 24, allowProposedApi: true, logLevel: 'off' });
  const seen: Observed = { prints: [], csi: [], esc: [], oscs: 0, dcs: 0, replies: [], titles: [] };
  term.onData((d) => seen.replies.push(d));
  term.onBinary((d) => seen.replies.push(d));
  term.onTitleChange((t) => seen.titles.push(t));
  watch(term, seen);
  try {
    for (const chunk of chunks) await new Promise<void>((resolve) => term.write(chunk, resolve));
  } finally {
    term.dispose();
  }
  return seen;
}
