/** A review's line comments as one follow-up: words for a model or CLI agent, steps for a script. */
import { parseComments, reviewFollowup, stepsFromText } from '../../review/line-comments';

const comments = [
  { path: 'src/b.ts', line: 9, body: 'rename this' },
  { path: 'src/a.ts', line: 3, body: 'handle the empty list\nand say why' },
];

test('for a model or agent CLI: one text, the note first, comments by file and line', () => {
  expect(reviewFollowup('openai', comments, 'Nearly there.')).toEqual({
    ok: true,
    text:
      'Nearly there.\n\nReview comments on the change, each on a line of a file:\n' +
      '- src/a.ts, line 3: handle the empty list\n  and say why\n- src/b.ts, line 9: rename this',
  });
  expect(reviewFollowup('cli', comments.slice(0, 1))).toEqual({
    ok: true,
    text: 'Review comments on the change, each on a line of a file:\n- src/b.ts, line 9: rename this',
  });
});

test('for a script agent: each comment is a command (or JSON steps), in file and line order', () => {
  expect(
    reviewFollowup('script', [
      { path: 'b.txt', line: 1, body: 'echo two >> b.txt' },
      { path: 'a.txt', line: 2, body: '[{"run": "echo one >> a.txt"}]' },
    ]),
  ).toEqual({ ok: true, steps: [{ run: 'echo one >> a.txt' }, { run: 'echo two >> b.txt' }] });
  expect(stepsFromText('[ -f x ] && echo y')).toEqual([{ run: '[ -f x ] && echo y' }]);
});

test('nothing to send is refused', () => {
  expect(reviewFollowup('openai', [], '  ')).toEqual({ ok: false, reason: 'nothing to send: no comment and no text' });
});

test('comments from outside are checked and bounded', () => {
  expect(parseComments(undefined)).toEqual({ ok: true, comments: [] });
  expect(parseComments([{ path: 'a', line: 2, body: ' x ' }])).toEqual({
    ok: true,
    comments: [{ path: 'a', line: 2, body: 'x' }],
  });
  expect(parseComments('x')).toMatchObject({ ok: false });
  expect(parseComments([{ path: 'a', line: 0, body: 'x' }])).toEqual({
    ok: false,
    reason: 'comments[0].line: a line number',
  });
  expect(parseComments([{ path: 'a\nb', line: 1, body: 'x' }])).toMatchObject({ ok: false });
  expect(parseComments([{ path: 'a', line: 1, body: 'x'.repeat(2001) }])).toMatchObject({ ok: false });
  expect(parseComments(Array.from({ length: 51 }, () => ({ path: 'a', line: 1, body: 'x' })))).toMatchObject({
    ok: false,
  });
});
