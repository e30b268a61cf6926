/** The session input's schema (workflows/input.ts): defaults, bounds, and each bad field named. */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseSessionInput } from '../../workflows/input';
import { githubRepoOf } from '../../workflows/rules/repo-url';
import { durationMs, sizeBytes } from '../../workflows/units';
import { sessionInputJsonSchema } from '../../cli/schema';

test('the minimal input gets every default', () => {
  const parsed = parseSessionInput({ repo: { url: 'file:///r' }, task: 't' });
  expect(parsed).toEqual({
    ok: true,
    input: {
      repo: { url: 'file:///r' },
      task: 't',
      agent: {
        kind: 'script',
        maxOutputTokens: 8192,
        steps: [],
        planSteps: [],
        toolOutputLimit: 10_000,
        runTimeout: '5m',
        contextWindow: 128_000,
        continueAsNewEvery: 20,
        egress: [],
        secrets: [],
        budget: { maxTurns: 50, maxWallTime: '1h', onExceeded: 'verify' },
      },
      verify: { timeout: '10m', maxRounds: 2 },
      plan: false,
      publish: { pullRequest: false, deploy: false, push: true, openFor: '7d' },
      approval: { required: [], approvers: [], forbidSelfApproval: false, separateGates: false, timeout: '24h' },
      memory: { use: true, propose: true },
      children: { max: 4, depth: 1 },
      limits: {
        cpus: 2,
        memory: '2g',
        pids: 512,
        tmp: '512m',
        disk: '10g',
        wallTime: '2h',
        network: 'none',
        setupEgress: true,
      },
    },
  });
});

test('each bad field is named', () => {
  const parsed = parseSessionInput({
    repo: { url: '' },
    task: 't',
    agent: { steps: [{ write: { path: '../escape', content: '' } }, { run: 'x', timeout: 'soon' }] },
    limits: { network: 'bridge', memory: '2 gigs' },
  });
  expect(parsed.ok).toBe(false);
  const problems = (parsed as { problems: string[] }).problems.join('\n');
  expect(problems).toMatch(/^repo\.url: /m);
  expect(problems).toMatch(/^agent\.steps\.0/m);
  expect(problems).toMatch(/^agent\.steps\.1/m);
  expect(problems).toMatch(/^limits\.network: /m);
  expect(problems).toMatch(/^limits\.memory: /m);
});

test('a pull request needs a GitHub repository', () => {
  expect(parseSessionInput({ repo: { url: 'file:///r' }, task: 't', publish: { pullRequest: true } })).toEqual({
    ok: false,
    problems: ['publish.pullRequest.repo: required ("owner/name") when repo.url is not a GitHub URL'],
  });
  expect(
    parseSessionInput({ repo: { url: 'https://github.com/acme/app.git' }, task: 't', publish: { pullRequest: true } })
      .ok,
  ).toBe(true);
  expect(githubRepoOf('git@github.com:acme/app.git')).toBe('acme/app');
  expect(githubRepoOf('file:///srv/app.git')).toBeUndefined();
});

test('a memory limit below 64m (0 is unlimited to Docker) is refused', () => {
  for (const memory of ['0g', 1024, '63m']) {
    expect(parseSessionInput({ repo: { url: 'file:///r' }, task: 't', limits: { memory } })).toEqual({
      ok: false,
      problems: ['limits.memory: at least 64m (0 would mean unlimited to Docker)'],
    });
  }
});

const base = { repo: { url: 'file:///r' }, task: 't' };

test.each([
  [{ limits: { memory: '1000000g' } }, 'limits.memory: at most 64g'],
  [{ limits: { memory: 100 * 1024 ** 3 } }, 'limits.memory: at most 64g'],
  [{ limits: { cpus: 64 } }, 'limits.cpus: Too big: expected number to be <=16'],
  [{ limits: { pids: 65536 } }, 'limits.pids: Too big: expected number to be <=4096'],
  [{ limits: { tmp: '100g' } }, 'limits.tmp: at most 16g'],
  [{ limits: { wallTime: '3650d' } }, 'limits.wallTime: at most 24h'],
  [{ verify: { timeout: '7h' } }, 'verify.timeout: at most 6h'],
  [{ approval: { timeout: '31d' } }, 'approval.timeout: at most 30d'],
  [{ agent: { steps: [{ run: 'x', timeout: 7 * 3_600_000 }] } }, 'agent.steps.0.timeout: at most 6h'],
  [{ agent: { budget: { maxWallTime: '2d' } } }, 'agent.budget.maxWallTime: at most 24h'],
  [{ agent: { kind: 'openai', model: 'm', runTimeout: '2h' } }, 'agent.runTimeout: at most 1h'],
  [
    { agent: { kind: 'openai', model: 'm', contextWindow: 3_000_000 } },
    'agent.contextWindow: Too big: expected number to be <=2000000',
  ],
  [
    { agent: { kind: 'openai', model: 'm', contextWindow: 1000 } },
    'agent.contextWindow: Too small: expected number to be >=4000',
  ],
])('server-side bound: %j is refused with %j', (part, problem) => {
  expect(parseSessionInput({ ...base, ...part })).toEqual({ ok: false, problems: [problem] });
});

test('values at the bounds are accepted', () => {
  const limits = { cpus: 16, memory: '64g', pids: 4096, tmp: '16g', wallTime: '24h' };
  expect(parseSessionInput({ ...base, limits, approval: { timeout: '30d' } }).ok).toBe(true);
});

test('branch names follow git rules', () => {
  for (const branch of ['a..b', 'x.lock', 'feature/', '/x', '-x', 'a//b', 'a/.b']) {
    const parsed = parseSessionInput({ repo: { url: 'file:///r' }, task: 't', publish: { branch } });
    expect(parsed.ok ? branch : 'refused').toBe('refused');
  }
  expect(parseSessionInput({ repo: { url: 'file:///r' }, task: 't', publish: { branch: 'drydock/fix-1.2' } }).ok).toBe(
    true,
  );
});

test('a missing input names the input itself', () => {
  expect(parseSessionInput(undefined)).toEqual({ ok: false, problems: [expect.stringMatching(/^\(input\): /)] });
});

test('durations and sizes', () => {
  expect(durationMs('90s')).toBe(90_000);
  expect(durationMs('24h')).toBe(86_400_000);
  expect(durationMs(1500)).toBe(1500);
  expect(sizeBytes('512m')).toBe(512 * 1024 ** 2);
  expect(sizeBytes('2G')).toBe(2 * 1024 ** 3);
});

test('the shipped JSON Schema is the one generated from the zod schema (run npm run schema)', () => {
  const shipped = JSON.parse(readFileSync(path.join(__dirname, '../../workflows/session-input.schema.json'), 'utf8'));
  expect(shipped).toEqual(sessionInputJsonSchema());
});
