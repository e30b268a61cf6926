/**
 * The scrubber runs on whatever a sandbox prints, so it must be linear on any
 * input (a complexity guard with a generous bound, not a benchmark) and must
 * leave the worker's event loop free on large outputs.
 */
import { hasTokenPattern, REDACTED, scrub, scrubLarge, SCRUB_CHUNK_CHARS } from '../../lib/scrub';

const MiB = 1024 * 1024;
/** Generous: linear scrubbing does a MiB in milliseconds; the quadratic one took 8 s on 80 k spaces. */
const MS_PER_MIB = 1_000;
const bound = (chars: number) => Math.max(250, (MS_PER_MIB * chars) / MiB);

const adversarial: [string, string][] = [
  ['80k spaces', ' '.repeat(80_000)],
  ['160k tabs', '\t'.repeat(160_000)],
  ['an authorization header then 80k spaces', `Authorization: ${' '.repeat(80_000)}x`],
  ['bearer then 80k tabs', `bearer${'\t'.repeat(80_000)}x`],
  ['a URL user then 200k characters without "@"', `//user:${'p'.repeat(200_000)}`],
  ['200k URL starts', '//a:'.repeat(50_000)],
  ['a key header then 200k capitals and spaces', `-----BEGIN ${'A '.repeat(100_000)}`],
  ['200k token prefixes', 'ghp_sk-xoxb-glpat-'.repeat(12_000)],
  ['1 MiB of mixed whitespace and words', 'bearer \t\n authorization: token '.repeat(MiB / 32)],
];

test.each(adversarial)('%s is scrubbed in linear time', (_name, text) => {
  const started = performance.now();
  scrub(text, ['a-granted-secret']);
  expect(performance.now() - started).toBeLessThan(bound(text.length));
});

test('the patterns still redact what they did', () => {
  const out = scrub(
    [
      'Authorization: Bearer abc.def-ghi',
      'curl -H "authorization: token ghx_notAKnownPrefix"',
      `export TOKEN=${'Bearer'} ${'z'.repeat(20)}`,
      'git clone https://oauth2:hunter2secret@github.com/acme/app.git',
      '-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----',
    ].join('\n'),
  );
  expect(out).toBe(
    [
      `Authorization: Bearer ${REDACTED}`,
      `curl -H "authorization: token ${REDACTED}"`,
      `export TOKEN=Bearer ${REDACTED}`,
      `git clone https://oauth2:${REDACTED}@github.com/acme/app.git`,
      REDACTED,
    ].join('\n'),
  );
});

/** About 2.5 MiB of log with tokens, a secret and a private key everywhere, including across piece boundaries. */
function bigLog(secret: string): string {
  const parts: string[] = [];
  let size = 0;
  for (let i = 0; size < 2.5 * MiB; i++) {
    const line =
      i % 997 === 0
        ? `-----BEGIN OPENSSH PRIVATE KEY-----\n${'b3BlbnNzaC1rZXk\n'.repeat(40)}-----END OPENSSH PRIVATE KEY-----\n`
        : i % 101 === 0
          ? `token ghp_${'a1'.repeat(18)} and ${secret}\n`
          : `line ${i}: ${'x'.repeat(i % 300)}\n`;
    parts.push(line);
    size += line.length;
  }
  return parts.join('');
}

test('scrubLarge gives what scrub gives, in pieces, and lets the event loop turn meanwhile', async () => {
  const secret = 'granted-secret-value';
  const text = bigLog(secret);
  expect(text.length).toBeGreaterThan(4 * SCRUB_CHUNK_CHARS);
  let turns = 0;
  let done = false;
  const turn = () => {
    turns++;
    if (!done) setImmediate(turn);
  };
  setImmediate(turn);
  const large = await scrubLarge(text, [secret]);
  done = true;
  expect(large).toBe(scrub(text, [secret]));
  expect(large).not.toContain(secret);
  expect(large).not.toContain('b3BlbnNzaC1rZXk');
  expect(hasTokenPattern(large)).toBe(false);
  expect(turns).toBeGreaterThanOrEqual(4);
});

test('scrubLarge cuts a text without newlines or whitespace and stays linear', async () => {
  const text = `${'q'.repeat(3 * MiB)} ghp_${'a1'.repeat(18)}`;
  const started = performance.now();
  const out = await scrubLarge(text);
  expect(performance.now() - started).toBeLessThan(bound(text.length));
  expect(out).toBe(`${'q'.repeat(3 * MiB)} ${REDACTED}`);
});
