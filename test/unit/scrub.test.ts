/**
 * The scrubber runs on whatever a sandbox prints, so it must be linear on any
 * input (a complexity guard with a generous bound, not a benchmark) and must
 * leave the worker's event loop free on large outputs.
 */
import { hasTokenPattern, REDACTED, Redactor, scrub, scrubLarge, SCRUB_CHUNK_CHARS } from '../../platform/scrub';
import { cpuMs } from '../support/cpu-time';

const MiB = 1024 * 1024;
/** Generous, in CPU time: linear scrubbing does a MiB in milliseconds; the quadratic one took 8 s on 80 k spaces. */
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

test.each(adversarial)('%s is scrubbed in linear time', async (_name, text) => {
  expect(await cpuMs(() => scrub(text, ['a-granted-secret']))).toBeLessThan(bound(text.length));
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
  let out = '';
  expect(await cpuMs(async () => (out = await scrubLarge(text)))).toBeLessThan(bound(text.length));
  expect(out).toBe(`${'q'.repeat(3 * MiB)} ${REDACTED}`);
});

describe('the worker redactor', () => {
  const secret = 'S3cr3t/v4lue+with spaces&symbols?';
  const redactor = new Redactor([secret, 'short']);
  const hidden = (text: string) => !text.includes(secret) && !text.includes('v4lue');

  test.each([0, 1, 2])('finds the secret base64-encoded after %i bytes, in either alphabet', (offset) => {
    const encoded = Buffer.from(`${'x'.repeat(offset)}${secret} and more`).toString('base64');
    const out = redactor.text(`data: ${encoded}`);
    expect(out).toContain(REDACTED);
    expect(out).not.toContain(Buffer.from(secret).toString('base64').slice(4, -4));
    const urlSafe = encoded.replace(/\+/g, '-').replace(/\//g, '_');
    expect(redactor.text(urlSafe)).toContain(REDACTED);
  });

  test('finds the secret URL-encoded, with either hex case and as a form field', () => {
    const encoded = encodeURIComponent(secret);
    expect(encoded).not.toBe(secret);
    for (const form of [
      encoded,
      encoded.replace(/%[0-9A-F]{2}/g, (e) => e.toLowerCase()),
      encoded.replace(/%20/g, '+'),
    ]) {
      expect(redactor.text(`GET /?token=${form}&x=1`)).toBe(`GET /?token=${REDACTED}&x=1`);
    }
  });

  test('values too short to scrub are left alone, and so are words that merely start like a secret', () => {
    expect(redactor.text('a short word; S3cr3t is not the secret')).toBe('a short word; S3cr3t is not the secret');
  });

  test('scrubs strings inside plain objects and arrays, and leaves buffers and dates as they are', () => {
    const buffer = Buffer.from(secret);
    const date = new Date(0);
    const out = redactor.value({ a: [secret, { b: `x${secret}y` }], buffer, date, n: 1 });
    expect(out).toEqual({ a: [REDACTED, { b: `x${REDACTED}y` }], buffer, date, n: 1 });
    expect(out.buffer).toBe(buffer);
  });

  /** Streams `text` through a fresh stream redactor cut at each of `cuts`; returns what was given out each time. */
  const streamed = (text: string, cuts: number[]) => {
    const stream = redactor.stream();
    const given: string[] = [];
    let from = 0;
    for (const cut of [...cuts, text.length]) {
      given.push(stream.push(text.slice(from, cut)));
      from = cut;
    }
    given.push(stream.end());
    return given;
  };

  test('a secret cut in two by every possible chunk boundary is caught, and nothing else is lost', () => {
    const text = `before ${secret} middle ${Buffer.from(secret).toString('base64')} after ${encodeURIComponent(secret)}.`;
    for (let cut = 0; cut <= text.length; cut++) {
      const given = streamed(text, [cut]);
      expect(given.every(hidden)).toBe(true);
      expect(given.join('')).toBe(redactor.text(text));
    }
  });

  test('a secret given one character per chunk is caught; text that cannot begin a secret is given out at once', () => {
    const given = streamed(
      `ok ${secret}!`,
      [...Array(secret.length + 4).keys()].map((i) => i + 1),
    );
    expect(given.every(hidden)).toBe(true);
    expect(given.join('')).toBe(`ok ${REDACTED}!`);
    // "ok " cannot start any needle: out with its own chunk, not held for the window.
    const stream = redactor.stream();
    expect(stream.push('ok, plain text. ')).toBe('ok, plain text. ');
    // A possible beginning is held, then given out once it stops matching.
    expect(stream.push('S3cr')).toBe('');
    expect(stream.push('ew')).toBe('S3crew');
  });

  test('the held part is at most the longest needle less one character', () => {
    const stream = redactor.stream();
    const longest = redactor.needles[0].length;
    const given = stream.push(`x${secret.slice(0, -1)}`);
    expect(given).toBe('x');
    expect(longest).toBeGreaterThanOrEqual(secret.length);
    expect(stream.end()).toBe(secret.slice(0, -1));
  });

  test('streaming stays linear on adversarial input: a MiB of a secret prefix repeated', async () => {
    const text = secret.slice(0, -1).repeat(Math.ceil(MiB / secret.length));
    let given: string[] = [];
    expect(await cpuMs(() => (given = streamed(text, [1000, 4096, 65_536, 500_000])))).toBeLessThan(bound(text.length));
    expect(given.join('')).toBe(text);
  });
});
