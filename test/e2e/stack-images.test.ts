/**
 * Where a full-stack sandbox's images and setup come from, on real Temporal,
 * Docker, git, PostgreSQL and a real image registry (Debian's docker-registry
 * on loopback): a service image pulled from an allowed registry and pinned by
 * digest, the same image refused without the setting, a Dockerfile's FROM
 * refused then pulled the same way, a bad declaration
 * refused naming its field, a repo with only a lockfile, and a musl-based
 * (Alpine's kind) Dockerfile the helpers run in.
 */
import { WorkflowFailedError } from '@temporalio/client';
import { addRepo, rootCause } from '../../cli/snapshots';
import { ensureServiceImage } from '../../sandbox-images/service-images';
import { SnapshotRegistry } from '../../sandbox/snapshots';
import { openDatabase, type Database } from '../../store/db';
import type { SessionStatus } from '../../workflows/api';
import {
  containersOf,
  docker,
  makeFixtureRepo,
  newSessionId,
  scriptedSession,
  startSession,
  startStack,
  type TestStack,
} from '../support/helpers';
import { ImageRegistry } from '../support/image-registry';
import { ensureMuslImage } from '../support/musl-image';
import { REDIS_CLIENT } from '../support/service-clients';
import { buildSnapshot, removeSnapshots } from '../support/snapshots';

let stack: TestStack;
let db: Database;
let snapshots: SnapshotRegistry;
let registry: ImageRegistry;
let pushed: { ref: string; digest: string };
const pulled: string[] = [];
const repos: string[] = [];

beforeAll(async () => {
  registry = await ImageRegistry.start();
  pushed = await registry.push(await ensureServiceImage('redis'), 'drydock-test/redis:8');
  // No approval gate: a session's change is published (nowhere) at once, so it completes.
  stack = await startStack({ DRYDOCK_APPROVAL_REQUIRED: [] });
  db = await openDatabase(stack.config);
  snapshots = new SnapshotRegistry(db.pool);
}, 300_000);
afterAll(async () => {
  if (stack) await removeSnapshots(stack, repos);
  for (const image of [`${registry.host}/drydock-test/redis@${pushed.digest}`, ...pulled]) {
    await docker
      .getImage(image)
      .remove()
      .catch(() => undefined);
  }
  await db?.close();
  await stack?.stop();
  await registry?.stop();
});

async function registered(files: Record<string, string>, opts: Parameters<typeof addRepo>[3] = {}) {
  const repo = await makeFixtureRepo(files);
  repos.push(repo.url);
  const added = await addRepo(stack.client, stack.config, repo.url, { every: '1h', ...opts });
  return { repo, added };
}

async function session(url: string, steps: string[]): Promise<{ final: SessionStatus; output: string }> {
  const id = newSessionId('img');
  const handle = await startSession(stack, id, scriptedSession(url, 'images', steps));
  await handle.result().catch(() => undefined);
  expect(await containersOf(id)).toHaveLength(0);
  const final: SessionStatus = await handle.query('status');
  return { final, output: (final.timeline.find((t) => t.name.startsWith('step 1'))?.outputTail ?? '').trim() };
}

const redisConfig = (image: string) => `setup: "true"
services:
  cache:
    image: ${image}
    ports: [6379]
`;

test('a service image from an allowed registry is pulled at the build, pinned by digest, and run by sessions', async () => {
  const { repo } = await registered(
    { 'redisq.js': REDIS_CLIENT, '.drydock/config.yaml': redisConfig(pushed.ref) },
    { allowRegistry: [registry.host] },
  );
  const built = await buildSnapshot(stack, repo.url);
  expect(built.status).toBe('ready');
  const pinned = `${registry.host}/drydock-test/redis@${pushed.digest}`;
  expect((await snapshots.build(built.buildId))!.services).toEqual([{ name: 'cache', image: pinned }]);
  const { final, output } = await session(repo.url, ['node redisq.js PING']);
  expect(final.phase).toBe('completed');
  expect(output).toBe('PONG');
}, 300_000);

test('an image from a registry the operator did not allow is refused, naming the image and the setting', async () => {
  // A tag never pulled here (the test above leaves its own tag on the host, which then counts as the host's).
  const image = `${registry.host}/drydock-test/redis:not-pulled`;
  const { repo } = await registered({ '.drydock/config.yaml': redisConfig(image) });
  const failed = await buildSnapshot(stack, repo.url).catch((err: unknown) => err);
  expect(failed).toBeInstanceOf(WorkflowFailedError);
  expect(rootCause(failed as Error)).toBe(
    `services.cache.image: image ${image} is not on the worker's host and its registry ${registry.host} is not ` +
      `allowed for ${repo.url} (allowed: none): allow it with 'drydock repo add ${repo.url} --allow-registry ` +
      `${registry.host}' or DRYDOCK_ALLOWED_REGISTRIES, or load the image onto the worker's host`,
  );
}, 300_000);

