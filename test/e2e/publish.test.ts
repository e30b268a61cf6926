/**
 * The approval gate and publishing: push from the worker, a pull request on a
 * local server speaking GitHub's REST API, the deploy command; approvals bound
 * to the change; the GitHub token never reaches the sandbox, logs or history.
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { MockActivityEnvironment } from '@temporalio/testing';
import pino from 'pino';
import { createPublishActivities, type PublishDeps } from '../../activities/publish';
import { createPullRequestActivities } from '../../github/pull-requests';
import { sandboxName } from '../../sandbox/activities/container';
import { ArtifactStore } from '../../store/artifacts';
import { AuditTrail } from '../../store/audit';
import { openDatabase } from '../../store/db';
import { Redactor } from '../../platform/scrub';
import { decide, status, type SessionStatus } from '../../workflows/api';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github';
import { historyText } from '../support/histories';
import {
  approveAs,
  containersOf,
  docker,
  git,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  remoteHasBranch,
  startSession,
  startStack,
  waitForStatus,
  type TestStack,
  testAuditKey,
} from '../support/helpers';
import { inSandbox } from '../support/docker';

// Shaped like a real classic token, so pattern scanners would also catch it.
const TOKEN = `ghp_${randomBytes(18).toString('hex')}`;
let github: FakeGitHub;
let repo: { url: string; bare: string };
let stack: TestStack;
const logLines: string[] = [];

beforeAll(async () => {
  github = await startFakeGitHub({ owner: 'acme', repo: 'app', token: TOKEN });
  repo = await makeFixtureRepo();
  const log = pino({ level: 'trace' }, { write: (line: string) => void logLines.push(line) });
  stack = await startStack({ GITHUB_TOKEN: TOKEN, GITHUB_API_URL: github.url }, log);
});
afterAll(async () => {
  await stack?.stop();
  await github?.close();
});

/** A session that opens a pull request, with a gate for the push and one for the pull request. */
const prSession = (extra: Record<string, unknown> = {}) => ({
  repo: { url: repo.url },
  task: 'greet in the README',
  requestedBy: 'rita',
  agent: { steps: [{ run: 'echo hello >> README.md' }] },
  verify: { test: 'sh check.sh' },
  // Open for follow-ups one second, not the default week (test/e2e/followup.test.ts covers follow-ups).
  publish: { pullRequest: { repo: 'acme/app' }, openFor: '1s' },
  ...extra,
  approval: { separateGates: true, ...(extra.approval as object | undefined) },
});

const remoteHas = (branch: string) => remoteHasBranch(repo.bare, branch);

/** Another stack, publishing with this token to this GitHub, with no approval required. */
const unattendedStack = (token: string, apiUrl: string) =>
  startStack({ GITHUB_TOKEN: token, GITHUB_API_URL: apiUrl, DRYDOCK_APPROVAL_REQUIRED: [] });

/** Runs a shell command in a live sandbox as root, to look everywhere. */
const inSandboxAsRoot = (container: string, script: string) => inSandbox(container, script, 'root');

