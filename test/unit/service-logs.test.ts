/** Service logs as the built-in loop and the console read them (sandbox/service-logs.ts): plain text, bounded. */
import { lastLines, linesAsked, LOG_LINES } from '../../sandbox/service-logs';
import { plainLogText } from '../../platform/scrub';

test('terminal sequences and control characters are dropped; tab and newline stay, a lone CR ends a line', () => {
  const raw =
    '\x1b[31mERROR\x1b[0m:\trelation "x"\r\n' + // colour
    'title \x1b]0;pwned\x07set, link \x1b]8;;http://e\x1b\\here\x1b]8;;\x1b\\\n' + // OSC with BEL and ST
    'dcs \x1bP1$r0m\x1b\\gone, apc \x1b_hidden\x1b\\ too\n' + // device control, APC
    'c1 \x9b2Jcsi, bell\x07 nul\x00 del\x7f ok\n' +
    'progress 10%\rprogress 100%';
  expect(plainLogText(raw)).toBe(
    'ERROR:\trelation "x"\n' +
      'title set, link here\n' +
      'dcs gone, apc  too\n' +
      'c1 csi, bell nul del ok\n' +
      'progress 10%\nprogress 100%',
  );
  expect(plainLogText('a\x1b')).toBe('a');
});

test('the last lines, within a character bound cut at a line start', () => {
  const log = Array.from({ length: 10 }, (_, i) => `line ${i + 1}`).join('\n') + '\n';
  expect(lastLines(log, 3)).toBe('line 8\nline 9\nline 10');
  expect(lastLines(log, 100)).toBe(log.trimEnd());
  expect(lastLines(log, 5, 16)).toBe('line 9\nline 10');
  expect(lastLines('x'.repeat(50), 1, 10)).toBe('x'.repeat(10));
  expect(lastLines('', 5)).toBe('');
});

test('lines asked: a whole number within bounds, else the default or the most', () => {
  expect(linesAsked(undefined)).toBe(LOG_LINES.default);
  expect(linesAsked('50')).toBe(LOG_LINES.default);
  expect(linesAsked(0)).toBe(LOG_LINES.default);
  expect(linesAsked(Number.NaN)).toBe(LOG_LINES.default);
  expect(linesAsked(12.7)).toBe(12);
  expect(linesAsked(1e9)).toBe(LOG_LINES.max);
});
