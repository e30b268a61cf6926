/**
 * A repo URL with credentials is refused wherever one enters (they would be
 * kept in Temporal's history), each refusal naming its field and where
 * credentials go instead; the worker gives git its own, by host.
 */
import { ApplicationFailure } from '@temporalio/common';
import { addRepo, buildSnapshot, resolveRepo } from '../../cli/snapshots';
import { loadConfig } from '../../platform/config';
import { redactorOf } from '../../platform/scrub';
import { gitCredentials } from '../../repos/credentials';
import { requireRegistered } from '../../repos/mirror';
import { createRepoLookup, parseRepoList, type RepoRegistry } from '../../repos/registry';
import { parseSessionInput } from '../../workflows/input';
import { hasUrlCredentials } from '../../workflows/rules/repo-url';

const SECRET = 'glpat-s3cr3tT0kenValue1234';
const WITH_CREDENTIALS = [
  `https://oauth2:${SECRET}@git.example.com/acme/app.git`,
  `https://${SECRET}@github.com/acme/app`,
  `http://user:${SECRET}@127.0.0.1:8080/app.git`,
  `ssh://git:${SECRET}@git.example.com/acme/app.git`,
  `HTTPS://:${SECRET}@git.example.com/app`,
];
const WITHOUT = [
  'https://github.com/acme/app.git',
  'ssh://git@github.com/acme/app.git',
  'git@github.com:acme/app.git',
  'file:///srv/repos/app.git',
  '/srv/repos/app.git',
  'https://git.example.com/acme/app@v2.git',
];
/** Where the refusal says credentials go. */
const INSTEAD = /must not carry credentials.*DRYDOCK_GIT_CREDENTIALS/;

test.each(WITH_CREDENTIALS)('%s carries credentials', (url) => {
  expect(hasUrlCredentials(url)).toBe(true);
});

test.each(WITHOUT)('%s carries none', (url) => {
  expect(hasUrlCredentials(url)).toBe(false);
});

test.each(WITH_CREDENTIALS)('the session input refuses repo.url %s, naming the field, without echoing it', (url) => {
  const parsed = parseSessionInput({ repo: { url }, task: 't' });
  expect(parsed.ok).toBe(false);
  const problems = parsed.ok ? [] : parsed.problems;
  expect(problems).toEqual([expect.stringMatching(/^repo\.url: /)]);
  expect(problems[0]).toMatch(INSTEAD);
  expect(problems[0]).not.toContain(SECRET);
});

test.each(WITHOUT)('the session input takes repo.url %s', (url) => {
  expect(parseSessionInput({ repo: { url }, task: 't' }).ok).toBe(true);
});

test('DRYDOCK_REPOS refuses an entry whose URL carries credentials, naming it', () => {
  const entry = `acme/app=https://oauth2:${SECRET}@git.example.com/acme/app.git`;
  expect(() => parseRepoList(['acme/ok=https://git.example.com/acme/ok.git', entry])).toThrow(
    /^DRYDOCK_REPOS: acme\/app's URL must not carry credentials/,
  );
  const message = (() => {
    try {
      parseRepoList([entry]);
    } catch (err) {
      return (err as Error).message;
    }
  })();
  expect(message).toMatch(INSTEAD);
  expect(message).not.toContain(SECRET);
});

test('drydock repo add refuses <url> with credentials before it clones or writes anything', async () => {
  // No client, config or database: the refusal comes before any is used.
  const added = addRepo(undefined as never, undefined as never, WITH_CREDENTIALS[0], {});
  await expect(added).rejects.toThrow(/^<url>: must not carry credentials/);
  await expect(added).rejects.toThrow(INSTEAD);
});

test('drydock run and list refuse --repo, and snapshot build <repo>, with credentials before anything starts', async () => {
  await expect(resolveRepo(undefined as never, WITH_CREDENTIALS[0])).rejects.toThrow(
    /^--repo: must not carry credentials/,
  );
  const build = buildSnapshot(undefined as never, undefined as never, WITH_CREDENTIALS[0], {
    detach: true,
    json: false,
  });
  await expect(build).rejects.toThrow(/^<repo>: must not carry credentials.*DRYDOCK_GIT_CREDENTIALS/);
});