test('approve push, then the pull request: pushed, PR opened with the evidence; the token is nowhere but the worker', async () => {
  const id = newSessionId('pr');
  const handle = await startSession(stack, id, prSession());
  const atPush = await waitForStatus(handle, inPhase('awaiting_approval'));
  expect(atPush.pendingApproval).toMatchObject({ action: 'push', evidence: { tests: 'passed: sh check.sh' } });
  expect(atPush.policy).toEqual({
    required: ['push', 'pull_request', 'deploy'],
    approvers: [],
    forbidSelfApproval: false,
    separateGates: true,
    parkAfter: '15m', // the operator's default
    maxChildren: 8, // DRYDOCK_MAX_CHILDREN's default
  });
  await handle.executeUpdate(decide, approveAs('alice', 'push', atPush.pendingApproval!.change));

  const atPr = await waitForStatus(handle, (s) => s.pendingApproval?.action === 'pull_request');
  expect(remoteHas(`drydock/${id}`)).toBe(true);
  expect(github.pulls.filter((p) => p.head === `drydock/${id}`)).toEqual([]); // nothing before its approval

  // The sandbox is alive: the token is in neither its environment, any process's environ, nor its files.
  const container = sandboxName(id);
  const inspect = await docker.getContainer(container).inspect();
  expect(JSON.stringify(inspect.Config.Env)).not.toContain(TOKEN);
  expect(JSON.stringify(inspect.HostConfig.Binds ?? [])).toBe('[]');
  const environs = await inSandboxAsRoot(container, 'cat /proc/[0-9]*/environ | tr "\\0" "\\n"');
  expect(environs).toMatch(/HOME=/); // it did read the environments
  expect(environs).not.toContain(TOKEN);
  const found = await inSandboxAsRoot(
    container,
    `grep -rIl --exclude-dir=proc --exclude-dir=sys -e '${TOKEN}' / 2>/dev/null; echo scanned`,
  );
  expect(found.trim()).toBe('scanned');

  await handle.executeUpdate(decide, approveAs('bob', 'pull_request'));
  const final = (await handle.result()) as SessionStatus;
  expect(final.phase).toBe('completed');
  expect(final.pullRequest).toMatchObject({ number: expect.any(Number), created: true });
  const pr = github.pulls.find((p) => p.head === `drydock/${id}`)!;
  expect(pr).toMatchObject({ base: 'main', title: 'drydock: greet in the README', draft: false });
  expect(pr.body).toContain('## Task\ngreet in the README');
  expect(pr.body).toMatch(/README\.md \| 1 \+/);
  expect(pr.body).toContain('## Verification\npassed: sh check.sh');
  expect(pr.body).toMatch(/- push: approved by alice/);
  expect(pr.body).toContain(`/namespaces/default/workflows/${id}`);
  expect(pr.body).toContain(atPush.pendingApproval!.change.slice(0, 12));
  expect(final.decisions.map((d) => d.change)).toEqual([atPr.pendingApproval!.change, atPr.pendingApproval!.change]);

  // Every GitHub call carried the token, in the header only.
  for (const r of github.requests) expect(r.authorization).toBe(`token ${TOKEN}`);
  // Nor in the logs, the status or the workflow history.
  expect(logLines.join('\n')).not.toContain(TOKEN);
  expect(logLines.join('\n')).toContain('pull request');
  expect(JSON.stringify(final)).not.toContain(TOKEN);
  expect(historyText(await handle.fetchHistory())).not.toContain(TOKEN);
  expect(await containersOf(id)).toHaveLength(0);
});

test('the pull request activity retried after a crash opens one PR and updates it', async () => {
  const db = await openDatabase(stack.config);
  const deps = {
    audit: new AuditTrail(db.pool, 'test-host', new Redactor([TOKEN]), testAuditKey()),
    github: { apiUrl: github.url, token: TOKEN },
    sessionLink: (id: string) => `ui/${id}`,
    log: pino({ level: 'silent' }),
  };
  const { openPullRequest } = createPullRequestActivities(deps);
  const env = new MockActivityEnvironment();
  const input = {
    sessionId: newSessionId('pr-retried'),
    repo: 'acme/app',
    head: 'drydock/retried',
    draft: true,
    title: 't',
    body: 'first',
  };
  const first: { number: number; url: string; created: boolean } = await env.run(openPullRequest, input);
  const second = await env.run(openPullRequest, { ...input, body: 'second' });
  expect(first).toMatchObject({ created: true });
  expect(second).toEqual({ ...first, created: false });
  const prs = github.pulls.filter((p) => p.head === 'drydock/retried');
  expect(prs).toHaveLength(1);
  expect(prs[0].body).toBe(`second\n\n---\nSession: ui/${input.sessionId}\n`);
  await db.close();
});

