/**
 * Verification per test for the review summary: every test case of the JUnit
 * reports the test step wrote (kept, scrubbed, in the artifact store), failures
 * first. Pure over the reports' text; bounded in what it lists.
 */
import { XMLParser } from 'fast-xml-parser';
import { locateFailure, type TestLocation } from '../forge/test-locations';

/** Test cases listed in a summary; the counts cover the rest. */
export const MAX_CASES = 500;

export interface TestCase {
  name: string;
  outcome: 'failed' | 'skipped' | 'passed';
  message?: string;
  /** A failure's place in the repo (its file and line), when the report tells. */
  place?: TestLocation;
}

const xml = new XMLParser({
  ignoreAttributes: false,
  attributeNamePrefix: '',
  textNodeName: 'text',
  isArray: (name) => ['testsuite', 'testcase'].includes(name),
});

type Node = Record<string, any>;
const suitesOf = (node: Node): Node[] => (node.testsuite ?? []).flatMap((s: Node) => [s, ...suitesOf(s)]);

function caseOf(c: Node): TestCase {
  const name = [c.classname, c.name].filter(Boolean).join(' › ');
  const problem = c.failure ?? c.error;
  if (problem === undefined) return { name, outcome: c.skipped === undefined ? 'passed' : 'skipped' };
  const first = Array.isArray(problem) ? problem[0] : problem;
  const message = typeof first === 'string' ? first : (first?.message ?? first?.text ?? '');
  const whole = typeof first === 'string' ? first : `${first?.message ?? ''}\n${first?.text ?? ''}`;
  const place = locateFailure(c, whole);
  return { name, outcome: 'failed', message: String(message).trim().split('\n')[0].slice(0, 300), place };
}

const ORDER = { failed: 0, skipped: 1, passed: 2 } as const;

/**
 * The test cases of one JUnit XML document (testsuites/testsuite/testcase, at
 * any depth), in its order; undefined when it has no test suite. The
 * verification's counts (sandbox/activities/verify.ts) are made from these too.
 */
export function junitCases(report: string): TestCase[] | undefined {
  const doc = xml.parse(report) as Node;
  const suites = suitesOf(doc.testsuites ?? { testsuite: doc.testsuite ?? [] });
  return suites.length ? suites.flatMap((suite) => (suite.testcase ?? []).map(caseOf)) : undefined;
}

/** Every test case of the reports, failures first (then skipped, then passed), at most MAX_CASES. */
export function testCasesOf(reports: string[]): TestCase[] {
  const cases: TestCase[] = [];
  for (const report of reports) {
    try {
      cases.push(...(junitCases(report) ?? []));
    } catch {
      // a report that is not XML: its counts in status still tell
    }
  }
  return cases.sort((a, b) => ORDER[a.outcome] - ORDER[b.outcome]).slice(0, MAX_CASES);
}
