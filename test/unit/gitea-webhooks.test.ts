/**
 * What each Gitea delivery asks of drydock (gitea/webhooks.ts), on payloads
 * recorded from the real server (test/fixtures/gitea: Gitea 1.27.3 as
 * infra/gitea.sh builds it), and how a delivery is checked before it is read.
 */
import { createHmac } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { giteaWebhooks, routeGiteaEvent } from '../../gitea/webhooks';

const fixture = (name: string) =>
  JSON.parse(readFileSync(path.join(__dirname, '../fixtures/gitea', `${name}.json`), 'utf8'));
const REPO = 'drydock-admin/shop';

test('an issue labelled drydock: one session per issue (Gitea does not say which label was added)', () => {
  const payload = fixture('issue_label');
  const trigger = routeGiteaEvent('issue_label', 'any', payload);
  expect(trigger).toEqual({
    kind: 'start',
    sessionId: 'gitea-drydock-admin-shop-issue-1',
    repo: REPO,
    task: 'Resolve issue #1: Spelling error in the README',
    requestedBy: 'drydock-admin',
    source: 'issue #1 labelled drydock',
    origin: { forge: 'gitea', repo: REPO, kind: 'issue', issue: 1, pullRequest: false },
    check: { writer: 'drydock-admin' },
  });
  payload.issue.labels = [{ name: 'bug' }];
  expect(routeGiteaEvent('issue_label', 'any', payload)).toEqual({
    kind: 'ignore',
    reason: "issue_label: the issue is not labelled 'drydock'",
  });
});

test('/drydock on an issue starts a session keyed by the comment; on a pull request, from its head, checked', () => {
  expect(routeGiteaEvent('issue_comment', 'h', fixture('issue_comment'))).toMatchObject({
    kind: 'start',
    sessionId: 'gitea-drydock-admin-shop-comment-2',
    task: 'fix the spelling',
    ref: undefined,
    origin: { forge: 'gitea', kind: 'comment', issue: 1, pullRequest: false, comment: 2 },
    check: { writer: 'drydock-admin' },
  });
  expect(routeGiteaEvent('pull_request_comment', 'h', fixture('pull_request_comment'))).toMatchObject({
    kind: 'start',
    sessionId: 'gitea-drydock-admin-shop-comment-4',
    ref: 'refs/pull/2/head',
    task: 'also fix the other one',
    origin: { pullRequest: true, issue: 2, comment: 4 },
    check: { writer: 'drydock-admin', pullRequest: 2 },
  });
  const plain = fixture('issue_comment');
  plain.comment.body = 'thanks!';
  expect(routeGiteaEvent('issue_comment', 'h', plain)).toMatchObject({ kind: 'ignore' });
});

test('a drydock pull request merged is recorded for its session; another branch is not', () => {
  const payload = fixture('pull_request_closed');
  expect(routeGiteaEvent('pull_request', 'h', payload)).toEqual({
    kind: 'pr_closed',
    sessionId: 'gitea-shop-issue-1',
    repo: REPO,
    number: 2,
    url: payload.pull_request.html_url,
    merged: true,
    by: 'drydock-admin',
  });
  payload.pull_request.head.ref = 'feature';
  expect(routeGiteaEvent('pull_request', 'h', payload)).toMatchObject({ kind: 'ignore' });
  payload.action = 'opened';
  expect(routeGiteaEvent('pull_request', 'h', payload)).toMatchObject({ kind: 'ignore' });
});

test('a payload without a field drydock reads is invalid, naming the field; other events are ignored', () => {
  const payload = fixture('pull_request_comment');
  delete payload.comment.user;
  expect(routeGiteaEvent('pull_request_comment', 'h', payload)).toEqual({
    kind: 'invalid',
    problem: 'comment.user: required',
  });
  expect(routeGiteaEvent('push', 'h', {})).toMatchObject({ kind: 'ignore' });
});

describe('a delivery is checked before it is read', () => {
  const body = Buffer.from(JSON.stringify(fixture('issue_comment')));
  const sign = (secret: string) => createHmac('sha256', secret).update(body).digest('hex');
  const headers = (extra: Record<string, string | undefined> = {}) => ({
    'x-gitea-event-type': 'issue_comment',
    'x-gitea-delivery': '0b6f7f5e-5d0c-4a57-9d1c-6f7d9b0f1a2b',
    'x-gitea-signature': sign('s1'),
    ...extra,
  });
  let reads = 0;
  const readBody = async () => {
    reads++;
    return body;
  };

  test('signed with the current or the old secret: its event type, delivery and body', async () => {
    const webhooks = giteaWebhooks(['s1', 's0']);
    expect(await webhooks.check(headers(), readBody)).toEqual({
      ok: true,
      event: 'issue_comment',
      delivery: '0b6f7f5e-5d0c-4a57-9d1c-6f7d9b0f1a2b',
      body,
    });
    expect((await webhooks.check(headers({ 'x-gitea-signature': sign('s0') }), readBody)).ok).toBe(true);
  });

  test('no secret configured → 503; no or a malformed signature → 401 before the body is read; forged → 401', async () => {
    expect(await giteaWebhooks([]).check(headers(), readBody)).toMatchObject({ ok: false, status: 503 });
    reads = 0;
    for (const signature of [undefined, `sha256=${sign('s1')}`, 'zz']) {
      expect(await giteaWebhooks(['s1']).check(headers({ 'x-gitea-signature': signature }), readBody)).toMatchObject({
        ok: false,
        status: 401,
      });
    }
    expect(reads).toBe(0);
    expect(await giteaWebhooks(['s1']).check(headers({ 'x-gitea-signature': sign('other') }), readBody)).toMatchObject({
      ok: false,
      status: 401,
      problem: 'signature does not match',
    });
  });

  test('signed, but without an event type or a well-formed delivery id → 400', async () => {
    for (const extra of [{ 'x-gitea-event-type': undefined }, { 'x-gitea-delivery': 'not a uuid!' }]) {
      expect(await giteaWebhooks(['s1']).check(headers(extra), readBody)).toMatchObject({ ok: false, status: 400 });
    }
  });
});
