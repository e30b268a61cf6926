/**
 * The operator's say over a repo: `repo add --environment base` runs a repo
 * whose dev container cannot be built here; `repo remove` takes the
 * registration and its refresh schedules away; a repo whose own image is its
 * whole setup builds with none; and a workspace virtualenv is
 * active for every step however setup was given. Real Temporal, Docker, git.
 */
import { ScheduleNotFoundError } from '@temporalio/client';
import type { SnapshotBuildResult } from '../../sandbox/contract';
import { addRepo, removeRepo, rootCause, type AddRepoOptions } from '../../cli/snapshots';
import { openDatabase } from '../../store/db';
import {
  removeSnapshotSchedules,
  repoSlug,
  SNAPSHOT_LABELS,
  SnapshotRegistry,
  snapshotScheduleId,
} from '../../sandbox/snapshots';
import { status, type SessionStatus } from '../../workflows/api';
import {
  containersOf,
  docker,
  makeFixtureRepo,
  newSessionId,
  runCli,
  startSession,
  startStack,
  type FixtureRepo,
  type TestStack,
} from '../support/helpers';
import { PG_CLIENT } from '../support/service-clients';

let stack: TestStack;
const repos: FixtureRepo[] = [];

beforeAll(async () => {
  stack = await startStack({ DRYDOCK_APPROVAL_REQUIRED: [] });
}, 300_000);

afterAll(async () => {
  const slugs = repos.map((r) => repoSlug(r.url));
  for (const image of await docker.listImages()) {
    if ((image.RepoTags ?? []).some((t) => slugs.some((s) => t.includes(s))))
      await docker
        .getImage(image.Id)
        .remove({ force: true })
        .catch(() => undefined);
  }
  for (const r of repos) await removeSnapshotSchedules(stack.client, r.url, [stack.config.DRYDOCK_HOST_ID]);
  await stack?.stop();
});

async function fixture(files: Record<string, string>): Promise<FixtureRepo> {
  const repo = await makeFixtureRepo({ '.gitignore': '.venv/\n', ...files });
  repos.push(repo);
  return repo;
}

async function buildSnapshot(repo: FixtureRepo, opts: AddRepoOptions): Promise<SnapshotBuildResult> {
  await addRepo(stack.client, stack.config, repo.url, { every: '1h', allow: ['registry.npmjs.org'], ...opts });
  return stack.client.workflow.execute('refreshSnapshot', {
    workflowId: newSessionId('op-snap'),
    taskQueue: stack.config.DRYDOCK_TASK_QUEUE,
    args: [{ repo: repo.url }],
  });
}

/** A session of script steps; its final status and each step's output. */
async function session(name: string, repo: FixtureRepo, runs: string[]) {
  const id = newSessionId(name);
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: name,
    agent: { steps: runs.map((run) => ({ run })) },
  });
  await handle.result().catch(() => undefined);
  expect(await containersOf(id)).toHaveLength(0);
  const final: SessionStatus = await handle.query(status);
  const output = (n: number) => final.timeline.find((t) => t.name.startsWith(`step ${n}`))?.outputTail ?? '';
  return { final, output };
}

/** A dev container nothing here can build: a feature from a registry, an image no host has. */
const UNBUILDABLE = JSON.stringify({
  image: 'mcr.microsoft.com/devcontainers/python:3.12',
  features: { 'ghcr.io/devcontainers/features/node:1': { version: 'lts' } },
  postCreateCommand: 'pip install --user -e .',
});