test('deploy is at most once: a retry while the first attempt may still be deploying fails and does not deploy again', async () => {
  const db = await openDatabase(stack.config);
  const dir = await mkdtemp(path.join(tmpdir(), 'deploy-once-'));
  const runs = path.join(dir, 'runs');
  const deps = {
    audit: new AuditTrail(db.pool, 'test-host', new Redactor([TOKEN]), testAuditKey()),
    redactor: new Redactor([TOKEN]),
    artifacts: new ArtifactStore(path.join(dir, 'artifacts')),
    // Until the retry was refused (the test writes ${runs}.go), as when its worker died mid-deploy; at most 2 minutes.
    deployCommand: `echo "$DRYDOCK_COMMIT" >> ${runs}; for i in $(seq 600); do [ -e ${runs}.go ] && break; sleep 0.2; done; echo deployed`,
    log: pino({ level: 'silent' }),
  };
  const { deploy } = createPublishActivities(deps as unknown as PublishDeps);
  const input = { sessionId: newSessionId('deploy-once'), repoUrl: repo.url, branch: 'drydock/once', commit: 'c0ffee' };
  const first = new MockActivityEnvironment({ attempt: 1 }).run(deploy, input);
  while (!(await readFile(runs, 'utf8').catch(() => ''))) await new Promise((r) => setTimeout(r, 50));

  const retry = new MockActivityEnvironment({ attempt: 2 }).run(deploy, input);
  await expect(retry).rejects.toMatchObject({
    nonRetryable: true,
    message: expect.stringMatching(/deploy may have run.*check the deployment target for commit c0ffee/s),
  });
  await writeFile(`${runs}.go`, '');
  expect(await first).toMatchObject({ exitCode: 0 });
  // Once the first attempt recorded its result, a later retry returns it without deploying.
  const later = await new MockActivityEnvironment({ attempt: 3 }).run(deploy, input);
  expect(later).toEqual({ exitCode: 0, outputTail: 'deployed\n' });
  expect(await readFile(runs, 'utf8')).toBe('c0ffee\n');
  await db.close();
});

test('reject at the push gate → nothing pushed, no PR', async () => {
  const id = newSessionId('prreject');
  const handle = await startSession(stack, id, prSession());
  await waitForStatus(handle, inPhase('awaiting_approval'));
  await handle.executeUpdate(decide, { args: [{ decision: 'reject', action: 'push', by: 'rita' }] });
  expect(((await handle.result()) as SessionStatus).phase).toBe('rejected');
  expect(remoteHas(`drydock/${id}`)).toBe(false);
  expect(github.requests.filter((r) => r.path.includes('/pulls') && JSON.stringify(r).includes(id))).toEqual([]);
  expect(await containersOf(id)).toHaveLength(0);
});

test("publish.branch the repository's default branch: approved, and still refused at the push; main is untouched", async () => {
  const id = newSessionId('tomain');
  const before = git(['rev-parse', 'main'], repo.bare).trim();
  const handle = await startSession(stack, id, prSession({ publish: { branch: 'main' } }));
  const waiting = await waitForStatus(handle, inPhase('awaiting_approval'));
  await handle.executeUpdate(decide, approveAs('alice', 'push', waiting.pendingApproval!.change));
  await expect(handle.result()).rejects.toThrow();
  const final = await handle.query(status);
  expect(final.error).toMatch(
    /main is the repository's default branch: drydock pushes there only with DRYDOCK_ALLOW_DEFAULT_BRANCH_PUSH=true/,
  );
  expect(git(['rev-parse', 'main'], repo.bare).trim()).toBe(before);
});

test('approval timeout → nothing pushed, no PR', async () => {
  const id = newSessionId('prtimeout');
  const handle = await startSession(stack, id, prSession({ approval: { timeout: '2s' } }));
  expect(((await handle.result()) as SessionStatus).phase).toBe('timed_out');
  expect(remoteHas(`drydock/${id}`)).toBe(false);
  expect(github.pulls.filter((p) => p.head === `drydock/${id}`)).toEqual([]);
});

