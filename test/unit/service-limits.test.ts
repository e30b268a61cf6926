/**
 * A session's limits shared between its sandbox and its services
 * (workflows/rules/service-limits.ts): memory and processes counted, CPUs
 * capped per container, a share that leaves the sandbox too little refused.
 */
import { shareLimits } from '../../workflows/rules/service-limits';
import { servicesOfConfig } from '../../workflows/services';

const MiB = 1024 ** 2;
const session = { cpus: 2, memoryBytes: 2048 * MiB, pids: 512 };
const services = (limits: Record<string, Record<string, unknown>>) =>
  servicesOfConfig(Object.fromEntries(Object.entries(limits).map(([n, l]) => [n, { image: 'x', limits: l }])) as never);

test('no services: the sandbox has the whole session', () => {
  expect(shareLimits(session, [])).toEqual({ ok: true, sandbox: session, services: {} });
});

test("services take their share of the session's memory and processes; the sandbox keeps the rest", () => {
  expect(shareLimits(session, services({ db: { memory: '256m', cpus: 4 }, cache: {} }))).toEqual({
    ok: true,
    sandbox: { cpus: 2, memoryBytes: 1536 * MiB, pids: 256 },
    services: {
      db: { cpus: 2, memoryBytes: 256 * MiB, pids: 128 },
      cache: { cpus: 1, memoryBytes: 256 * MiB, pids: 128 },
    },
  });
});

test('undeclared shares shrink to fit a small session', () => {
  const small = { cpus: 1, memoryBytes: 512 * MiB, pids: 256 };
  const shared = shareLimits(small, services({ db: {}, cache: {} }));
  expect(shared).toEqual({
    ok: true,
    sandbox: { cpus: 1, memoryBytes: 256 * MiB, pids: 64 },
    services: {
      db: { cpus: 1, memoryBytes: 128 * MiB, pids: 96 },
      cache: { cpus: 1, memoryBytes: 128 * MiB, pids: 96 },
    },
  });
});

test('a declared share that leaves the sandbox too little is refused, naming the field', () => {
  expect(shareLimits(session, services({ db: { memory: '1900m' } }))).toEqual({
    ok: false,
    problems: [
      "services.db.limits.memory: the services need 1900m of the session's 2048m memory, leaving the sandbox less than 256m: " +
        "lower it, or raise limits.memory (within the operator's maximum)",
    ],
  });
  const pids = shareLimits(session, services({ db: { pids: 500 } }));
  expect(!pids.ok && pids.problems[0]).toMatch(/^services\.db\.limits\.pids: /);
});
