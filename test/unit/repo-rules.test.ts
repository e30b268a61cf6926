/**
 * Precedence of a repo's configuration (workflows/rules/repo-rules.ts): the
 * operator's limits bound the repo file and the session input; the file gives
 * defaults; the session overrides them. Security issue 21, finding 1: egress
 * and secrets of a session input only within the operator's grant.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { restrictedHost } from '../../activities/repo-policy';
import { repoConfigJsonSchema } from '../../cli/schema';
import { imageOnlySetup, setupCommandOf, setupOf, withFeatureSetup } from '../../sandbox/snapshots';
import { checkRepoConfig, DEV_MODE_LIMITS, type RepoConfig, type RepoGrant } from '../../workflows/repo-config';
import { ruleWithin, settleSessionInput } from '../../workflows/rules/repo-rules';

const URL = 'https://github.com/acme/shop.git';
const registered = (limits: Partial<RepoGrant['limits']> = {}): RepoGrant => ({
  name: 'acme/shop',
  limits: { egress: [{ host: 'registry.npmjs.org' }], secrets: [], maxima: {}, approvers: [], ...limits },
});
const devMode: RepoGrant = { name: URL, limits: DEV_MODE_LIMITS };
const cli = (extra: Record<string, unknown> = {}) => ({
  repo: { url: URL },
  task: 't',
  agent: { kind: 'cli', command: 'claude', ...extra },
});
const settle = (grant: RepoGrant, raw: unknown, file?: RepoConfig) =>
  settleSessionInput({ grant, raw, file, restricted: restrictedHost });

test('a session input may not open the sandbox to loopback, private or link-local addresses (21.1)', () => {
  // Accepted before: the proxy then let the sandbox reach the host's services.
  for (const host of ['127.0.0.1', '10.1.2.3', '169.254.169.254', '::1', '[::1]', 'fe80::1']) {
    const settled = settle(devMode, cli({ egress: [{ host }] }));
    expect(settled).toEqual({
      ok: false,
      problems: [
        expect.stringMatching(
          /^agent\.egress\.0\.host: .* is a (loopback|private|link-local) address; only the operator's rules for .* may name it$/,
        ),
      ],
    });
    expect(settle(registered(), cli({ egress: [{ host }] })).ok).toBe(false);
  }
  // An operator's rule that names the address lets a session ask for it.
  const operator = registered({ egress: [{ host: '127.0.0.1', port: 4873 }] });
  expect(settle(operator, cli({ egress: [{ host: '127.0.0.1', port: 4873 }] })).ok).toBe(true);
  // A host name is judged by the proxy when resolved (it refuses restricted answers no rule names).
  expect(settle(devMode, cli({ egress: [{ host: 'api.example.com' }] })).ok).toBe(true);
});

test("a session's egress stays within the operator's rules for the repo, naming the host beyond", () => {
  const grant = registered({ egress: [{ host: '*.example.com', port: 443 }, { host: 'api.model.test' }] });
  expect(settle(grant, cli({ egress: [{ host: 'api.example.com', port: 443 }] })).ok).toBe(true);
  expect(settle(grant, cli({ egress: [{ host: 'api.model.test', port: 443, methods: ['CONNECT'] }] })).ok).toBe(true);
  expect(settle(grant, cli({ egress: [{ host: 'evil.test' }, { host: 'example.com', port: 443 }] }))).toEqual({
    ok: false,
    problems: [
      "agent.egress.0: evil.test is beyond the operator's egress rules for acme/shop (*.example.com:443, api.model.test)",
      "agent.egress.1: example.com:443 is beyond the operator's egress rules for acme/shop (*.example.com:443, api.model.test)",
    ],
  });
});

test('rule coverage: host or under the wildcard, the same ports, a subset of methods', () => {
  const outer = { host: '*.example.com', methods: ['GET' as const, 'CONNECT' as const] };
  expect(ruleWithin({ host: 'a.example.com', port: 443, methods: ['CONNECT'] }, outer)).toBe(true);
  expect(ruleWithin({ host: '*.sub.example.com', methods: ['GET'] }, outer)).toBe(true);
  expect(ruleWithin({ host: 'a.example.com' }, outer)).toBe(false); // any method is more than GET, CONNECT
  expect(ruleWithin({ host: 'a.example.com', port: 8080, methods: ['GET'] }, outer)).toBe(false);
  expect(ruleWithin({ host: '*.example.com', methods: ['GET'] }, { host: 'a.example.com' })).toBe(false);
});

test('a session is granted only secrets the operator grants the repo (21.1)', () => {
  expect(settle(registered(), cli({ secrets: ['DEPLOY_KEY'] }))).toEqual({
    ok: false,
    problems: ['agent.secrets: DEPLOY_KEY is not a secret the operator grants to acme/shop (grantable: none)'],
  });
  expect(settle(registered({ secrets: ['MODEL_KEY'] }), cli({ secrets: ['MODEL_KEY'] })).ok).toBe(true);
});

test('limits: beyond a maximum is refused; a default above it is lowered to it', () => {
  const grant = registered({ maxima: { cpus: 1, memory: '1g', wallTime: '30m' } });
  expect(settle(grant, { repo: { url: URL }, task: 't', limits: { memory: '4g', cpus: 1 } })).toEqual({
    ok: false,
    problems: ["limits.memory: 4g is more than the operator's maximum memory for acme/shop (1g)"],
  });
  const settled = settle(grant, { repo: { url: URL }, task: 't' });
  expect(settled.ok && settled.input.limits).toMatchObject({ cpus: 1, memory: '1g', wallTime: '30m', pids: 512 });
  const within = settle(grant, { repo: { url: URL }, task: 't', limits: { memory: '512m', wallTime: 600_000 } });
  expect(within.ok && within.input.limits).toMatchObject({ memory: '512m', wallTime: 600_000 });
});

test('the repo file gives defaults that the session input overrides', () => {
  const file: RepoConfig = {
    verify: { test: 'npm test', junit: ['reports/junit.xml'] },
    agent: { kind: 'cli', command: 'codex', secrets: ['MODEL_KEY'] },
    egress: [{ host: 'api.openai.com' }],
    limits: { cpus: 1 },
  };
  const grant = registered({ egress: [{ host: 'api.openai.com' }], secrets: ['MODEL_KEY'] });
  const plain = settle(grant, { repo: { url: URL }, task: 't' }, file);
  expect(plain.ok && plain.input).toMatchObject({
    verify: { test: 'npm test', junit: ['reports/junit.xml'] },
    agent: { kind: 'cli', command: 'codex', secrets: ['MODEL_KEY'], egress: [{ host: 'api.openai.com' }] },
    limits: { cpus: 1 },
  });
  const own = settle(
    grant,
    { repo: { url: URL }, task: 't', verify: { test: 'make check' }, limits: { cpus: 2 } },
    file,
  );
  expect(own.ok && own.input).toMatchObject({ verify: { test: 'make check' }, limits: { cpus: 2 } });
  // A scripted session takes none of the file's CLI defaults.
  const scripted = settle(
    grant,
    { repo: { url: URL }, task: 't', agent: { kind: 'script', steps: [{ run: 'true' }] } },
    file,
  );
  expect(scripted.ok && scripted.input.agent).toMatchObject({ kind: 'script', egress: [], secrets: [] });
});

test("a browser check without a start command starts the repo's app; the session's own comes first", () => {
  const app = { start: 'npm run dev', port: 3000, readyPath: '/health', readyTimeoutMs: 90_000, source: 'app' };
  const checks = [{ path: '/', expectText: 'Hello' }];
  const raw = (browser: Record<string, unknown>) => ({ repo: { url: URL }, task: 't', verify: { browser } });
  const browserOf = (settled: ReturnType<typeof settle>) => settled.ok && settled.input.verify.browser;
  const fromApp = settleSessionInput({ grant: devMode, raw: raw({ checks }), restricted: restrictedHost, app });
  expect(browserOf(fromApp)).toMatchObject({
    start: 'npm run dev',
    url: 'http://localhost:3000/health',
    readyTimeout: 90_000,
    checks,
  });
  // A timeout of the check's own stays; so does a whole check of the session's.
  const own = { start: 'node server.js', url: 'http://localhost:8080/', checks };
  expect(
    browserOf(
      settleSessionInput({ grant: devMode, raw: raw({ checks, readyTimeout: '5s' }), restricted: restrictedHost, app }),
    ),
  ).toMatchObject({ start: 'npm run dev', readyTimeout: '5s' });
  expect(browserOf(settleSessionInput({ grant: devMode, raw: raw(own), restricted: restrictedHost, app }))).toEqual({
    ...own,
    readyTimeout: '60s',
    screenshots: [],
  });
  // The repo file's check takes the app the same way.
  const file: RepoConfig = { verify: { browser: { checks, screenshots: [] } } };
  expect(
    browserOf(
      settleSessionInput({
        grant: devMode,
        raw: { repo: { url: URL }, task: 't' },
        file,
        restricted: restrictedHost,
        app,
      }),
    ),
  ).toMatchObject({ start: 'npm run dev' });
  // Without an app, a check must say how to start one, and where it answers.
  expect(settle(devMode, raw({ checks }))).toEqual({
    ok: false,
    problems: [
      expect.stringMatching(/^verify\.browser\.start: give the command that starts the app, or declare the app/),
    ],
  });
  expect(settle(devMode, raw({ start: 'npm start', checks }))).toEqual({
    ok: false,
    problems: ['verify.browser.url: give where the app answers, http://localhost:<port>/'],
  });
});

test('a repo file that asks for more than the operator allows is refused, naming the host and the value', () => {
  const file: RepoConfig = {
    egress: [{ host: 'registry.npmjs.org' }, { host: 'pastebin.example' }, { host: '127.0.0.1' }],
    agent: { secrets: ['AWS_KEY'] },
    limits: { memory: '16g' },
  };
  const settled = settle(registered({ maxima: { memory: '4g' } }), { repo: { url: URL }, task: 't' }, file);
  expect(settled).toEqual({
    ok: false,
    problems: [
      ".drydock/config.yaml: egress.1: pastebin.example is beyond the operator's egress rules for acme/shop (registry.npmjs.org)",
      ".drydock/config.yaml: egress.2.host: 127.0.0.1 is a loopback address; only the operator's rules for acme/shop may name it",
      '.drydock/config.yaml: agent.secrets: AWS_KEY is not a secret the operator grants to acme/shop (grantable: none)',
      ".drydock/config.yaml: limits.memory: 16g is more than the operator's maximum memory for acme/shop (4g)",
    ],
  });
});

test('the repo file: every bad field is named', () => {
  expect(
    checkRepoConfig({
      setup: '',
      verify: { test: 'npm test', junit: ['/etc/passwd'], browser: { start: 'npm start', url: 'http://evil.test/' } },
      egress: [{ host: 'not a host' }],
      agent: { kind: 'robot' },
      limits: { memory: 'lots' },
      environment: { devcontainer: '.devcontainer/devcontainer.json', dockerfile: 'Dockerfile' },
      colour: 'blue',
    }),
  ).toEqual({
    ok: false,
    problems: [
      '.drydock/config.yaml: setup: Too small: expected string to have >=1 characters',
      '.drydock/config.yaml: verify.junit.0: must be relative to the repo, without ".."',
      '.drydock/config.yaml: verify.browser.url: must be http://localhost:<port>/...: the sandbox has no network',
      expect.stringMatching(/^\.drydock\/config\.yaml: egress\.0\.host: a host name/),
      expect.stringMatching(/^\.drydock\/config\.yaml: agent\.kind: /),
      expect.stringMatching(/^\.drydock\/config\.yaml: limits\.memory: /),
      '.drydock/config.yaml: environment: give devcontainer or dockerfile, not both',
      '.drydock/config.yaml: (file): Unrecognized key: "colour" (colour)',
    ],
  });
  expect(checkRepoConfig(null)).toEqual({ ok: true, config: {} });
});

test('the shipped JSON Schema of the repo file is the one generated from the zod schema (run npm run schema)', () => {
  const shipped = JSON.parse(readFileSync(path.join(__dirname, '../../workflows/repo-config.schema.json'), 'utf8'));
  expect(shipped).toEqual(repoConfigJsonSchema());
  expect(Object.keys(shipped.properties)).toEqual([
    'setup',
    'verify',
    'egress',
    'agent',
    'plan',
    'limits',
    'environment',
    'services',
    'app',
  ]);
});

test("setup: the operator's command, else the repo file's, else the repo's setup script", () => {
  const script = { '.drydock/setup.sh': 'abc' };
  expect(setupCommandOf({ setup: 'make deps' }, script, 'npm ci')).toBe('make deps');
  expect(setupCommandOf({}, script, 'npm ci')).toBe('npm ci');
  expect(setupCommandOf({}, script)).toBe('sh .drydock/setup.sh');
  expect(setupCommandOf({}, {})).toBeUndefined();
});

test("no setup on the repo's own image: the image is the whole setup; on drydock's base image, none at all", () => {
  // gufolabs/gufo_acme as published: its dev container builds the Dockerfile that pip installs everything.
  const chosen = setupOf({}, {}, undefined, undefined, undefined) ?? imageOnlySetup('.devcontainer/devcontainer.json');
  expect(chosen).toEqual({ command: 'true', source: 'none beyond the image from .devcontainer/devcontainer.json' });
  // Any setup that is given still wins over the image alone.
  expect(setupOf({ setup: 'make deps' }, {}) ?? imageOnlySetup('Dockerfile')).toMatchObject({ command: 'make deps' });
  // drydock's base image (no imageFrom): still no setup, and the build refuses it.
  expect(setupOf({}, {}) ?? imageOnlySetup(undefined)).toBeUndefined();
});

test("the dev container's features' lifecycle commands go before any setup, as the Dev Container CLI runs them", () => {
  const features = 'git lfs pull';
  // A setup from elsewhere replaces the dev container's own commands, not its features'.
  expect(withFeatureSetup(setupOf({ setup: 'npm ci # deps' }, {}), features)).toEqual({
    command: '(git lfs pull\n) && (npm ci # deps\n)',
    source: "the dev container's features, then the operator (--setup)",
  });
  // The dev container's own setup holds them already, in the CLI's order.
  const own = setupOf({}, {}, undefined, 'git lfs pull && make');
  expect(withFeatureSetup(own, features)).toBe(own);
  // Nothing else: the features' commands, not the image alone; no features: as before.
  expect(withFeatureSetup(setupOf({}, {}), features) ?? imageOnlySetup('Dockerfile', features)).toEqual({
    command: 'git lfs pull',
    source: "the dev container's features",
  });
  expect(withFeatureSetup(setupOf({ setup: 'make' }, {}), undefined)).toMatchObject({ command: 'make' });
});
