/**
 * What a host admits (sandbox/activities/admission.ts): slots kept for those
 * ahead in line, the sums of memory and CPU limits, free disk; a session alone
 * on its host is never refused for its size (it would queue for ever).
 */
import { holdersOf, refusalOf, reservedLabel, type HostLimits } from '../../sandbox/activities/admission';
import { POOL_LABEL } from '../../sandbox/pool-registry';
import { LABELS } from '../../sandbox/provider';

const GiB = 1024 ** 3;
const limits: HostLimits = { hostId: 'h1', sandboxes: 3, cpus: 4, memoryBytes: 6 * GiB, diskFreeBytes: 2 * GiB };
const plenty = { memoryBytes: 64 * GiB, diskFreeBytes: 100 * GiB };
const held = (...sizes: [number, number][]) =>
  new Map(sizes.map(([cpus, gib], i) => [`s${i}`, { cpus, memoryBytes: gib * GiB }]));
const want = { cpus: 2, memoryBytes: 2 * GiB };

test('a session is admitted while every bound has room', () => {
  expect(refusalOf(limits, plenty, held([1, 2]), want, 0)).toBeUndefined();
});

test('slots: full, or the free ones kept for sessions ahead in line', () => {
  expect(refusalOf(limits, plenty, held([0, 0], [0, 0], [0, 0]), want, 0)).toBe('host h1 holds 3 of 3 sandboxes');
  expect(refusalOf(limits, plenty, held([0, 0]), want, 2)).toBe(
    'host h1 holds 1 of 3 sandboxes; the free ones are kept for 2 queued sessions ahead in line',
  );
});

test("memory: the sum of limits against DRYDOCK_HOST_MEMORY, else the engine's memory", () => {
  expect(refusalOf(limits, plenty, held([0, 5]), want, 0)).toBe(
    'host h1: its sandboxes hold 5.0 GiB of 6.0 GiB of memory (DRYDOCK_HOST_MEMORY); this session needs 2.0 GiB',
  );
  const engine = { ...limits, memoryBytes: undefined };
  expect(refusalOf(engine, { ...plenty, memoryBytes: 3 * GiB }, held([0, 2]), want, 0)).toContain(
    "of 3.0 GiB of memory (the engine's memory)",
  );
});

test('CPUs: bounded only when DRYDOCK_HOST_CPUS says', () => {
  expect(refusalOf(limits, plenty, held([3, 0]), want, 0)).toBe(
    'host h1: its sandboxes hold 3 of 4 CPUs (DRYDOCK_HOST_CPUS); this session needs 2',
  );
  expect(refusalOf({ ...limits, cpus: undefined }, plenty, held([3, 0]), want, 0)).toBeUndefined();
});

test('a session alone on its host is admitted whatever its size; free disk bounds every one', () => {
  expect(refusalOf(limits, plenty, held(), { cpus: 16, memoryBytes: 64 * GiB }, 0)).toBeUndefined();
  expect(refusalOf(limits, { ...plenty, diskFreeBytes: GiB }, held(), want, 0)).toBe(
    'host h1 has 1.0 GiB free on its sandbox storage, under the 2.0 GiB it keeps (DRYDOCK_HOST_DISK_FREE)',
  );
});

test("holders: one per session from the sandboxes' labels, pool spares not counted", () => {
  const info = (name: string, labels: Record<string, string>) => ({ id: name, name, labels, createdMs: 0 });
  const holders = holdersOf([
    info('a-browser', { [LABELS.session]: 'a' }),
    info('a', { [LABELS.session]: 'a', ...reservedLabel({ cpus: 2, memoryBytes: GiB }) }),
    info('a-postgres', { [LABELS.session]: 'a' }),
    info('pool', { [LABELS.session]: 'pool-1', [POOL_LABEL]: 'x' }),
  ]);
  expect([...holders]).toEqual([['a', { cpus: 2, memoryBytes: GiB }]]);
});