test('a stale change, self-approval (rule on) and an unknown approver are refused; the session still waits', async () => {
  const id = newSessionId('refusals');
  const handle = await startSession(
    stack,
    id,
    prSession({ approval: { approvers: ['rita', 'alice'], forbidSelfApproval: true } }),
  );
  const waiting = await waitForStatus(handle, inPhase('awaiting_approval'));
  const reason = (p: Promise<unknown>) =>
    p.then(
      () => 'accepted',
      (e: WorkflowUpdateFailedError) => (e.cause as Error).message,
    );
  expect(
    await reason(handle.executeUpdate(decide, approveAs('alice', 'push', '0123456789ab'.repeat(5) + 'cdef'))),
  ).toBe(`stale: change 0123456789ab is not the pending change ${waiting.pendingApproval!.change.slice(0, 12)}`);
  // A prefix of the pending change is not a change named (T4-L1).
  expect(
    await reason(
      handle.executeUpdate(decide, approveAs('alice', 'push', waiting.pendingApproval!.change.slice(0, 12))),
    ),
  ).toBe("'change' must be the whole hash of the change: 64 hex characters, as pendingApproval.change shows");
  expect(await reason(handle.executeUpdate(decide, approveAs('rita', 'push')))).toBe(
    'rita requested this session and may not approve it (self-approval is forbidden)',
  );
  expect(await reason(handle.executeUpdate(decide, approveAs('mallory', 'push')))).toMatch(
    /mallory is not an approver/,
  );
  expect((await handle.query(status)).phase).toBe('awaiting_approval');
  await handle.cancel();
  await handle.result().catch(() => undefined);
  expect(await containersOf(id)).toHaveLength(0);
});

test('401 from the GitHub API → the session fails at once, the reason in status', async () => {
  const badStack = await unattendedStack('ghp_wrong', github.url);
  try {
    const id = newSessionId('pr401');
    const handle = await startSession(badStack, id, prSession());
    await handle.result().catch(() => undefined);
    const final = await handle.query(status);
    expect(final.phase).toBe('failed');
    expect(final.error).toBe(
      "openPullRequest: GitHub answered 401 for acme/app: Bad credentials (check the worker's GitHub credentials)",
    );
    const history = await handle.fetchHistory();
    const prAttempts = history.events!.filter(
      (e) => e.activityTaskStartedEventAttributes && e.activityTaskStartedEventAttributes.attempt! > 1,
    );
    expect(prAttempts).toEqual([]); // not retried
    expect(await containersOf(id)).toHaveLength(0);
  } finally {
    await badStack.stop();
  }
});

test('GitHub answering 503 is retried by Temporal: the session completes with one PR', async () => {
  const retryStack = await unattendedStack(TOKEN, github.url);
  try {
    const id = newSessionId('pr503');
    github.failNext(2, 503);
    const handle = await startSession(retryStack, id, prSession());
    const final = (await handle.result()) as SessionStatus;
    expect(final.phase).toBe('completed');
    expect(github.pulls.filter((p) => p.head === `drydock/${id}`)).toHaveLength(1);
    // The PR was opened in the first run; waiting for follow-ups continued as new.
    const firstRun = retryStack.client.workflow.getHandle(id, handle.firstExecutionRunId);
    const started = (await firstRun.fetchHistory()).events!.filter((e) => e.activityTaskStartedEventAttributes);
    expect(Math.max(...started.map((e) => e.activityTaskStartedEventAttributes!.attempt!))).toBe(3);
  } finally {
    await retryStack.stop();
  }
});

