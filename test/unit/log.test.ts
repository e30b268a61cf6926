/** The readable log line (platform/log.ts). */
import { prettyLine } from '../../platform/log';

const time = Date.parse('2026-01-02T03:04:05.678Z');

test('a pino line reads as time, level, message and key=value fields', () => {
  const line = JSON.stringify({
    level: 30,
    time,
    pid: 7,
    msg: 'sandbox ready',
    sessionId: 's-1',
    restored: { step: 'step-1' },
  });
  expect(prettyLine(line)).toBe('03:04:05.678 INFO  sandbox ready sessionId=s-1 restored={"step":"step-1"}\n');
});

test("an error's stack goes below its line; colors only when asked", () => {
  const line = JSON.stringify({ level: 50, time, msg: 'boom', err: { message: 'x', stack: 'Error: x\n    at f' } });
  expect(prettyLine(line)).toBe('03:04:05.678 ERROR boom\n    Error: x\n        at f\n');
  expect(prettyLine(line, true)).toContain('\x1b[31mERROR\x1b[0m');
});

test('a line that is not JSON passes through', () => {
  expect(prettyLine('plain text')).toBe('plain text\n');
});
