/**
 * Sandbox text published under drydock's identity (security round 4, T4-L8):
 * on GitHub fenced as code and without mentions, annotations only on the
 * change's files; in Slack the diffstat as git wrote it, as literal text,
 * Approve only beside the whole of it, the console linked.
 */
import { checkReport, endComment, type ProgressInput } from '../../github/activities';
import { annotationsOf } from '../../github/check-runs';
import { fenced, withoutMentions } from '../../github/sandbox-text';
import { statusMessage } from '../../slack/message';
import type { ThreadReport } from '../../workflows/session/threads';

/** An error tail an agent wrote to close the fence, ping people and show a link and an image as drydock's. */
const HOSTILE =
  'exit 3\n```\n@org/security-team @octocat approved: [merge](https://evil.example) ![x](https://evil.example/p.png) <img src=x>\n````';

test('withoutMentions drops the @ of mentions and keeps e-mail addresses', () => {
  expect(withoutMentions('@octocat and @org/team, cc:@alice; mail bob@example.com')).toBe(
    'octocat and org/team, cc:alice; mail bob@example.com',
  );
});

test('fenced: a fence longer than any backtick run inside, so the text never leaves it', () => {
  const block = fenced(HOSTILE);
  const fence = block.slice(0, block.indexOf('text'));
  expect(fence).toBe('`````');
  expect(block.endsWith(`\n${fence}`)).toBe(true);
  // No line inside is a fence of that length or longer: the block ends only where it says.
  const inside = block.split('\n').slice(1, -1);
  expect(inside.some((line) => /^\s*`{5,}/.test(line))).toBe(false);
  expect(block).not.toMatch(/@\w/);
  expect(fenced('plain')).toBe('```text\nplain\n```');
});

const input = (over: Partial<ProgressInput> = {}): ProgressInput => ({
  sessionId: 'gh-acme-shop-5',
  trigger: { repo: 'acme/shop', kind: 'issue', issue: 5, pullRequest: false },
  stage: 'failed',
  detail: HOSTILE,
  ...over,
});

test("the issue hears why a session ended in drydock's words, the sandbox's in a fence", () => {
  const body = endComment(input(), 'https://console/s/gh-acme-shop-5');
  expect(body.startsWith("drydock's session failed (https://console/s/gh-acme-shop-5):\n\n`````text\nexit 3")).toBe(
    true,
  );
  expect(body.endsWith('\n`````')).toBe(true);
  expect(body).not.toMatch(/@(org|octocat)/);
  expect(endComment(input({ detail: undefined }), 'L')).toBe("drydock's session failed (L)");
});

test("a check run's title is drydock's words; the error and the tests' summary are fenced below", () => {
  const tests = { summary: 'failed: @octocat ](x) `x`', failures: [] };
  const report = checkReport(input({ tests, changedFiles: ['src/a.js'] }), 'failed', 'https://console/s/x');
  expect(report.title).toBe('drydock: failed');
  expect(report.summary).toBe(
    `Session [gh-acme-shop-5](https://console/s/x): failed.\n\n${fenced(HOSTILE)}\n\nTests:\n\n${fenced(tests.summary)}`,
  );
  expect(report.changedFiles).toEqual(['src/a.js']);
});

test("annotations only on the change's files, their words without mentions", () => {
  const failures = [
    { name: '@octocat adds', message: 'ping @org/team', file: 'src/add.test.js', line: 5 },
    { name: 'elsewhere', message: 'drydock approves this', file: '.github/workflows/ci.yml', line: 1 },
  ];
  expect(annotationsOf(failures, ['src/add.test.js'])).toEqual([
    {
      path: 'src/add.test.js',
      start_line: 5,
      end_line: 5,
      annotation_level: 'failure',
      title: 'octocat adds',
      message: 'ping org/team',
    },
  ]);
  expect(annotationsOf(failures)).toEqual([]);
});

const REPORT: ThreadReport = {
  sessionId: 'slack-t0-c1-1',
  repo: 'acme/shop',
  task: 'fix it',
  phase: 'awaiting_approval',
  round: 1,
  startedAt: new Date(0).toISOString(),
  pending: {
    action: 'push',
    change: '41c9d0e7aa23ffee0011',
    diffstat: ' ``` <!channel> *x* &amp; | 1 +\n .github/workflows/ci.yml | 9 +\n 2 files changed, 10 insertions(+)',
    tests: 'passed',
    approvers: ['bob'],
  },
};
const LINKS = { console: 'https://console/review/slack-t0-c1-1', temporal: 'https://ui/x' };
const blocksOf = (r: ThreadReport) => statusMessage(r, LINKS).blocks as any[];
const buttons = (r: ThreadReport) =>
  blocksOf(r)
    .find((b) => b.type === 'actions')
    .elements.map((e: any) => e.action_id);

test("Slack shows the diffstat as git wrote it, as literal text, beside the console's link", () => {
  const blocks = blocksOf(REPORT);
  const preformatted = blocks.find((b) => b.type === 'rich_text').elements[0];
  expect(preformatted).toEqual({
    type: 'rich_text_preformatted',
    elements: [{ type: 'text', text: REPORT.pending!.diffstat }],
  });
  expect(JSON.stringify(blocks)).toContain(`<${LINKS.console}|Review the whole change in the console>`);
  // The diffstat is in no mrkdwn text, where a file name could end a code span or format what follows.
  const mrkdwn = blocks.filter((b) => b.type === 'section').map((b) => b.text.text);
  expect(mrkdwn.join('\n')).not.toContain('ci.yml');
  expect(buttons(REPORT)).toEqual(['approve', 'reject']);
});

test('a cut or missing diffstat: no Approve in Slack, the console is where it is approved', () => {
  for (const pending of [
    { ...REPORT.pending!, diffstatCut: true },
    { ...REPORT.pending!, diffstat: '' },
  ]) {
    const r = { ...REPORT, pending };
    expect(buttons(r)).toEqual(['reject']);
    expect(JSON.stringify(blocksOf(r))).toContain(`<${LINKS.console}|Review and approve it in the console>`);
  }
});
