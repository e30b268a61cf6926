/**
 * A repo's services and app, declared in .drydock/config.yaml or a dev
 * container's compose file (workflows/services.ts, sandbox/compose.ts): both
 * become the same spec; every bad declaration is refused naming the file and
 * the field, and what to do.
 */
import { ComposeError, parseCompose, shellWords } from '../../sandbox/compose';
import { parseDevcontainer } from '../../sandbox/repo-image';
import {
  recordedServices,
  RecordedServicesInvalid,
  SERVICES_LABEL,
  ServiceFailure,
  startServices,
  type RunnableService,
} from '../../sandbox/services';
import {
  SandboxNotFound,
  type SandboxProvider,
  type ServiceContainerSpec,
  type ServiceState,
} from '../../sandbox/provider';
import { checkRepoConfig } from '../../workflows/repo-config';
import { appOfConfig, dependencyProblems, servicesOfConfig, startOrder } from '../../workflows/services';

const PG = 'drydock-service-postgres:17';
const COMPOSE = '.devcontainer/compose.yaml';

const config = (data: unknown) => checkRepoConfig(data);
const problemsOf = (data: unknown) => {
  const checked = config(data);
  return checked.ok ? [] : checked.problems;
};
const composeProblems = (text: string, runServices?: string[]) => {
  try {
    parseCompose(text, COMPOSE, { devService: 'app', runServices });
    return [];
  } catch (err) {
    if (!(err instanceof ComposeError)) throw err;
    return err.problems;
  }
};