test('repo add --environment base runs, on the base image, a repo whose dev container cannot be built here', async () => {
  const repo = await fixture({ '.devcontainer/devcontainer.json': UNBUILDABLE });
  // As published, and unregistered (development mode): refused, naming the dev container's field.
  const published = await session('op-published', repo, ['true']);
  expect(published.final.phase).toBe('failed');
  // (Features are fetched from allowed registries now: its image, on no host here, is what stops it first.)
  expect(published.final.error).toMatch(
    /\.devcontainer\/devcontainer\.json: (image mcr\.microsoft\.com\/devcontainers\/python:3\.12 is not on the worker's host|.*features)/,
  );

  // The operator decides: the base image, with its own setup (a virtualenv, given with --setup).
  const built = await buildSnapshot(repo, { environment: 'base', setup: 'python3 -m venv .venv' });
  expect(built).toMatchObject({ status: 'ready' });
  const labels = (await docker.getImage(built.image!).inspect()).Config.Labels;
  expect(labels[SNAPSHOT_LABELS.environment]).toBe(stack.config.DRYDOCK_BASE_IMAGE);
  const db = await openDatabase(stack.config);
  try {
    expect(await new SnapshotRegistry(db.pool).repo(repo.url)).toMatchObject({ environment: 'base' });
  } finally {
    await db.close();
  }

  // Its sessions start from that snapshot, and setup's virtualenv is active in every step.
  const { final, output } = await session('op-base', repo, ['command -v python; echo "venv=$VIRTUAL_ENV"']);
  expect(final.phase).toBe('completed');
  expect(output(1)).toContain('/workspace/.venv/bin/python');
  expect(output(1)).toContain('venv=/workspace/.venv');
}, 600_000);

/**
 * brianc/node-postgres's dev container as published (its shape, not its code): a compose dev service
 * built from a Dockerfile this host cannot build (its base image and its hosts are out of reach here), and
 * its database with `command: postgres -c …`, a published port, `restart`, `links` and PG* variables on
 * the dev service. The published file names `postgres:14`, which no registry here serves; the operator's
 * drydock/postgres:17 (the official image's contract) stands in for it.
 */
const NODE_POSTGRES_SHAPE = {
  '.devcontainer/devcontainer.json': `// If you want to run as a non-root user in the container, see .devcontainer/docker-compose.yml.
{
\t"name": "Node.js 20 & Postgres",
\t"dockerComposeFile": "docker-compose.yml",
\t"service": "web",
\t"workspaceFolder": "/workspace",
\t"customizations":{ "vscode": { "extensions": ["dbaeumer.vscode-eslint"] } }
}
`,
  '.devcontainer/Dockerfile':
    'FROM drydock-test/absent-node:22\nRUN apt-get update && apt-get -y install postgresql libpq-dev\n',
  '.devcontainer/docker-compose.yml': `services:
  web:
    build:
      context: .
      dockerfile: Dockerfile
    volumes:
      - ..:/workspace:cached
    environment:
      PGPASSWORD: pass
      PGUSER: user
      PGDATABASE: data
      PGHOST: db
      PGTESTNOSSL: 'true'
    command: sleep infinity
    depends_on:
      - db
    links:
      - db:db

  db:
    image: drydock/postgres:17
    restart: unless-stopped
    ports:
      - 5432:5432
    command: postgres -c password_encryption=md5
    environment:
      POSTGRES_HOST_AUTH_METHOD: trust
      POSTGRES_INITDB_ARGS: "--auth-local=md5"
      POSTGRES_PASSWORD: pass
      POSTGRES_USER: user
      POSTGRES_DB: data
`,
  // The tests' client: PGHOST, PGUSER and PGDATABASE as the dev service gives them.
  'pgq.js': PG_CLIENT.replace("net.connect(5432, '127.0.0.1',", 'net.connect(5432, process.env.PGHOST,').replace(
    "Buffer.from('\\0\\0\\0\\0\\0\\x03\\0\\0user\\0postgres\\0database\\0app\\0\\0', 'binary')",
    "Buffer.from('\\0\\0\\0\\0\\0\\x03\\0\\0user\\0' + process.env.PGUSER + '\\0database\\0' + process.env.PGDATABASE + '\\0\\0', 'binary')",
  ),
};

test("repo add --environment base keeps a compose dev container's database: node-postgres's shape, as published", async () => {
  const repo = await fixture(NODE_POSTGRES_SHAPE);
  expect(NODE_POSTGRES_SHAPE['pgq.js']).toContain('process.env.PGUSER');
  // The operator replaces the dev service's image (its Dockerfile cannot be built here); its db stays.
  const built = await buildSnapshot(repo, { environment: 'base', setup: 'true' });
  expect(built).toMatchObject({ status: 'ready' });
  const { final, output } = await session('op-np', repo, [
    'echo "$PGHOST $PGUSER $PGDATABASE"; getent hosts db | cut -d" " -f1',
    'node pgq.js "select current_user, current_database(), current_setting(\'password_encryption\')"',
  ]);
  expect([final.phase, final.error]).toEqual(['completed', undefined]);
  expect(output(1).trim().split('\n')).toEqual(['db user data', '127.0.0.1']);
  expect(output(2).trim()).toBe('user|data|md5');
}, 600_000);

test("a repo whose own image is its whole setup builds with none; on drydock's base image, no setup is refused", async () => {
  // gufolabs/gufo_acme's shape: its dev container's image holds everything, no lifecycle command, no lockfile.
  const own = await fixture({ '.devcontainer/devcontainer.json': JSON.stringify({ image: 'debian:trixie-slim' }) });
  const built = await buildSnapshot(own, {});
  expect([built.status, built.error]).toEqual(['ready', undefined]);
  const db = await openDatabase(stack.config);
  try {
    expect(await new SnapshotRegistry(db.pool).build(built.buildId)).toMatchObject({
      setup: 'true',
      setupSource: 'none beyond the image from .devcontainer/devcontainer.json',
    });
  } finally {
    await db.close();
  }
  // The same repo with nothing on drydock's base image: still refused, naming where a setup goes.
  const bare = await fixture({ 'README.md': 'nothing to set up\n' });
  const refused = await buildSnapshot(bare, {}).then(
    () => 'built',
    (err: Error) => rootCause(err),
  );
  expect(refused).toMatch(/^no setup, and no lockfile drydock knows to infer one from: register one with --setup/);
}, 600_000);

test('repo add refuses a bad --environment, naming the flag, before anything is registered', async () => {
  const repo = await fixture({});
  await expect(addRepo(stack.client, stack.config, repo.url, { environment: 'compose' })).rejects.toThrow(
    '--environment: expected devcontainer, dockerfile, base or image:<ref>, got "compose"',
  );
  await expect(
    addRepo(stack.client, stack.config, repo.url, { environment: 'devcontainer', ignoreDevcontainer: true }),
  ).rejects.toThrow(/contradict/);
}, 60_000);

test("repo add --environment image:<ref> of an image no host has is refused at the build, naming the operator's setting", async () => {
  const repo = await fixture({});
  const why = await buildSnapshot(repo, { environment: 'image:drydock-test/absent:1', setup: 'true' }).then(
    () => 'built',
    (err: Error) => rootCause(err),
  );
  expect(why).toContain("the operator's setting (repo add --environment image:drydock-test/absent:1): image");
  expect(why).toContain('drydock-test/absent:1');
}, 300_000);

test('a virtualenv a step makes is active in the steps after it (no setup, no snapshot)', async () => {
  const repo = await fixture({});
  const { final, output } = await session('op-venv', repo, [
    'python3 -m venv .venv',
    'command -v python; echo "venv=$VIRTUAL_ENV"',
  ]);
  expect(final.phase).toBe('completed');
  expect(output(2)).toContain('/workspace/.venv/bin/python');
  expect(output(2)).toContain('venv=/workspace/.venv');
}, 300_000);

test('repo remove takes the registration and its refresh schedule away, and says what it removed', async () => {
  const repo = await fixture({});
  await addRepo(stack.client, stack.config, repo.url, { every: '1h', setup: 'true', name: 'ops/removed' });
  const scheduleId = snapshotScheduleId(repo.url, stack.config.DRYDOCK_HOST_ID);
  await stack.client.schedule.getHandle(scheduleId).describe();

  // A repo DRYDOCK_REPOS seeds would come back: refused, naming the setting.
  const seeded = { ...stack.config, DRYDOCK_REPOS: [`ops/removed=${repo.url}`] };
  await expect(removeRepo(stack.client, seeded, repo.url)).rejects.toThrow(/DRYDOCK_REPOS/);

  // By name, as webhooks and the API name it, with the CLI: it says what it removed.
  const cli = await runCli(['repo', 'remove', 'ops/removed'], {
    TEMPORAL_ADDRESS: stack.config.TEMPORAL_ADDRESS,
    DATABASE_URL: stack.config.DATABASE_URL!,
    DRYDOCK_TASK_QUEUE: stack.config.DRYDOCK_TASK_QUEUE,
  });
  expect(cli).toMatchObject({ code: 0, stderr: '' });
  // Its schedules on every host the run's database has seen (other test files' hosts too), this host's among them.
  expect(cli.stdout).toContain(
    `removed ops/removed (${repo.url}): its registration (limits, setup, environment, pool) and its refresh schedules (`,
  );
  expect(cli.stdout.match(/its refresh schedules \(([^)]*)\)/)?.[1].split(', ')).toContain(scheduleId);
  await expect(stack.client.schedule.getHandle(scheduleId).describe()).rejects.toBeInstanceOf(ScheduleNotFoundError);
  const db = await openDatabase(stack.config);
  try {
    expect(await new SnapshotRegistry(db.pool).repo(repo.url)).toBeUndefined();
  } finally {
    await db.close();
  }
  await expect(removeRepo(stack.client, stack.config, repo.url)).rejects.toThrow(`${repo.url} is not registered`);
}, 120_000);
