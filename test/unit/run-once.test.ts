/** drydock-run's one-call answer as the worker reads it: header, the checkpoint when asked for, then the output. */
import { parseRunOnce } from '../../activities/run-once';

const nonce = '0123456789abcdef0123456789abcdef';
const header = `drydock-run ${nonce} 0 5 0 0 1 1\n`;

test('without a checkpoint: everything after the header is the output', () => {
  const answer = parseRunOnce(Buffer.from(`${header}hello`), nonce)!;
  expect(answer).toMatchObject({ exitCode: 0, bytes: 5, before: { pidsMax: 1 }, after: { pidsMax: 1 } });
  expect(answer.output.toString()).toBe('hello');
  expect(answer.checkpoint).toBeUndefined();
});

test('with a checkpoint: its bytes (newlines and NULs too) come before the output', () => {
  const diff = 'diff --git a/x b/x\n\0binary\n';
  const stdout = Buffer.from(`${header}drydock-checkpoint 0 ${Buffer.byteLength(diff)}\n${diff}hello`);
  const answer = parseRunOnce(stdout, nonce, true)!;
  expect(answer.checkpoint).toEqual({ ok: true, data: Buffer.from(diff) });
  expect(answer.output.toString()).toBe('hello');
});

test("a checkpoint git could not take carries git's error", () => {
  const stdout = Buffer.from(`${header}drydock-checkpoint 1 13\nno space lefthello`);
  const answer = parseRunOnce(stdout, nonce, true)!;
  expect(answer.checkpoint).toEqual({ ok: false, data: Buffer.from('no space left') });
  expect(answer.output.toString()).toBe('hello');
});

test('a missing or cut-off checkpoint line leaves the checkpoint to a second exec, the output as sent', () => {
  for (const rest of ['hello', 'drydock-checkpoint 0 999\nshort']) {
    const answer = parseRunOnce(Buffer.from(`${header}${rest}`), nonce, true)!;
    expect(answer.checkpoint).toBeUndefined();
    expect(answer.output.toString()).toBe(rest);
  }
});

test('another nonce, or no header at all, is no answer', () => {
  expect(parseRunOnce(Buffer.from(header), 'f'.repeat(32))).toBeUndefined();
  expect(parseRunOnce(Buffer.from('sh: drydock-run: not found\n'), nonce)).toBeUndefined();
});