describe('services: in .drydock/config.yaml', () => {
  test('a full declaration becomes the spec the sandbox runs', () => {
    const checked = config({
      services: {
        db: {
          image: PG,
          environment: { POSTGRES_PASSWORD: 'pw', PGPORT: 5432 },
          command: ['postgres', '-c', 'fsync=off'],
          healthcheck: { test: 'pg_isready -U postgres', interval: '500ms', retries: 20 },
          data: ['/var/lib/postgresql/data'],
          ports: [5432],
          limits: { memory: '256m', pids: 128 },
        },
        cache: { image: 'drydock-service-redis:8', ports: [6379], dependsOn: ['db'] },
      },
      app: { start: 'npm start', port: 3000, ready: { path: '/health' } },
    });
    expect(checked.ok).toBe(true);
    if (!checked.ok) return;
    const [db, cache] = servicesOfConfig(checked.config.services!);
    expect(db).toEqual({
      name: 'db',
      image: PG,
      environment: { POSTGRES_PASSWORD: 'pw', PGPORT: '5432' },
      command: ['postgres', '-c', 'fsync=off'],
      healthcheck: {
        test: ['sh', '-c', 'pg_isready -U postgres'],
        intervalMs: 500,
        timeoutMs: 10_000,
        retries: 20,
        startPeriodMs: 0,
      },
      ports: [5432],
      data: ['/var/lib/postgresql/data'],
      dependsOn: [],
      limits: { memoryBytes: 256 * 1024 ** 2, pids: 128 },
      source: 'services.db',
    });
    expect(cache.dependsOn).toEqual(['db']);
    expect(appOfConfig(checked.config.app!)).toEqual({
      start: 'npm start',
      port: 3000,
      readyPath: '/health',
      readyTimeoutMs: 60_000,
      source: 'app',
    });
  });

  test.each([
    [{ services: { db: { environment: {} } } }, /services\.db\.image: /],
    [{ services: { db: { image: 'Postgres' } } }, /services\.db\.image: "Postgres" is not an image reference/],
    [{ services: { DB: { image: PG } } }, /services\.DB: .*lowercase letters/],
    [{ services: { db: { image: PG, privileged: true } } }, /services\.db: .*privileged/],
    [{ services: { db: { image: PG, user: 'root' } } }, /services\.db\.user: services never run as root/],
    [{ services: { db: { image: PG, data: ['relative/dir'] } } }, /services\.db\.data\.0: an absolute path/],
    [{ services: { db: { image: PG, data: ['/'] } } }, /services\.db\.data\.0: a folder below \//],
    [{ services: { db: { image: PG, limits: { memory: '1t' } } } }, /services\.db\.limits\.memory/],
    [{ services: { db: { image: PG, ports: [70000] } } }, /services\.db\.ports\.0/],
    [
      { services: { db: { image: PG, healthcheck: { test: 'x', interval: '1h' } } } },
      /healthcheck\.interval: at most 5m/,
    ],
    [{ services: { db: { image: PG, environment: { 'BAD-NAME': 'x' } } } }, /services\.db\.environment\.BAD-NAME/],
    [{ app: { start: 'npm start' } }, /app\.port: /],
    [{ app: { start: 'npm start', port: 3000, ready: { path: 'health' } } }, /app\.ready\.path/],
  ])('refuses %j naming the field', (data, message) => {
    expect(problemsOf(data).join('\n')).toMatch(message);
  });

  test('dependencies: on declared services only, and never in a circle', () => {
    const specs = (deps: Record<string, string[]>) =>
      servicesOfConfig(Object.fromEntries(Object.entries(deps).map(([n, d]) => [n, { image: PG, dependsOn: d }])));
    expect(dependencyProblems(specs({ a: ['b'], b: [] }))).toEqual([]);
    expect(startOrder(specs({ a: ['b'], b: [] }))?.map((s) => s.name)).toEqual(['b', 'a']);
    expect(dependencyProblems(specs({ a: ['nope'] }))).toEqual([
      'services.a.dependsOn: nope is not a declared service',
    ]);
    expect(dependencyProblems(specs({ a: ['b'], b: ['a'] }))).toEqual([
      'services: the services depend on each other in a circle',
    ]);
  });
});

describe("a dev container's compose file", () => {
  const file = `
name: shop
services:
  app:
    build:
      context: ..
      dockerfile: .devcontainer/Dockerfile
      args: { NODE: "22" }
    environment:
      DATABASE_URL: postgres://postgres:\${PGPASS:-pw}@localhost:5432/shop
    volumes: [../..:/workspaces:cached]
    command: sleep infinity
    network_mode: service:db
  db:
    image: ${PG}
    restart: unless-stopped
    environment:
      - POSTGRES_PASSWORD=\${PGPASS:-pw}
      - POSTGRES_DB=shop
    volumes: [pgdata:/var/lib/postgresql/data]
    ports: ["5432:5432"]
    healthcheck:
      test: ["CMD-SHELL", "pg_isready -U postgres"]
      interval: 1s
      timeout: 2s
      retries: 30
      start_period: 1m30s
    deploy: { resources: { limits: { memory: 512M, cpus: "0.5" } } }
  cache:
    image: drydock-service-redis:8
    command: redis-server --save "" --appendonly no
    expose: [6379]
    depends_on: { db: { condition: service_healthy } }
    mem_limit: 1gb
volumes:
  pgdata:
x-anchors: { anything: 1 }
`;

  test('the dev service is the environment; the others are services on the same spec', () => {
    const parsed = parseCompose(file, COMPOSE, { devService: 'app' });
    expect(parsed.dev).toEqual({
      dockerfile: '.devcontainer/Dockerfile',
      context: '',
      args: { NODE: '22' },
      environment: { DATABASE_URL: 'postgres://postgres:pw@localhost:5432/shop' },
      hostNames: ['app'],
    });
    expect(parsed.services).toEqual([
      {
        name: 'db',
        image: PG,
        environment: { POSTGRES_PASSWORD: 'pw', POSTGRES_DB: 'shop' },
        healthcheck: {
          test: ['sh', '-c', 'pg_isready -U postgres'],
          intervalMs: 1000,
          timeoutMs: 2000,
          retries: 30,
          startPeriodMs: 90_000,
        },
        ports: [5432],
        data: ['/var/lib/postgresql/data'],
        dependsOn: [],
        limits: { cpus: 0.5, memoryBytes: 512 * 1024 ** 2 },
        source: `${COMPOSE} services.db`,
      },
      {
        name: 'cache',
        image: 'drydock-service-redis:8',
        environment: {},
        command: ['redis-server', '--save', '', '--appendonly', 'no'],
        ports: [6379],
        data: [],
        dependsOn: ['db'],
        limits: { memoryBytes: 1024 ** 3 },
        source: `${COMPOSE} services.cache`,
      },
    ]);
  });

  test('runServices picks the services that run', () => {
    const parsed = parseCompose(file, COMPOSE, { devService: 'app', runServices: ['db'] });
    expect(parsed.services.map((s) => s.name)).toEqual(['db']);
  });

  test.each([
    [
      '  db:\n    build: { context: ., ssh: [default] }\n',
      /services\.db\.build\.ssh: the isolated builder has no SSH agent/,
    ],
    [
      '  db:\n    image: x\n    networks: {back: {ipv4_address: 10.0.0.2}}\n',
      /services\.db\.networks\.back\.ipv4_address: every service shares the sandbox's loopback/,
    ],
    [
      '  db:\n    image: x\n    ports: ["15432:5432"]\n  db2:\n    image: x\n    expose: [5432]\n',
      /services\.db2\.ports: db2 listens on port 5432 as db does, and a sandbox's services share one loopback/,
    ],
    ['  db:\n    image: x\n    privileged: true\n', /services\.db\.privileged: services run without privileges/],
    ['  db:\n    image: x\n    cap_add: [NET_ADMIN]\n', /services\.db\.cap_add: /],
    [
      '  db:\n    image: x\n    volumes: ["../../etc:/etc"]\n',
      /services\.db\.volumes\.0: "\.\.\/\.\.\/etc" is a folder of the host outside the repository/,
    ],
    [
      '  db:\n    image: x\n    volumes: [{type: bind, source: /etc, target: /etc}]\n',
      /services\.db\.volumes\.0: "\/etc" is a folder of the host, which drydock never mounts/,
    ],
    [
      '  db:\n    image: x\n    env_file: db.env\n',
      /services\.db\.env_file: \.devcontainer\/db\.env is not in the repository/,
    ],
    [
      '  db:\n    image: x\n    network_mode: host\n',
      /services\.db\.network_mode: a sandbox never gets the host's network/,
    ],
    [
      '  db:\n    image: x\n    secrets: [nope]\n',
      /services\.db\.secrets\.0: nope is not declared in the file's top-level secrets/,
    ],
    ['  db:\n    image: x\n    user: root\n', /services\.db\.user: services never run as root/],
    ['  db:\n    image: x\n    deploy: { replicas: 2 }\n', /services\.db\.deploy: only deploy\.resources\.limits/],
    ['  db:\n    image: x\n    frobnicate: 1\n', /services\.db\.frobnicate: not supported by drydock/],
    ['  db:\n    image: Bad\n', /services\.db\.image: "Bad" is not an image reference/],
    ['  db:\n    environment: {}\n', /services\.db\.image: every service needs an image/],
    ['  db:\n    image: x\n    depends_on: [nope]\n', /services\.db\.depends_on|nope/],
  ])('refuses %j naming the field', (service, message) => {
    const text = `services:\n  app:\n    image: ${PG}\n${service}`;
    const problems = composeProblems(text);
    expect(problems.join('\n')).toMatch(message);
    for (const p of problems) expect(p.startsWith(`${COMPOSE}: `)).toBe(true);
  });

  test('a variable with no value is empty, and one the host would give is not set, as Compose does without them: each said in notes', () => {
    const text = `services:\n  app:\n    image: ${PG}\n  db:\n    image: x\n    environment: [PASSWORD, "A=$SECRET", "B=\${SET:-d}"]\n`;
    const parsed = parseCompose(text, COMPOSE, { devService: 'app' });
    expect(parsed.services[0].environment).toEqual({ A: '', B: 'd' });
    expect(parsed.notes).toEqual([
      `${COMPOSE}: services.db.environment.1: \${SECRET} has no value in the project's .env (nor an example of it), and drydock does not read the host's environment: empty, as Compose makes it without one (set it in .env to give one)`,
      `${COMPOSE}: services.db.environment.PASSWORD: PASSWORD has no value in the project's .env (nor an example of it), and drydock does not read the host's environment: not set, as Compose makes it without one (set it in .env to give one)`,
    ]);
    // ${VAR:?why} stays an error, as in Compose.
    expect(composeProblems(`${text}    working_dir: "\${TAG:?give a tag}"\n`).join('\n')).toMatch(
      /\$\{TAG\} is required: give a tag/,
    );
  });

  test('top-level include, external secrets and bad YAML are refused; the dev service must be in the file', () => {
    expect(composeProblems(`services:\n  app: {image: x}\nnetworks: {back: {driver: bridge}}\n`)).toEqual([]);
    expect(composeProblems(`services:\n  app: {image: x}\ninclude: [other.yaml]\n`)).toEqual([
      `${COMPOSE}: include: list the files in devcontainer.json's dockerComposeFile instead`,
    ]);
    expect(composeProblems(`services:\n  app: {image: x}\nsecrets: {key: {external: true}}\n`)[0]).toMatch(
      /secrets\.key: give file .* external ones are not on a sandbox's host/,
    );
    expect(composeProblems(`services:\n  app: {image: x}\nvolumes: {data: {external: true}}\n`)[0]).toMatch(
      /volumes\.data: only plain named volumes/,
    );
    expect(composeProblems('services: [\n')[0]).toMatch(/not valid YAML/);
    expect(composeProblems('services:\n  db: {image: x}\n')[0]).toMatch(/services\.app: the dev container's service/);
    expect(composeProblems('services:\n  app: {image: x}\n', ['db'])[0]).toMatch(
      /services\.db: named in runServices but not in the file/,
    );
  });

  test('command strings split as Compose splits them', () => {
    expect(shellWords(`redis-server --save "" --requirepass 'a b' x\\ y`)).toEqual([
      'redis-server',
      '--save',
      '',
      '--requirepass',
      'a b',
      'x y',
    ]);
  });
});

describe('devcontainer.json with a compose file and an app', () => {
  test('dockerComposeFile, service, runServices, forwardPorts and postStartCommand are read', () => {
    const env = parseDevcontainer(
      `{
        "dockerComposeFile": ["compose.yaml"],
        "service": "app",
        "runServices": ["db"],
        "forwardPorts": ["db:5432", 3000],
        "postStartCommand": "npm run dev",
        "postCreateCommand": "npm ci"
      }`,
      '.devcontainer/devcontainer.json',
    );
    expect(env).toMatchObject({
      compose: { files: ['.devcontainer/compose.yaml'], service: 'app', runServices: ['db'] },
      app: { start: 'npm run dev', port: 3000 },
      lifecycle: { postCreateCommand: 'npm ci' },
    });
  });

  test.each([
    ['{"dockerComposeFile": "c.yaml"}', /service: name the compose service/],
    ['{"dockerComposeFile": "c.yaml", "service": "app", "image": "x"}', /not more than one/],
    ['{"image": "x", "service": "app"}', /service needs dockerComposeFile/],
    [
      '{"dockerComposeFile": "../../c.yaml", "service": "app"}',
      /dockerComposeFile\.0 "\.\.\/\.\.\/c\.yaml" is outside/,
    ],
  ])('refuses %s naming the field', (text, message) => {
    expect(() => parseDevcontainer(text, '.devcontainer/devcontainer.json')).toThrow(message);
  });

  test('postStartCommand without a port of its own starts no app, and says so (never dropped in silence)', () => {
    const env = parseDevcontainer('{"image": "x", "postStartCommand": "git config x y"}', 'd.json');
    expect(env.app).toBeUndefined();
    expect(env.notes).toEqual([
      expect.stringMatching(
        /^d\.json: postStartCommand: not run: with no port of the dev container's own in forwardPorts/,
      ),
    ]);
  });
});

describe("a snapshot's recorded services (its drydock.snapshot.services label)", () => {
  const checked = config({
    services: {
      db: {
        image: PG,
        healthcheck: { test: 'pg_isready', interval: '500ms' },
        data: ['/var/lib/postgresql/data'],
        user: 'postgres',
        limits: { memory: '256m' },
      },
      cache: { image: 'drydock-service-redis:8', dependsOn: ['db'], ports: [6379] },
    },
  });
  if (!checked.ok) throw new Error(checked.problems.join('; '));
  const written = servicesOfConfig(checked.config.services!).map((s, n) =>
    n === 0 ? { ...s, dataImage: 'drydock-data-drydock-snap-x-1:db' } : s,
  );
  const read = (value: unknown) =>
    recordedServices('drydock-snap-x:1', {
      [SERVICES_LABEL]: typeof value === 'string' ? value : JSON.stringify(value),
    });

  test('what drydock writes is read back as it is; no label, no services', () => {
    expect(read(written)).toEqual(written);
    expect(read([])).toEqual([]);
    expect(recordedServices('drydock-snap-x:1', {})).toEqual([]);
  });

  test("a compose service's host names and files are part of the record", () => {
    const file = { target: '/docker-entrypoint-initdb.d/init.sql', source: 'db/init.sql', kind: 'file' as const };
    const composed = [
      {
        ...written[0],
        hostNames: ['database'],
        files: [file, { target: '/run/secrets/pw', source: 'secrets.pw', content: 'x' }],
      },
    ];
    expect(read(composed)).toEqual(composed);
    expect(() => read([{ ...composed[0], files: [{ ...file, target: '/etc/../root/x' }] }])).toThrow(
      /files.0.target: no ".."/,
    );
    expect(() => read([{ ...composed[0], hostNames: ['-x'] }])).toThrow(RecordedServicesInvalid);
  });

  test.each([
    ['not JSON', '[{', 'not JSON'],
    ['a field drydock never writes', [{ ...written[1], privileged: true }], '0: Unrecognized key: "privileged"'],
    ['root', [{ ...written[1], user: 'root' }], '0.user: services never run as root'],
    ['a name that is a path', [{ ...written[1], name: '../x' }], '0.name: lowercase letters'],
    ['an image id', [{ ...written[1], image: 'sha256:abc' }], '0.image: an image id, not a name'],
    ['not a list', { db: written[0] }, 'the list: '],
  ])('a label drydock did not write is refused (T4-M1): %s', (_what, value, why) => {
    expect(() => read(value)).toThrow(RecordedServicesInvalid);
    if (why) expect(() => read(value)).toThrow(`(${why}`);
    expect(() => read(value)).toThrow(
      /^snapshot drydock-snap-x:1: its drydock.snapshot.services label is not a record drydock wrote .*build a new snapshot/,
    );
  });
});

describe('a service that is not there any more while it starts', () => {
  const db: RunnableService = {
    name: 'db',
    image: 'postgres:17',
    environment: {},
    ports: [5432],
    data: [],
    dependsOn: [],
    limits: {},
    source: 'services.db',
  };
  const container: ServiceContainerSpec = {
    sandbox: 'sb',
    service: 'db',
    image: 'postgres:17',
    labels: {},
    env: [],
    folders: [],
    cpus: 1,
    memoryBytes: 512 * 1024 ** 2,
    pids: 256,
  };
  /** A provider whose service starts, then answers `state` with what each test gives. */
  const providerWith = (state: ServiceState | undefined) =>
    ({
      name: 'fake',
      services: {
        start: async () => undefined,
        state: async () => state,
        log: async () => 'the end of its log',
      },
    }) as unknown as SandboxProvider;

  test("gone (removed by a cut-off attempt's cleanup, say): the sandbox is lost, and provisioning makes it again", async () => {
    // Chaos seed 3038905507 (2026-12-07): a session failed with "service db exited with code ? before it was ready".
    await expect(startServices(providerWith(undefined), 'sb', [db], [container])).rejects.toThrow(SandboxNotFound);
  });

  test("exited: the repo's service failed, named with its exit code and its log", async () => {
    const exited = startServices(
      providerWith({ running: false, exitCode: 1, oomKilled: false }),
      'sb',
      [db],
      [container],
    );
    await expect(exited).rejects.toThrow(ServiceFailure);
    await expect(exited).rejects.toThrow(
      'service db exited with code 1 before it was ready; its log ends: the end of its log',
    );
  });
});
