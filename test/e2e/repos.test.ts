/**
 * The repo registry as the one list of repositories (issue 17) and its
 * security findings (issue 21): outside development mode only registered
 * repos are cloned (16); a session input's egress and secrets stay within the
 * operator's limits (1); the repo's .drydock/config.yaml gives defaults
 * within them. Real worker, Temporal, Postgres, git and Docker.
 */
import { access, mkdtemp, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import { openDatabase, type Database } from '../../store/db';
import { mirrorOf } from '../../repos/git';
import { createRepoLookup, RepoRegistry } from '../../repos/registry';
import { reject, status } from '../../workflows/api';
import {
  containersOf,
  docker,
  git,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  runCli,
  startSession,
  startStack,
  waitForStatus,
  type TestStack,
} from '../support/helpers';

let stack: TestStack;
let db: Database;
let seeded: { url: string; bare: string };
const NAME = `acme/registered-${Date.now().toString(36)}`;

beforeAll(async () => {
  seeded = await makeFixtureRepo();
  stack = await startStack({ DRYDOCK_DEV_MODE: false, DRYDOCK_REPOS: [`${NAME}=${seeded.url}`] });
  db = await openDatabase(stack.config);
});
afterAll(async () => {
  await db?.close();
  await stack?.stop();
});

/** Starts a session and expects it to fail at once as an invalid input; returns the message. */
async function refused(input: Record<string, unknown>): Promise<string> {
  const id = newSessionId('refused');
  const handle = await startSession(stack, id, input);
  const err: WorkflowFailedError = await handle.result().catch((e) => e);
  expect(err).toBeInstanceOf(WorkflowFailedError);
  expect(err.cause).toMatchObject({ type: 'InvalidSessionInput', nonRetryable: true });
  expect(await containersOf(id)).toHaveLength(0);
  expect((await handle.query(status)).phase).toBe('failed');
  return err.cause!.message;
}

test('DRYDOCK_REPOS seeds the registry; lookups by name (any case) and URL', async () => {
  const repos = createRepoLookup(new RepoRegistry(db.pool));
  expect(await repos.byName(NAME.toUpperCase())).toMatchObject({
    ok: true,
    repo: { name: NAME, url: seeded.url, limits: { egress: [{ host: 'registry.npmjs.org' }], secrets: [] } },
  });
  expect(await repos.byUrl(seeded.url)).toMatchObject({ ok: true, repo: { name: NAME } });
  expect(await repos.byName('someone/else')).toEqual({
    ok: false,
    reason: 'repo someone/else is not served by this drydock (register it: drydock repo add <url> --name owner/name)',
  });
});

test('outside development mode an unregistered URL (file:// included) is never cloned (21.16)', async () => {
  const stranger = await makeFixtureRepo();
  const message = await refused({ repo: { url: stranger.url }, task: 'read the disk' });
  expect(message).toContain(
    `repo.url ${stranger.url} is not a registered repository: register it with 'drydock repo add ${stranger.url}'`,
  );
  const mirror = mirrorOf(path.join(stack.config.DRYDOCK_DATA_DIR, 'mirrors'), stranger.url);
  await expect(access(mirror)).rejects.toThrow();
});

test("a session input's egress to a loopback address, or beyond the operator's rules, and ungranted secrets are refused (21.1)", async () => {
  const cli = { kind: 'cli', command: ['sh', '-c', 'true', '{prompt}'] };
  // Accepted before: the egress proxy then let the sandbox reach the worker's own services.
  expect(
    await refused({ repo: { url: seeded.url }, task: 't', agent: { ...cli, egress: [{ host: '127.0.0.1' }] } }),
  ).toContain(
    `agent.egress.0.host: 127.0.0.1 is a loopback address; only the operator's rules for ${NAME} may name it`,
  );
  expect(
    await refused({ repo: { url: seeded.url }, task: 't', agent: { ...cli, egress: [{ host: 'pastebin.example' }] } }),
  ).toContain(
    `agent.egress.0: pastebin.example is beyond the operator's egress rules for ${NAME} (registry.npmjs.org)`,
  );
  expect(await refused({ repo: { url: seeded.url }, task: 't', agent: { ...cli, secrets: ['MODEL_KEY'] } })).toContain(
    `agent.secrets: MODEL_KEY is not a secret the operator grants to ${NAME} (grantable: none)`,
  );
});

test('repo add records the limits; the repo file gives defaults within them, and asking beyond is refused', async () => {
  const repo = await makeFixtureRepo();
  const name = `acme/limited-${Date.now().toString(36)}`;
  const env = { DRYDOCK_TASK_QUEUE: stack.config.DRYDOCK_TASK_QUEUE };
  const added = await runCli(
    [
      'repo',
      'add',
      repo.url,
      '--name',
      name,
      '--secret',
      'MODEL_KEY',
      '--max-memory',
      '1g',
      '--max-cpus',
      '1',
      '--json',
    ],
    env,
  );
  expect(added).toMatchObject({ code: 0, stderr: '' });
  const listed = JSON.parse((await runCli(['repo', 'list', '--json'], env)).stdout);
  expect(listed.find((r: { repo: string }) => r.repo === repo.url)).toMatchObject({
    name,
    secrets: ['MODEL_KEY'],
    maxima: { memory: '1g', cpus: 1 },
    approvers: [],
  });

  await commitRepoFile(
    repo.bare,
    'verify:\n  test: sh check.sh\nlimits:\n  memory: 4g\negress:\n  - host: evil.example\n',
  );
  const message = await refused({ repo: { url: repo.url }, task: 't' });
  expect(message).toContain(
    `.drydock/config.yaml: egress.0: evil.example is beyond the operator's egress rules for ${name}`,
  );
  expect(message).toContain(
    `.drydock/config.yaml: limits.memory: 4g is more than the operator's maximum memory for ${name} (1g)`,
  );

  // Within the limits: the file's test command verifies; memory is the operator's maximum, not the 2g default.
  await commitRepoFile(repo.bare, 'verify:\n  test: sh check.sh\n');
  const id = newSessionId('repo-file');
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'greet',
    agent: { kind: 'script', steps: [{ run: 'echo hello >> README.md' }] },
  });
  const waiting = await waitForStatus(handle, inPhase('awaiting_approval'), 120_000);
  expect(waiting.verification).toMatchObject({ passed: true, command: 'sh check.sh' });
  const [container] = await containersOf(id);
  expect((await docker.getContainer(container.Id).inspect()).HostConfig).toMatchObject({
    Memory: 1024 ** 3,
    NanoCpus: 1e9,
  });
  await handle.signal(reject, { action: 'push', by: 'tester' });
  await handle.result().catch(() => undefined);
});

async function commitRepoFile(bare: string, content: string): Promise<void> {
  const work = await mkdtemp(path.join(tmpdir(), 'drydock-repofile-'));
  git(['clone', '--quiet', bare, work]);
  await mkdir(path.join(work, '.drydock'), { recursive: true });
  await writeFile(path.join(work, '.drydock', 'config.yaml'), content);
  git(['add', '.'], work);
  git(['-c', 'user.name=fixture', '-c', 'user.email=f@x', 'commit', '--quiet', '-m', 'repo file'], work);
  git(['push', '--quiet', 'origin', 'HEAD:main'], work);
}