test('a GitHub App: an installation token minted for the one repository opens the PR; deploy runs after its approval', async () => {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const app = await startFakeGitHub({
    owner: 'acme',
    repo: 'app',
    app: {
      appId: '4242',
      publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
      installationId: 77,
    },
  });
  const keyFile = path.join(process.env.DRYDOCK_TEST_DIR!, 'app-key.pem');
  await writeFile(keyFile, privateKey.export({ type: 'pkcs8', format: 'pem' }));
  const deployed = path.join(process.env.DRYDOCK_TEST_DIR!, `deployed-${randomBytes(3).toString('hex')}`);
  const appStack = await startStack({
    GITHUB_APP_ID: '4242',
    GITHUB_APP_PRIVATE_KEY_FILE: keyFile,
    GITHUB_API_URL: app.url,
    DRYDOCK_APPROVAL_REQUIRED: ['deploy'],
    DRYDOCK_DEPLOY_COMMAND: `echo "$DRYDOCK_BRANCH $DRYDOCK_COMMIT" > ${deployed}`,
  });
  try {
    const id = newSessionId('app');
    const handle = await startSession(
      appStack,
      id,
      prSession({ publish: { pullRequest: { repo: 'acme/app' }, deploy: true, openFor: '1s' } }),
    );
    const waiting = await waitForStatus(handle, inPhase('awaiting_approval'));
    expect(waiting.pendingApproval!.action).toBe('deploy');
    expect(app.pulls.map((p) => p.head)).toEqual([`drydock/${id}`]); // push and PR needed no approval here
    await handle.executeUpdate(decide, approveAs('ops', 'deploy'));
    const final = (await handle.result()) as SessionStatus;
    expect(final.phase).toBe('completed');
    expect(await readFile(deployed, 'utf8')).toBe(`drydock/${id} ${final.pushed!.commit}\n`);
    const tokenRequest = app.requests.find((r) => r.path === '/app/installations/77/access_tokens')!;
    expect(tokenRequest.body).toEqual({
      repositories: ['app'],
      permissions: { contents: 'write', pull_requests: 'write' },
    });
    expect(app.requests.find((r) => r.method === 'POST' && r.path === '/repos/acme/app/pulls')!.authorization).toBe(
      `token ${app.minted[0]}`,
    );
  } finally {
    await appStack.stop();
    await app.close();
  }
});

test("the pushed branch is drydock's one commit of the approved tree: no sandbox commit, author or object reaches the remote", async () => {
  const id = newSessionId('seal');
  const before = new Set(git(['rev-list', '--objects', '--all'], repo.bare).split('\n'));
  const base = git(['rev-parse', 'main'], repo.bare).trim();
  const mallory =
    'GIT_AUTHOR_NAME=Mallory GIT_AUTHOR_EMAIL=m@evil GIT_COMMITTER_NAME=Mallory GIT_COMMITTER_EMAIL=m@evil';
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'greet in the README',
    agent: {
      steps: [
        { run: `echo "the leaked secret" > leak.txt && git add leak.txt && ${mallory} git commit -qm leak` },
        { run: `git rm -q leak.txt && echo hello >> README.md && ${mallory} git commit -qam tidy` },
        // A merge parent: a side branch with its own object, merged in.
        {
          run: `git checkout -qb side HEAD~2 && echo side > side.txt && git add side.txt && ${mallory} git commit -qm side && git checkout -q - && ${mallory} git merge -q --no-edit side && git rm -q side.txt && ${mallory} git commit -qm unside`,
        },
      ],
    },
  });
  const waiting = await waitForStatus(handle, inPhase('awaiting_approval'));
  expect(waiting.pendingApproval!.evidence.diffstat).toMatch(/README\.md \| 1 \+\n 1 file changed/);
  await handle.executeUpdate(decide, approveAs('alice', 'push', waiting.pendingApproval!.change));
  const final = (await handle.result()) as SessionStatus;
  expect(final.phase).toBe('completed');
  const pushed = final.pushed!.commit;
  expect(pushed).toBe(waiting.pendingApproval!.evidence.commit);
  const branch = `drydock/${id}`;
  expect(git(['rev-parse', branch], repo.bare).trim()).toBe(pushed);
  expect(git(['rev-list', `${base}..${branch}`], repo.bare).trim()).toBe(pushed); // exactly one new commit
  expect(git(['log', '-1', '--format=%P|%an <%ae>|%cn <%ce>', pushed], repo.bare).trim()).toBe(
    `${base}|drydock <drydock@localhost>|drydock <drydock@localhost>`,
  );
  const trailers = git(['log', '-1', '--format=%(trailers:only,unfold)', pushed], repo.bare);
  expect(trailers).toContain(`Drydock-Session: ${id}`);
  expect(trailers).toContain('Drydock-Agent: script');
  expect(git(['ls-tree', '-r', '--name-only', pushed], repo.bare)).not.toMatch(/leak\.txt|side\.txt/);
  // Nothing else of the sandbox reached the remote: only the commit, its trees and the new README blob.
  const added = git(['rev-list', '--objects', '--all'], repo.bare)
    .split('\n')
    .filter((line) => line && !before.has(line));
  expect(added.join('\n')).not.toMatch(/leak\.txt|side\.txt/);
  const blobs = added.filter((line) => git(['cat-file', '-t', line.split(' ')[0]], repo.bare).trim() === 'blob');
  // (Earlier tests may have pushed the same README already: then no blob is new.)
  expect(blobs.map((line) => line.split(' ')[1]).filter((name) => name !== 'README.md')).toEqual([]);
  const everything = git(['cat-file', '--batch-all-objects', '--batch'], repo.bare);
  expect(everything).not.toContain('the leaked secret');
  expect(everything).not.toContain('Mallory');
});