test("a compose file's unsupported field is refused at the build, naming the file and the field", async () => {
  const { repo } = await registered({
    '.devcontainer/devcontainer.json': JSON.stringify({ dockerComposeFile: 'compose.yaml', service: 'app' }),
    // A port published on another number is fine (each service is at its container port); two on one port clash.
    '.devcontainer/compose.yaml': `services:\n  app:\n    image: ${process.env.DRYDOCK_BASE_IMAGE}\n  db:\n    build: { context: ./db, ssh: [default] }\n    ports: ["15432:5432"]\n  replica:\n    image: ${process.env.DRYDOCK_BASE_IMAGE}\n    expose: [5432]\n`,
    '.drydock/setup.sh': 'true\n',
  });
  const failed = await buildSnapshot(stack, repo.url).catch((err: unknown) => err);
  const why = rootCause(failed as Error);
  expect(why).toContain('.devcontainer/compose.yaml: services.db.build.ssh: the isolated builder has no SSH agent');
  expect(why).toContain('.devcontainer/compose.yaml: services.replica.ports: replica listens on port 5432 as db does');
  expect(why).not.toContain('15432');
  expect((await snapshots.builds({ repo: repo.url })).map((b) => b.status)).toEqual(['failed']);
}, 300_000);

test('a repo with only a lockfile: setup inferred, printed at repo add, run by a cold session, recorded with the snapshot', async () => {
  const { repo, added } = await registered({
    '.gitignore': 'node_modules/\n',
    'package.json': JSON.stringify({ name: 'only-a-lockfile', version: '1.0.0' }),
    'package-lock.json': JSON.stringify({
      name: 'only-a-lockfile',
      version: '1.0.0',
      lockfileVersion: 3,
      requires: true,
      packages: { '': { name: 'only-a-lockfile', version: '1.0.0' } },
    }),
  });
  expect(added.inferred).toEqual(['package-lock.json: npm ci (egress: registry.npmjs.org)']);
  expect(added.registration.egress).toEqual([{ host: 'registry.npmjs.org' }]);
  // A session before any snapshot (the cold path) runs it too: it is the repo's setup wherever it runs.
  const cold = await session(repo.url, ['echo agent']);
  expect(cold.final.phase).toBe('completed');
  expect(cold.final.timeline.map((t) => t.name)).toContain('setup (no snapshot yet)');
  const built = await buildSnapshot(stack, repo.url);
  expect(built.status).toBe('ready');
  expect(await snapshots.build(built.buildId)).toMatchObject({
    setup: 'npm ci',
    setupSource: 'inferred from package-lock.json',
  });
}, 300_000);

test("a musl-based Dockerfile (Alpine's kind: BusyBox, musl, no glibc, no git) runs the session: drydock's helpers bring their own", async () => {
  const musl = await ensureMuslImage();
  const repo = await makeFixtureRepo({
    Dockerfile: `FROM ${musl}\n`,
    '.drydock/config.yaml': 'environment: { dockerfile: Dockerfile }\n',
  });
  const { final, output } = await session(repo.url, [
    'hello-musl && ls /lib/ld-musl-x86_64.so.1 && ! ls /lib64/ld-linux-x86-64.so.2 2>/dev/null && command -v git && echo edited >> README.md',
  ]);
  expect(output).toBe('hello from musl\n/lib/ld-musl-x86_64.so.1\n/opt/drydock/git/bin/git');
  expect(final.phase).toBe('completed');
  expect(final.agent?.diffstat).toMatch(/README\.md/);
}, 300_000);

test("a Dockerfile FROM a registry's image: refused naming the image and the setting, pulled at the build once allowed", async () => {
  const musl = await registry.push(await ensureMuslImage(), 'drydock-test/musl:1');
  pulled.push(musl.ref);
  const files = {
    Dockerfile: `FROM ${musl.ref}\n`,
    '.drydock/config.yaml': 'environment: { dockerfile: Dockerfile }\nsetup: "true"\n',
  };
  const refused = await registered(files);
  const failed = await buildSnapshot(stack, refused.repo.url).catch((err: unknown) => err);
  expect(rootCause(failed as Error)).toMatch(
    new RegExp(
      `Dockerfile: FROM: image ${musl.ref} is not on the worker's host and its registry ${registry.host} is not allowed .*` +
        `--allow-registry ${registry.host}' or DRYDOCK_ALLOWED_REGISTRIES`,
    ),
  );
  const { repo } = await registered(files, { allowRegistry: [registry.host] });
  expect((await buildSnapshot(stack, repo.url)).status).toBe('ready');
  const { final, output } = await session(repo.url, ['hello-musl']);
  expect(output).toBe('hello from musl');
  expect(final.phase).toBe('completed');
}, 300_000);
