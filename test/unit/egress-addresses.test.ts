/**
 * Property test of the egress proxy's address classifier: every textual form
 * of a restricted address (loopback, private, link-local, ...) is restricted,
 * IPv4 ones also when carried in IPv6 (mapped, NAT64, 6to4); a public address
 * stays reachable in every form.
 */
import fc from 'fast-check';
import { networkInterfaces } from 'node:os';
import { restrictedAddress } from '../../sandbox/egress';

type Quad = [number, number, number, number];

/** [first octets, prefix length] of the restricted IPv4 ranges the proxy must refuse. */
const RESTRICTED_V4: [number[], number][] = [
  [[127], 8],
  [[10], 8],
  [[0], 8],
  [[172, 16], 12],
  [[192, 168], 16],
  [[169, 254], 16],
  [[100, 64], 10],
  [[224], 4],
  [[240], 4],
];

const octet = fc.integer({ min: 0, max: 255 });
const word = fc.integer({ min: 0, max: 0xffff });

const restrictedV4 = fc
  .tuple(fc.constantFrom(...RESTRICTED_V4), octet, octet, octet, octet)
  .map(([[start, prefix], ...random]): Quad => {
    const base = [...start, 0, 0, 0, 0].slice(0, 4);
    const value = (quad: number[]) => quad.reduce((n, o) => n * 256 + o, 0);
    const hostBits = 2 ** (32 - prefix);
    const n = value(base) + (value(random) % hostBits);
    return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
  });

const own = new Set(
  Object.values(networkInterfaces())
    .flat()
    .map((i) => i?.address),
);
const inRange = (q: Quad, start: number[], prefix: number) =>
  start.every((o, i) => {
    const bits = Math.min(8, Math.max(0, prefix - 8 * i));
    return q[i] >> (8 - bits) === o >> (8 - bits);
  });
const publicV4 = fc
  .tuple(octet, octet, octet, octet)
  .filter(
    (q) =>
      !RESTRICTED_V4.some(([start, prefix]) => inRange(q, start, prefix)) &&
      !inRange(q, [192, 0, 0], 24) &&
      !inRange(q, [198, 18], 15) &&
      !own.has(q.join('.')),
  );

const hex = (n: number) => n.toString(16);
const hi = (q: Quad) => (q[0] << 8) | q[1];
const lo = (q: Quad) => (q[2] << 8) | q[3];

/** Every way to write an IPv4 address, bare or inside IPv6. */
function v4Forms(q: Quad, suffix: number[]): string[] {
  const dotted = q.join('.');
  return [
    dotted,
    String(q.reduce((n, o) => n * 256 + o, 0)),
    q.map((o) => `0x${hex(o)}`).join('.'),
    `${q[0]}.${q[1]}.${(q[2] << 8) | q[3]}`,
    `::ffff:${dotted}`,
    `::ffff:${hex(hi(q))}:${hex(lo(q))}`,
    `0:0:0:0:0:ffff:${hex(hi(q))}:${hex(lo(q))}`,
    `0000:0000:0000:0000:0000:FFFF:${dotted}`,
    `64:ff9b::${dotted}`,
    `64:ff9b::${hex(hi(q))}:${hex(lo(q))}`,
    `0064:FF9B:0:0:0:0:${hex(hi(q))}:${hex(lo(q))}`,
    `2002:${hex(hi(q))}:${hex(lo(q))}::${suffix.map(hex).join(':')}`,
    `2002:${hex(hi(q))}:${hex(lo(q))}:${suffix.map(hex).join(':')}:0:0`.toUpperCase(),
  ];
}

/** Compressed, expanded, upper-case, zero-padded and bracketed forms of an IPv6 address. */
function v6Forms(words: number[]): string[] {
  const expanded = words.map(hex).join(':');
  const padded = words.map((w) => hex(w).padStart(4, '0')).join(':');
  const compressed = new URL(`http://[${expanded}]/`).hostname.slice(1, -1);
  return [expanded, padded, padded.toUpperCase(), compressed];
}

const withBrackets = (forms: string[]) => [...forms, ...forms.filter((f) => f.includes(':')).map((f) => `[${f}]`)];

const suffix = fc.array(word, { minLength: 3, maxLength: 3 });

test('every textual form of a restricted IPv4 address is restricted', () => {
  fc.assert(
    fc.property(restrictedV4, suffix, (q, rest) => {
      for (const form of withBrackets(v4Forms(q, rest))) {
        expect([form, restrictedAddress(form)]).toEqual([form, expect.any(String)]);
      }
    }),
    { numRuns: 200 },
  );
});

test('every textual form of a public IPv4 address is reachable', () => {
  fc.assert(
    fc.property(publicV4, suffix, (q, rest) => {
      for (const form of withBrackets(v4Forms(q, rest))) {
        expect([form, restrictedAddress(form)]).toEqual([form, undefined]);
      }
    }),
    { numRuns: 200 },
  );
});

/** Restricted IPv6 ranges: [first word, bits of it that are fixed]. */
const RESTRICTED_V6: [number, number][] = [
  [0xfe80, 10], // link-local
  [0xfec0, 10], // site-local
  [0xfc00, 7], // unique local
  [0xff00, 8], // multicast
];

const restrictedV6 = fc
  .tuple(fc.constantFrom(...RESTRICTED_V6), fc.array(word, { minLength: 8, maxLength: 8 }))
  .map(([[first, bits], words]) => {
    const free = 16 - bits;
    return [first | (words[0] & ((1 << free) - 1)), ...words.slice(1)];
  });

test('every textual form of a restricted IPv6 address (link-local, site-local, ULA, multicast, loopback) is restricted', () => {
  fc.assert(
    fc.property(fc.oneof(restrictedV6, fc.constant<number[]>([0, 0, 0, 0, 0, 0, 0, 1])), (words) => {
      for (const form of withBrackets(v6Forms(words))) {
        expect([form, restrictedAddress(form)]).toEqual([form, expect.any(String)]);
      }
    }),
    { numRuns: 200 },
  );
});

test.each([
  ['::ffff:7f00:1', 'loopback'],
  ['64:ff9b::a9fe:a9fe', 'link-local'],
  ['64:ff9b::127.0.0.1', 'loopback'],
  ['2002:a00:1::1', 'private'],
  ['2002:7f00:1::', 'loopback'],
  ['fec0::1', 'site-local'],
  ['[::ffff:192.168.0.1]', 'private'],
  ['0x7f.1', 'loopback'],
  ['fe80::1%eth0', 'link-local'],
  ['64:ff9b::808:808', undefined],
  ['2002:808:808::1', undefined],
  ['example.com', undefined],
])('%s is %s', (address, range) => {
  expect(restrictedAddress(address)).toBe(range);
});
