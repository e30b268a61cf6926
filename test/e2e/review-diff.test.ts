/**
 * What a reviewer approves is what is pushed: the review diff (change.diff)
 * is the pushed commit's diff byte for byte, whatever its files hold; a
 * change holding a secret the worker knows is refused (named, with where),
 * never hidden; a change whose files inflate past their cap is refused from
 * the objects' headers, before git reads them. Real sandbox, git and remote.
 */
import { randomBytes } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import type { CommitResult, Sandbox, StepResult } from '../../sandbox/contract';
import { testActivities, type TestActivities } from '../support/activities';
import { git, makeFixtureRepo, newSessionId, remoteHasBranch, type FixtureRepo } from '../support/helpers';

const DB_PASS = `pw-${randomBytes(12).toString('hex')}`;
let t: TestActivities;
let repo: FixtureRepo;

beforeAll(async () => {
  t = await testActivities({ secrets: { DB_PASS } });
  repo = await makeFixtureRepo();
});
afterAll(() => t?.close());

/** A sandbox of the fixture where `script` ran (with `secrets` granted), and drydock's commit of what it did. */
async function change(name: string, script: string, secrets: string[] = []) {
  const sessionId = newSessionId(name);
  const sb: Sandbox = await t.provision(sessionId, repo.url);
  const ran: StepResult = await t.env.run(t.activities.runStep, {
    sandbox: sb.name,
    sessionId,
    key: 'edit',
    nonce: randomBytes(16).toString('hex'),
    timeoutMs: 120_000,
    step: { run: script, timeout: '2m' },
    secrets,
  });
  expect(ran.exitCode).toBe(0);
  const spec = {
    sessionId,
    repoUrl: repo.url,
    branch: `drydock/${sessionId}`,
    message: `drydock: ${name}`,
    agent: 'script',
    baseCommit: sb.baseCommit,
    parent: sb.baseCommit,
    date: new Date().toISOString(),
  };
  const commit = (): Promise<CommitResult> => t.env.run(t.activities.commitChanges, { sandbox: sb.name, ...spec });
  const push = (made: CommitResult) =>
    t.env.run(t.activities.pushBranch, {
      sandbox: sb.name,
      ...spec,
      commit: made.commit,
      author: made.author,
      round: 1,
    });
  return { sessionId, sb, spec, commit, push };
}

test("the review diff is the pushed commit's diff, byte for byte: nothing in it is scrubbed", async () => {
  const script = [
    // An unterminated key block, then later files: a scrubber's pattern ran to the end of the text.
    `printf -- '-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n' > a-key.pem`,
    // A URL-password shape that hid up to 1 KiB of code.
    `printf 'const u = "//h:%s@x"; deleteEverything();\\n' "$(head -c 900 /dev/zero | tr '\\0' y)" > b-code.js`,
    `printf 'const fake = "sk-ant-%s";\\n' "$(head -c 24 /dev/zero | tr '\\0' Q)" > c-fixture.js`,
    'head -c 256 /dev/urandom > d-blob.bin',
    'echo "hello" >> README.md',
  ].join('\n');
  const c = await change('byte-for-byte', script);
  const made = await c.commit();
  expect(made).toMatchObject({ changed: true, diff: expect.any(String) });
  expect(made.blocked).toBeUndefined();
  const shown = await readFile(path.join(t.artifactsDir, made.diff!), 'utf8');
  await c.push(made);
  const pushed = git(['rev-parse', `refs/heads/${c.spec.branch}`], repo.bare).trim();
  expect(pushed).toBe(made.commit);
  const real = git(['diff', '--binary', '--no-textconv', '--no-ext-diff', c.sb.baseCommit, pushed], repo.bare);
  expect(shown).toBe(real);
  expect(shown).not.toContain('[redacted]');
  expect(shown).toContain('deleteEverything();');
  expect(shown).toContain('+hello');
});

test('a change holding the value of a granted secret is refused: named with where, no diff stored, never pushed', async () => {
  const script = [
    'printf "DB=%s\\n" "$DB_PASS" > config.txt',
    'printf "%s" "$DB_PASS" | base64 > encoded.txt',
    'echo ok > clean.txt',
  ].join('\n');
  const c = await change('secret', script, ['DB_PASS']);
  const made = await c.commit();
  expect(made.blocked).toEqual([
    { secret: 'DRYDOCK_SECRET_DB_PASS', where: 'config.txt' },
    { secret: 'DRYDOCK_SECRET_DB_PASS', where: 'encoded.txt' },
  ]);
  expect(made.diff).toBeUndefined();
  const stored = await readdir(path.join(t.artifactsDir, c.sessionId), { recursive: true }).catch(() => []);
  expect(stored).not.toContain('change.diff');
  expect(JSON.stringify(made)).not.toContain(DB_PASS);
  // The worker checks again before any push.
  await expect(c.push(made)).rejects.toMatchObject({
    type: 'SecretInChange',
    nonRetryable: true,
    message: expect.stringContaining('DRYDOCK_SECRET_DB_PASS in config.txt'),
  });
  expect(remoteHasBranch(repo.bare, c.spec.branch)).toBe(false);
});

test('a change whose files inflate past 64 MiB is refused from the objects’ headers, before any diff', async () => {
  // 300 MB of zeros: a bundle of a few hundred KB.
  const c = await change('inflated', 'head -c 300000000 /dev/zero > big.bin');
  await expect(c.commit()).rejects.toMatchObject({
    type: 'OutputTooLarge',
    nonRetryable: true,
    message: 'the change, uncompressed, is over 64 MiB',
  });
});

test("drydock's own git in the sandbox runs no command the repository's config names (fsmonitor, hooks, external diff, a clean filter)", async () => {
  const marker = (what: string) => `echo ${what} >> /tmp/ran; touch /workspace/planted-by-${what}`;
  const script = [
    `git config core.fsmonitor '${marker('fsmonitor')}; false'`,
    `git config diff.external '${marker('external-diff')}; true'`,
    // A clean filter would make the committed blob differ from the tested file (T4-L5).
    `git config filter.x.clean '${marker('clean-filter')}; cat >/dev/null; echo forged'`,
    "printf 'changed.txt filter=x\\n' > .gitattributes",
    'mkdir -p .git/hooks',
    ...['post-checkout', 'pre-commit', 'reference-transaction'].map(
      (hook) => `printf '#!/bin/sh\\n${marker(hook)}\\n' > .git/hooks/${hook} && chmod +x .git/hooks/${hook}`,
    ),
    'echo change > changed.txt',
  ].join('\n');
  const c = await change('git-config', script);
  const made = await c.commit();
  const tree = git(['ls-tree', '--name-only', made.commit], path.join(t.mirrorsDir, await mirrorName()));
  expect(tree.split('\n').filter((f) => f.startsWith('planted-by-'))).toEqual([]);
  expect(tree).toContain('changed.txt');
  expect(git(['show', `${made.commit}:changed.txt`], path.join(t.mirrorsDir, await mirrorName()))).toBe('change\n');
  await c.push(made);
  const ran: StepResult = await t.env.run(t.activities.runStep, {
    sandbox: c.sb.name,
    sessionId: c.sessionId,
    key: 'look',
    nonce: randomBytes(16).toString('hex'),
    timeoutMs: 60_000,
    step: { run: 'cat /tmp/ran 2>/dev/null; ls /workspace | grep planted || true', timeout: '1m' },
  });
  expect(ran.outputTail.trim()).toBe('');
});

/** The mirror folder of the fixture (one per test run's worker). */
async function mirrorName(): Promise<string> {
  const [mirror] = await readdir(t.mirrorsDir);
  return mirror;
}
