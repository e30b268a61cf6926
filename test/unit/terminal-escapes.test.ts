/** What a sandbox's TTY may send to the terminal of a person attached to it. */
import { TerminalEscapeFilter } from '../../sandbox/terminal-escapes';

const ESC = '\x1b';
const through = (...chunks: (string | Buffer)[]) => {
  const filter = new TerminalEscapeFilter();
  return Buffer.concat(chunks.map((c) => filter.push(Buffer.isBuffer(c) ? c : Buffer.from(c, 'utf8')))).toString(
    'utf8',
  );
};

test('colours, cursor movement, screen modes and text pass as they are', () => {
  const screen = `${ESC}[1;31mred${ESC}[0m ${ESC}[2J${ESC}[H${ESC}[?1049h${ESC}[10;5Hé ✓ ${ESC}(B${ESC}[?25l\r\n`;
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
])('%s is dropped, the text around it kept', (_what, escape) => {
  expect(through(`before ${escape}after`)).toBe('before after');
});

test('an escape split across chunks is judged whole', () => {
  expect(through('a', ESC, ']52;c;', 'eA==', '\x07', 'b', `${ESC}[`, '31m', 'c')).toBe(`ab${ESC}[31mc`);
  expect(through(Buffer.from([0x78, 0xc2]), Buffer.from([0x9d, 0x30, 0x3b, 0x74, 0x07, 0x79]))).toBe('xy');
  expect(through(Buffer.from([0xc2]), Buffer.from([0xa9]))).toBe('©');
  expect(through(Buffer.from([0xc2]), Buffer.from([0x9b, 0x33, 0x31, 0x6d]))).toBe(`${ESC}[31m`);
});

test('a CSI that never ends is dropped and the text after it comes back', () => {
  expect(through(`${ESC}[${'1;'.repeat(100)}`, 'visible')).toMatch(/visible$/);
});
