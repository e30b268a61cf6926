/**
 * Webhook secrets per project (docs/forges.md): on GitHub, GitLab and Gitea a
 * delivery naming a project with its own secret is checked against that
 * secret only, so the forge-wide secret or another project's cannot forge it;
 * a project without one falls back to the forge's.
 */
import { createHmac } from 'node:crypto';
import { sign } from '@octokit/webhooks-methods';
import type { ForgeWebhooks } from '../../forge/forge';
import { projectNamed, projectSecretsOf } from '../../forge/webhook-secrets';
import { giteaWebhooks } from '../../gitea/webhooks';
import { githubWebhooks } from '../../github/webhooks';
import { gitlabWebhooks } from '../../gitlab/webhooks';

const FORGE = 'forge-wide-secret-0123';
const A = 'project-a-secret-0123';
const B = 'project-b-secret-0123';
/** acme/a and acme/b have their own secrets (B's under two names: current, old); acme/c has none. */
const registry = [
  { name: 'acme/a', webhookSecrets: ['A_HOOK'] },
  { name: 'Acme/B', webhookSecrets: ['B_HOOK', 'B_OLD'] },
  { name: 'acme/c' },
  { name: 'acme/unset', webhookSecrets: ['NOT_SET'] },
];
const projects = projectSecretsOf(async () => registry, { A_HOOK: A, B_HOOK: B, B_OLD: 'b-old-secret-0123' });

/** Each forge: its check with the forge-wide secret and the projects', and a signed delivery naming `project`. */
const forges: {
  name: string;
  hooks: ForgeWebhooks;
  delivery(project: string, secret: string): { headers: Record<string, string>; body: Buffer };
}[] = [
  {
    name: 'GitHub',
    hooks: githubWebhooks([FORGE], projects),
    delivery: (project, secret) => {
      const body = JSON.stringify({ action: 'labeled', repository: { full_name: project } });
      return {
        body: Buffer.from(body),
        headers: {
          'x-github-event': 'issues',
          'x-github-delivery': 'd-1',
          'x-hub-signature-256': signSync(secret, body),
        },
      };
    },
  },
  {
    name: 'GitLab',
    hooks: gitlabWebhooks([FORGE], projects),
    delivery: (project, secret) => ({
      body: Buffer.from(JSON.stringify({ object_kind: 'issue', project: { id: 1, path_with_namespace: project } })),
      headers: { 'x-gitlab-event': 'Issue Hook', 'x-gitlab-event-uuid': 'u-1', 'x-gitlab-token': secret },
    }),
  },
  {
    name: 'Gitea',
    hooks: giteaWebhooks([FORGE], projects),
    delivery: (project, secret) => {
      const body = JSON.stringify({ action: 'label_updated', repository: { full_name: project } });
      return {
        body: Buffer.from(body),
        headers: {
          'x-gitea-event-type': 'issue_label',
          'x-gitea-delivery': '0b6f7f5e-5d0c-4a57-9d1c-6f7d9b0f1a2b',
          'x-gitea-signature': createHmac('sha256', secret).update(body).digest('hex'),
        },
      };
    },
  },
];

/** GitHub's "sha256=<hex>" (what @octokit/webhooks-methods' sign makes), synchronously. */
function signSync(secret: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

describe.each(forges)('$name', ({ hooks, delivery }) => {
  const check = async (project: string, secret: string) => {
    const { headers, body } = delivery(project, secret);
    return hooks.check(headers, async () => body);
  };

  test("a delivery signed with project A's secret for project B is refused; B's own passes", async () => {
    expect(await check('acme/b', A)).toMatchObject({ ok: false, status: 401 });
    expect(await check('acme/b', B)).toMatchObject({ ok: true });
    // Named as the forge names it, in any case; the old secret while it is rotated out.
    expect(await check('ACME/b', B)).toMatchObject({ ok: true });
    expect(await check('acme/b', 'b-old-secret-0123')).toMatchObject({ ok: true });
    expect(await check('acme/a', A)).toMatchObject({ ok: true });
  });

  test('the forge-wide secret cannot sign for a project with its own; a project without one falls back to it', async () => {
    expect(await check('acme/b', FORGE)).toMatchObject({ ok: false, status: 401 });
    expect(await check('acme/c', FORGE)).toMatchObject({ ok: true });
    expect(await check('not/registered', FORGE)).toMatchObject({ ok: true });
    // Another project's secret is not the forge's.
    expect(await check('acme/c', A)).toMatchObject({ ok: false, status: 401 });
    expect(await check('not/registered', B)).toMatchObject({ ok: false, status: 401 });
  });

  test('a project whose secret is not set on the server: its deliveries are refused, naming the variable', async () => {
    expect(await check('acme/unset', FORGE)).toEqual({
      ok: false,
      status: 503,
      problem: "acme/unset's webhook secret is not set on this server (DRYDOCK_SECRET_NOT_SET)",
    });
  });
});

test('with no forge-wide secret, projects with their own still work and the others are refused', async () => {
  const hooks = githubWebhooks([], projects);
  const body = JSON.stringify({ repository: { full_name: 'acme/a' } });
  const headers = (secret: string, repo = 'acme/a') => ({
    'x-github-event': 'issues',
    'x-github-delivery': 'd-2',
    'x-hub-signature-256': signSync(secret, body.replace('acme/a', repo)),
  });
  expect(await hooks.check(headers(A), async () => Buffer.from(body))).toMatchObject({ ok: true });
  const other = body.replace('acme/a', 'acme/c');
  expect(await hooks.check(headers(A, 'acme/c'), async () => Buffer.from(other))).toMatchObject({
    ok: false,
    status: 401,
  });
  expect(await sign(A, body)).toBe(headers(A)['x-hub-signature-256']);
});

test("GitLab: a token that is nobody's is refused before the body is read", async () => {
  let reads = 0;
  const hooks = gitlabWebhooks([FORGE], projects);
  const headers = { 'x-gitlab-event': 'Issue Hook', 'x-gitlab-token': 'nobody-s-token-0123' };
  expect(await hooks.check(headers, async () => (reads++, Buffer.from('{}')))).toMatchObject({ status: 401 });
  expect(reads).toBe(0);
});

test('the project is read from the body by its path, bounded; anything else names none', () => {
  const body = (v: unknown) => Buffer.from(JSON.stringify(v));
  expect(projectNamed(body({ project: { path_with_namespace: 'g/s/p' } }), ['project', 'path_with_namespace'])).toBe(
    'g/s/p',
  );
  expect(projectNamed(Buffer.from('not json'), ['repository', 'full_name'])).toBeUndefined();
  expect(projectNamed(body({ repository: ['x'] }), ['repository', 'full_name'])).toBeUndefined();
  expect(projectNamed(body({ repository: { full_name: 7 } }), ['repository', 'full_name'])).toBeUndefined();
  expect(projectNamed(body({ repository: { full_name: 'x'.repeat(2_000) } }), ['repository', 'full_name'])).toBe(
    undefined,
  );
});
