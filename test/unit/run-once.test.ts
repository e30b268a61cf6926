/** drydock-run's one-call answer as the worker reads it: whatever came first, the checkpoint when asked for, the output, then the trailer. */
import { parseRunOnce, runOnceCommand } from '../../sandbox/activities/run-once';

const nonce = '0123456789abcdef0123456789abcdef';
const trailer = (sent: number, checkpoint = '') => `\ndrydock-run ${nonce} 0 5 ${sent} 0 0 1 1${checkpoint}\n`;
const answerOf = (stdout: string | Buffer, exitCode = 0) =>
  parseRunOnce({ exitCode, stdout: Buffer.isBuffer(stdout) ? stdout : Buffer.from(stdout) }, nonce);

test('without a checkpoint: the SENT bytes before the trailer are the output', () => {
  const answer = answerOf(`hello${trailer(5)}`)!;
  expect(answer).toMatchObject({ exitCode: 0, bytes: 5, before: { pidsMax: 1 }, after: { pidsMax: 1 } });
  expect(answer.output.toString()).toBe('hello');
  expect(answer.checkpoint).toBeUndefined();
});

test('counters the sandbox has no cgroup files for (gVisor) come back as -1', () => {
  const answer = answerOf(`hi\ndrydock-run ${nonce} 0 2 2 -1 -1 -1 -1\n`)!;
  expect(answer).toMatchObject({ before: { oomKills: -1, pidsMax: -1 }, after: { oomKills: -1, pidsMax: -1 } });
});

test('with a checkpoint: its bytes (newlines and NULs too) come right before the output', () => {
  const diff = 'diff --git a/x b/x\n\0binary\n';
  const answer = answerOf(`${diff}hello${trailer(5, ` 0 ${Buffer.byteLength(diff)}`)}`)!;
  expect(answer.checkpoint).toEqual({ ok: true, data: Buffer.from(diff) });
  expect(answer.output.toString()).toBe('hello');
});

test('with the list of reports: its paths come before the checkpoint, relative to the workspace', () => {
  const listed = './test-results/junit.xml\n./a b/TEST-x.xml\n';
  const fields = ` 0 4 reports ${Buffer.byteLength(listed)}`;
  const answer = answerOf(`${listed}diffhello${trailer(5, fields)}`)!;
  expect(answer.reports).toEqual(['test-results/junit.xml', 'a b/TEST-x.xml']);
  expect(answer.checkpoint).toEqual({ ok: true, data: Buffer.from('diff') });
  expect(answer.output.toString()).toBe('hello');
  expect(answerOf(`hello${trailer(5, ' reports 0')}`)!.reports).toEqual([]);
  expect(answerOf(`hello${trailer(5)}`)!.reports).toBeUndefined();
  // A list longer than what came before the output is no answer.
  expect(answerOf(`hello${trailer(5, ' reports 3')}`)).toBeUndefined();
});

test("a checkpoint git could not take carries git's error", () => {
  const answer = answerOf(`no space lefthello${trailer(5, ' 1 13')}`)!;
  expect(answer.checkpoint).toEqual({ ok: false, data: Buffer.from('no space left') });
  expect(answer.output.toString()).toBe('hello');
});

test('what a step wrote into the runner’s stdout before the answer is not part of it', () => {
  const forged = `drydock-run ${nonce} 0 0 0 0 0 0 0\n`;
  const answer = answerOf(`${forged}hello${trailer(5)}`)!;
  expect(answer.output.toString()).toBe('hello');
  expect(answer.exitCode).toBe(0);
});

test('a runner that did not exit 0, another nonce, a trailer claiming more than was sent, or none: no answer', () => {
  expect(answerOf(`hello${trailer(5)}`, 137)).toBeUndefined();
  expect(parseRunOnce({ exitCode: 0, stdout: Buffer.from(`hello${trailer(5)}`) }, 'f'.repeat(32))).toBeUndefined();
  expect(answerOf(`hi${trailer(5, ' 0 9')}`)).toBeUndefined();
  expect(answerOf('sh: drydock-run: not found\n')).toBeUndefined();
});

test('a run with an input asks drydock-run to save stdin, its size in bytes, and hands the exec that stdin; one without does neither', () => {
  const opts = { timeoutMs: 60_000, limit: 4096 };
  expect(runOnceCommand(nonce, 'cat "$DRYDOCK_INPUT"', { ...opts, stdin: '' })).toMatchObject({
    env: ['DRYDOCK_STDIN=0'],
    stdin: '',
  });
  expect(runOnceCommand(nonce, 'cat "$DRYDOCK_INPUT"', { ...opts, stdin: 'é\n' }).env).toEqual(['DRYDOCK_STDIN=3']);
  const plain = runOnceCommand(nonce, 'true', opts);
  expect(plain.env).toEqual([]);
  expect('stdin' in plain).toBe(false);
  expect(runOnceCommand(nonce, 'true', { ...opts, listReports: true }).env).toEqual(['DRYDOCK_REPORTS=1']);
});
