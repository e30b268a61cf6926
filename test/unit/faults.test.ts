/** Naming the sandbox limit that stopped a step, and scrubbing secrets from what leaves the sandbox. */
import { parseCounters, sandboxFault } from '../../sandbox/faults';
import { hasTokenPattern, REDACTED, scrub } from '../../platform/scrub';
import { exitText } from '../../workflows/session/errors';
import type { SessionInput } from '../../workflows/input';
import type { StepResult } from '../../sandbox/contract';

const zero = { oomKills: 0, pidsMax: 0 };

test('cgroup v1 and v2 counters are read', () => {
  expect(parseCounters('oom_kill_disable 0\nunder_oom 0\noom_kill 3\nmax 7\n')).toEqual({ oomKills: 3, pidsMax: 7 });
  expect(parseCounters('low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n')).toEqual({ oomKills: 1, pidsMax: 0 });
  expect(parseCounters('')).toEqual(zero);
});

test.each([
  [{ exitCode: 137, output: 'Killed', after: { oomKills: 1, pidsMax: 0 } }, 'oom'],
  [{ exitCode: 124, output: '', after: { oomKills: 0, pidsMax: 40 } }, 'pids'],
  [{ exitCode: 2, output: 'sh: 1: Cannot fork', after: zero }, 'pids'],
  [{ exitCode: 254, output: 'bash: fork: retry: Resource temporarily unavailable', after: zero }, 'pids'],
  [{ exitCode: 1, output: 'dd: error writing /tmp/f: No space left on device', after: zero }, 'disk_full'],
  [{ exitCode: 1, output: 'Error: ENOSPC: no space left on device, write', after: zero }, 'disk_full'],
  [{ exitCode: 124, output: '', after: zero }, 'timeout'],
  [{ exitCode: 1, output: 'test failed', after: zero }, undefined],
  [{ exitCode: 137, output: '', after: zero }, undefined],
  [{ exitCode: 0, output: 'No space left on device (handled)', after: zero }, undefined],
  [{ exitCode: 0, output: '', after: { oomKills: 1, pidsMax: 0 } }, 'oom'],
  [{ exitCode: 0, output: '', after: { oomKills: 0, pidsMax: 3 } }, 'pids'],
])('%j is %s', (step, fault) => {
  expect(sandboxFault({ ...step, before: zero })).toBe(fault);
});

test('without the cgroup counters (gVisor), a refused fork in the output counts whatever the exit code', () => {
  const unknown = { oomKills: -1, pidsMax: -1 };
  const bomb = { exitCode: 0, output: 'sh: 1: Cannot fork\nsurvived', before: unknown, after: unknown };
  expect(sandboxFault(bomb)).toBe('pids');
  expect(sandboxFault({ ...bomb, output: 'survived' })).toBeUndefined();
  expect(sandboxFault({ ...bomb, before: zero, after: zero })).toBeUndefined(); // runc counted none: the step handled it
});

test('counters that moved before the step do not count', () => {
  const before = { oomKills: 2, pidsMax: 5 };
  expect(sandboxFault({ exitCode: 1, output: '', before, after: before })).toBeUndefined();
});

test('a full disk names both limits: the workspace fills as often as /tmp, and the output does not say which', () => {
  const limits = { disk: '64m', tmp: '16m' } as SessionInput['limits'];
  const full: StepResult = {
    exitCode: 1,
    timedOut: false,
    outputTail: 'dd: error writing fill: No space left on device',
  };
  expect(exitText(full, limits, 60_000)).toBe('exited with 1');
  full.failure = 'disk_full';
  expect(exitText(full, limits, 60_000)).toBe(
    'filled the disk (No space left on device; /workspace and home are limited to 64m, /tmp to 16m)',
  );
});

test('secrets are scrubbed by value and by pattern', () => {
  const key = 'my-model-key-1234567890';
  const gh = `ghp_${'a1'.repeat(18)}`;
  const text = `key=${key}\ntoken ${gh}\nsk-proj-${'x'.repeat(30)}\nAKIAABCDEFGHIJKLMNOP\nshort=abc`;
  const out = scrub(text, [key, 'abc']);
  expect(out).not.toContain(key);
  expect(out).not.toContain(gh);
  expect(out).not.toMatch(/sk-proj|AKIA/);
  expect(out).toContain('short=abc'); // too short to scrub by value
  expect(out.split(REDACTED)).toHaveLength(5);
  expect(hasTokenPattern(text)).toBe(true);
  expect(hasTokenPattern(out)).toBe(false);
});