test("the API's lookup by URL refuses repo.url with credentials before it looks in the registry", async () => {
  const registry = {
    list: () => Promise.reject(new Error('the registry was asked')),
  } as unknown as RepoRegistry;
  const found = await createRepoLookup(registry).byUrl(WITH_CREDENTIALS[1]);
  expect(found).toEqual({ ok: false, reason: expect.stringMatching(/^repo\.url: must not carry credentials/) });
  expect(JSON.stringify(found)).not.toContain(SECRET);
});

test('the worker refuses to fetch a URL with credentials, development mode included (one registered before)', async () => {
  const repos = createRepoLookup({ list: () => Promise.resolve([]) } as unknown as RepoRegistry);
  const err = await requireRegistered({ repos, devMode: true }, WITH_CREDENTIALS[0]).catch((e) => e);
  expect(err).toBeInstanceOf(ApplicationFailure);
  expect(err.nonRetryable).toBe(true);
  expect(err.message).toMatch(/^repo\.url must not carry credentials/);
  expect(err.message).not.toContain(SECRET);
});

describe("the worker's git credentials by host (DRYDOCK_GIT_CREDENTIALS)", () => {
  const config = loadConfig({
    DRYDOCK_GIT_CREDENTIALS: JSON.stringify({
      'git.example.com': `oauth2:${SECRET}`,
      '127.0.0.1:8080': `x-access-token:${SECRET}`,
      'plain.example.com': `oauth2:${SECRET}`,
    }),
  });
  const deps = { github: { apiUrl: 'https://api.github.com' }, gitHosts: config.DRYDOCK_GIT_CREDENTIALS };
  const header = (user: string) => `Authorization: Basic ${Buffer.from(`${user}:${SECRET}`).toString('base64')}`;

  test('an Authorization header scoped to the URL origin, in git environment configuration only', async () => {
    expect(await gitCredentials(deps, 'https://GIT.example.com/acme/app.git')).toEqual({
      GIT_CONFIG_COUNT: '1',
      GIT_CONFIG_KEY_0: 'http.https://git.example.com/.extraHeader',
      GIT_CONFIG_VALUE_0: header('oauth2'),
    });
    expect(await gitCredentials(deps, 'http://127.0.0.1:8080/app.git')).toMatchObject({
      GIT_CONFIG_KEY_0: 'http.http://127.0.0.1:8080/.extraHeader',
      GIT_CONFIG_VALUE_0: header('x-access-token'),
    });
  });

  test('none over plain HTTP off this machine, to another host or port, or for another transport', async () => {
    expect(await gitCredentials(deps, 'http://plain.example.com/acme/app.git')).toEqual({});
    expect(await gitCredentials(deps, 'https://other.example.com/acme/app.git')).toEqual({});
    expect(await gitCredentials(deps, 'http://127.0.0.1:8081/app.git')).toEqual({});
    expect(await gitCredentials(deps, 'ssh://git@git.example.com/acme/app.git')).toEqual({});
    expect(await gitCredentials(deps, 'git@git.example.com:acme/app.git')).toEqual({});
  });

  test("the worker's redactor scrubs each entry, its token and the header git is given", () => {
    const redactor = redactorOf(config);
    const said = `fatal: ${header('oauth2')} token=${SECRET} x-access-token:${SECRET}`;
    expect(redactor.text(said)).not.toContain(SECRET);
    expect(redactor.text(said)).not.toContain(Buffer.from(`oauth2:${SECRET}`).toString('base64'));
    expect(redactor.holds(`a file with ${SECRET}`)).toEqual([
      expect.stringMatching(/^the token of DRYDOCK_GIT_CREDENTIALS\[/),
    ]);
  });

  test.each([
    [
      { 'https://git.example.com': 'u:t' },
      /DRYDOCK_GIT_CREDENTIALS\.https:\/\/git\.example\.com: expected a host or host:port, without a scheme/,
    ],
    [{ 'git.example.com': 'just-a-token' }, /expected "user:token"/],
    ['not json', /not valid JSON/],
  ])('a malformed setting (%j) stops the process, saying what is wrong', (value, why) => {
    const raw = typeof value === 'string' ? value : JSON.stringify(value);
    expect(() => loadConfig({ DRYDOCK_GIT_CREDENTIALS: raw })).toThrow(why);
  });
});
