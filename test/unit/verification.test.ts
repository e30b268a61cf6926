/** Verification's rules and readers: JUnit parsing, the pass/fail verdict, bounded browser messages. */
import {
  boundMessages,
  MAX_BROWSER_MESSAGE_CHARS,
  MAX_BROWSER_MESSAGES,
  parseJUnit,
} from '../../sandbox/activities/verify';
import { describeVerification, summarizeVerification } from '../../workflows/rules/verification';

test('JUnit: a bare testsuite root, nested suites, failures and errors and skips', () => {
  const report = parseJUnit([
    {
      file: 'a.xml',
      content: `<testsuite name="a"><testcase name="one"/><testcase name="two"><skipped/></testcase></testsuite>`,
    },
    {
      file: 'b.xml',
      content: `<testsuites><testsuite name="outer"><testsuite name="inner">
        <testcase classname="C" name="three"><failure>assertion failed
at line 3</failure></testcase>
      </testsuite></testsuite></testsuites>`,
    },
    { file: 'not-junit.xml', content: '<project><name>x</name></project>' },
  ]);
  expect(report).toEqual({
    files: ['a.xml', 'b.xml'],
    total: 3,
    passed: 1,
    failed: 1,
    skipped: 1,
    failures: [{ name: 'C › three', message: 'assertion failed' }],
  });
});

test('verification passes only when every part passed, and says what failed', () => {
  expect(summarizeVerification({ command: 'npm test', exitCode: 0 })).toEqual({ passed: true, summary: '' });
  expect(summarizeVerification({ command: 'npm test', exitCode: 124, timedOut: true })).toEqual({
    passed: false,
    summary: "'npm test' timed out",
  });
  const browser = {
    url: 'http://localhost:3000/',
    outcome: 'browser_crashed' as const,
    message: 'Chromium did not start',
    checks: [],
    screenshots: [],
    consoleErrors: [],
    failedRequests: [],
    appLogTail: '',
    durationMs: 1,
  };
  expect(summarizeVerification({ browser })).toEqual({
    passed: false,
    summary: 'the browser crashed: Chromium did not start',
  });
  // An app that never answers is named with where its log is and how it ends.
  const notReady = {
    ...browser,
    outcome: 'not_ready' as const,
    message: 'http://localhost:3000/ did not answer within 3 s',
  };
  expect(
    summarizeVerification({ browser: { ...notReady, appLogTail: 'a\nb\nc\nwaiting for db\n' } }, 'npm run dev'),
  ).toEqual({
    passed: false,
    summary:
      "the page never became ready: http://localhost:3000/ did not answer within 3 s; the app ('npm run dev') runs on, its log (/home/drydock/.drydock/app.log) ends: b | c | waiting for db",
  });
  expect(summarizeVerification({ browser: notReady }, 'sleep 600').summary).toMatch(/its log \(.*\) is empty$/);
  expect(describeVerification(undefined)).toBe('no verification configured');
  expect(
    describeVerification({
      passed: false,
      summary: '',
      command: 'npm test',
      exitCode: 1,
      report: { files: [], total: 4, passed: 3, failed: 1, skipped: 0, failures: [] },
      browser,
    }),
  ).toBe(
    'failed: npm test (4 tests: 3 passed, 1 failed, 0 skipped); browser http://localhost:3000/: browser_crashed, 0/0 checks',
  );
});

test("the browser runner's console errors are bounded in count and length, and the cut is counted", () => {
  const flood = Array.from({ length: 10_000 }, (_, i) => `error ${i} ${'x'.repeat(i === 0 ? 50_000 : 10)}`);
  const kept = boundMessages(flood);
  expect(kept).toHaveLength(MAX_BROWSER_MESSAGES + 1);
  expect(kept[0]).toHaveLength(MAX_BROWSER_MESSAGE_CHARS + '… (49008 more characters)'.length);
  expect(kept[0]).toMatch(/… \(49008 more characters\)$/);
  expect(kept[1]).toBe(`error 1 ${'x'.repeat(10)}`);
  expect(kept.at(-1)).toBe(`… and ${10_000 - MAX_BROWSER_MESSAGES} more`);
  expect(boundMessages('not a list')).toEqual([]);
  expect(boundMessages(['a', 2])).toEqual(['a', '2']);
});
