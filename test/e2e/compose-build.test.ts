/**
 * A compose stack whose service is built from the repo (sandbox/service-build.ts),
 * on real Temporal, Docker (gVisor's runsc-builder for the isolated builder),
 * git and PostgreSQL: `api` is built from its folder's Dockerfile (a RUN with a
 * build argument and a cache mount, a second stage, COPY --link: BuildKit's
 * syntax as buildah takes it) FROM debian:trixie-slim, the small base
 * builder.test.ts builds on, and runs with its env_file; `db` is drydock's
 * PostgreSQL with an init SQL file mounted from the repo and an env_file. A
 * session reaches both by their names. The builder takes minutes under
 * gVisor: one build for the file.
 */
import { addRepo } from '../../cli/snapshots';
import { ensureServiceImage } from '../../sandbox-images/service-images';
import { repoSlug, SnapshotRegistry } from '../../sandbox/snapshots';
import { SERVICE_BUILD_LABELS } from '../../sandbox/service-build';
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
  type FixtureRepo,
  type TestStack,
} from '../support/helpers';
import { PG_CLIENT, PG_READY } from '../support/service-clients';
import { buildSnapshot, removeSnapshots } from '../support/snapshots';

const BASE = 'debian:trixie-slim';

let stack: TestStack;
let db: Database;
let repo: FixtureRepo | undefined;

beforeAll(async () => {
  await ensureServiceImage('postgres');
  stack = await startStack();
  db = await openDatabase(stack.config);
}, 600_000);

afterAll(async () => {
  if (repo) {
    await removeSnapshots(stack, [repo.url]);
    const slug = repoSlug(repo.url);
    for (const image of await docker.listImages()) {
      if ((image.RepoTags ?? []).some((t) => t.includes(slug)))
        await docker
          .getImage(image.Id)
          .remove({ force: true })
          .catch(() => undefined);
    }
  }
  await db?.close();
  await stack?.stop();
});

/** A tiny HTTP server in the Perl of Debian's slim image: what the RUN wrote and what env_file gave. */
const SERVER = `use IO::Socket::INET;
open(my $f, '<', '/greeting') or die "no /greeting: $!";
my $greeting = <$f>;
chomp $greeting;
my $s = IO::Socket::INET->new(LocalAddr => '0.0.0.0', LocalPort => 8080, Listen => 5, ReuseAddr => 1) or die "listen: $!";
while (my $c = $s->accept) {
  my $request = <$c>;
  print $c "HTTP/1.0 200 OK\\r\\nContent-Type: text/plain\\r\\n\\r\\n$greeting from $ENV{API_NAME}\\n";
  close $c;
}
`;

function files(): Record<string, string> {
  return {
    'pgq.js': PG_CLIENT.replace(
      "net.connect(5432, '127.0.0.1'",
      'net.connect(Number(process.env.DB_PORT), process.env.DB_HOST',
    ).replace('database\\0app', 'database\\0shop'),
    'get.js': "require('http').get(process.env.API_URL, (r) => r.pipe(process.stdout));\n",
    '.devcontainer/devcontainer.json': JSON.stringify({
      dockerComposeFile: 'compose.yaml',
      service: 'app',
      // Setup runs with the services up: both answer by their names already.
      postCreateCommand: 'node get.js && node pgq.js "select count(*) from items"',
    }),
    '.devcontainer/compose.yaml': `services:
  app:
    image: ${process.env.DRYDOCK_BASE_IMAGE}
    env_file: app.env
  db:
    image: drydock/postgres:17
    env_file: db.env
    volumes:
      - ./db/init.sql:/docker-entrypoint-initdb.d/1-init.sql:ro
      - pgdata:/var/lib/postgresql/data
    healthcheck:
      test: ["CMD-SHELL", "${PG_READY}"]
      interval: 200ms
      retries: 150
  api:
    build:
      context: ./api
      target: serve
      args: { GREETING: built-by-run }
      cache_from: [example/api:cache]
    env_file: [api.env]
    ports: ["8080"]
volumes: { pgdata: {} }
`,
    '.devcontainer/app.env': 'DB_HOST=db\nDB_PORT=5432\nAPI_URL=http://api:8080/\n',
    '.devcontainer/db.env': 'POSTGRES_HOST_AUTH_METHOD=trust\nPOSTGRES_DB=shop\n',
    '.devcontainer/db/init.sql': "create table items (name text);\ninsert into items values ('from init.sql');\n",
    '.devcontainer/api.env': 'API_NAME=the env_file\n',
    '.devcontainer/api/Dockerfile': [
      '# syntax=docker/dockerfile:1.7',
      `FROM --platform=$BUILDPLATFORM ${BASE} AS base`,
      'ARG GREETING',
      'RUN --mount=type=cache,target=/var/cache/drydock-test echo "$GREETING" > /greeting',
      'FROM base AS serve',
      'COPY --link serve.pl /srv/serve.pl',
      'USER 1000',
      'CMD ["perl", "/srv/serve.pl"]',
      'FROM base AS never',
      'RUN false',
      '',
    ].join('\n'),
    '.devcontainer/api/serve.pl': SERVER,
  };
}

test('a service built from the repo runs as that service, beside an init SQL file and env_files; the session reaches each by its name', async () => {
  repo = await makeFixtureRepo(files());
  await addRepo(stack.client, stack.config, repo.url, { every: '1h' });
  const built = await buildSnapshot(stack, repo.url);
  expect(built).toMatchObject({ status: 'ready' });

  const row = (await new SnapshotRegistry(db.pool).build(built.buildId))!;
  const api = row.services?.find((s) => s.name === 'api');
  expect(api?.image).toMatch(new RegExp(`^drydock-svc-${repoSlug(repo.url)}:api-[0-9a-f]{12}$`));
  const labels = (await docker.getImage(api!.image).inspect()).Config.Labels ?? {};
  expect(labels).toMatchObject({ 'drydock.image': 'service-build', [SERVICE_BUILD_LABELS.repo]: repoSlug(repo.url) });

  const id = newSessionId('svc-build');
  const handle = await startSession(
    stack,
    id,
    scriptedSession(repo.url, 'svc-build', ['node get.js', 'node pgq.js "select name from items"']),
  );
  await handle.result().catch(() => undefined);
  expect(await containersOf(id)).toHaveLength(0);
  const final: SessionStatus = await handle.query('status');
  const output = (n: number) =>
    (final.timeline.filter((t) => t.name.startsWith(`step ${n}`)).at(-1)?.outputTail ?? '').trim();
  expect(final.phase).toBe('completed');
  expect(output(1)).toBe('built-by-run from the env_file');
  expect(output(2)).toBe('from init.sql');
}, 1_200_000);