test("git over HTTP(S) with the worker's GitHub token: clone, push and PR; the token stays out of git config", async () => {
  const root = await mkdtemp(path.join(tmpdir(), 'drydock-githost-'));
  await mkdir(path.join(root, 'acme'));
  git(['clone', '--quiet', '--bare', repo.bare, path.join(root, 'acme', 'app.git')]);
  const host = await startFakeGitHub({ owner: 'acme', repo: 'app', token: TOKEN, gitRoot: root });
  const gitStack = await unattendedStack(TOKEN, host.url);
  try {
    const id = newSessionId('https');
    const handle = await startSession(gitStack, id, {
      ...prSession(),
      repo: { url: `${host.url}/acme/app.git` },
    });
    const final = (await handle.result()) as SessionStatus;
    expect(final.phase).toBe('completed');
    expect(git(['rev-parse', `drydock/${id}`], path.join(root, 'acme', 'app.git')).trim()).toBe(final.pushed!.commit);
    expect(host.pulls.map((p) => p.head)).toEqual([`drydock/${id}`]);
    const gitRequests = host.requests.filter((r) => r.path.startsWith('/acme/app.git/'));
    expect(gitRequests.map((r) => r.path)).toEqual(
      expect.arrayContaining([
        '/acme/app.git/info/refs?service=git-upload-pack',
        '/acme/app.git/info/refs?service=git-receive-pack',
      ]),
    );
    // The mirror on the worker keeps the plain URL; the token was only ever in git's environment.
    const mirrors = path.join(gitStack.config.DRYDOCK_DATA_DIR, 'mirrors');
    for (const mirror of await readdir(mirrors)) {
      expect(await readFile(path.join(mirrors, mirror, 'config'), 'utf8')).not.toContain(TOKEN);
    }
    expect(logLines.join('\n')).not.toContain(TOKEN);
  } finally {
    await gitStack.stop();
  }

  const wrong = await unattendedStack('ghp_wrong', host.url);
  try {
    const id = newSessionId('https401');
    const handle = await startSession(wrong, id, { ...prSession(), repo: { url: `${host.url}/acme/app.git` } });
    await handle.result().catch(() => undefined);
    const final = await handle.query(status);
    expect(final.phase).toBe('failed');
    // The worker reads the repo's configuration at the session's start: that fetch is refused first.
    expect(final.error).toMatch(/^repoPolicy: the remote refused the worker's credentials/);
    expect(await containersOf(id)).toHaveLength(0);
  } finally {
    await wrong.stop();
    await host.close();
  }
});
