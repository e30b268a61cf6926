/** What an API caller may not choose when it starts a session: serve's own fields and the triggers' ids. */
import { refuseServeOnlyChoices } from '../../workers/routes/api';
import { HttpError } from '../../workers/http';

const refusal = (body: Record<string, unknown>) => {
  try {
    refuseServeOnlyChoices(body);
  } catch (err) {
    expect(err).toBeInstanceOf(HttpError);
    return { status: (err as HttpError).status, message: (err as Error).message };
  }
  return undefined;
};

test("a trigger (GitHub issues, pull requests and CI logs read and commented on with the worker's identity) is refused", () => {
  const trigger = { repo: 'victim/private', kind: 'issue', issue: 1 };
  expect(refusal({ task: 'x', trigger })).toEqual({
    status: 422,
    message: expect.stringMatching(/^trigger: set by drydock serve/),
  });
  expect(refusal({ task: 'x', notify: { slack: { channel: 'C1' } } })).toMatchObject({ status: 422 });
});

test.each(['gh-acme-app-issue-7-abc', 'GH-acme-app-comment-1', 'ci-1234', 'linear-eng-1-ab', 'slack-t1-x'])(
  'an id in a trigger namespace (%s) is refused: it would absorb a later delivery',
  (sessionId) => {
    expect(refusal({ sessionId })).toMatchObject({
      status: 422,
      message: expect.stringMatching(/triggered sessions' own/),
    });
  },
);

test.each(['my-fix.1', 'shop.t1.scripted.1', 'a.b'])(
  'an id with "." (%s) is refused: attempts and pilots name their sessions <id>.<n> (T4-L6)',
  (sessionId) => {
    expect(refusal({ sessionId })).toEqual({
      status: 422,
      message: 'sessionId: "." is for the ids of attempts and pilots\' sessions; use "-" or "_"',
    });
  },
);

test('plain ids, no id, and no trigger pass; an unsafe id is still refused', () => {
  expect(refusal({ sessionId: 'my-fix-1' })).toBeUndefined();
  expect(refusal({ sessionId: 'ghost-1' })).toBeUndefined();
  expect(refusal({ task: 'x' })).toBeUndefined();
  expect(refusal({ sessionId: '..' })).toMatchObject({ status: 422 });
});
