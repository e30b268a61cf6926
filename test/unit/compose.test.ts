/**
 * Compose stacks as written (sandbox/compose.ts, sandbox/compose-variables.ts):
 * the project's .env and env_files, files of the repo, secrets and configs,
 * networks flattened onto the loopback with every name resolving to it,
 * several files merged, profiles; whatever drydock cannot honour is refused
 * naming the field.
 */
import { ComposeError, EXAMPLE_SUFFIXES, parseComposeFiles, readCompose } from '../../sandbox/compose';
import { parseEnvFile, substitute } from '../../sandbox/compose-variables';
import { declaredStack } from '../../sandbox/activities/services';
import { declaredEnvironment } from '../../sandbox/activities/environment';
import { linkSteps, parseDevcontainer, remoteEnvIn } from '../../sandbox/repo-image';

const DIR = '.devcontainer';
const COMPOSE = `${DIR}/compose.yaml`;
const PG = 'drydock-service-postgres:17';

/** The stack of `files` (path → text; the first key is the compose file), or its problems. */
function stack(files: Record<string, string>, opts: { runServices?: string[]; composeFiles?: string[] } = {}) {
  const composeFiles = opts.composeFiles ?? [Object.keys(files)[0]];
  return parseComposeFiles(composeFiles, (f) => files[f], {
    devService: 'app',
    ...(opts.runServices ? { runServices: opts.runServices } : {}),
  });
}
function problems(files: Record<string, string>, opts: { runServices?: string[]; composeFiles?: string[] } = {}) {
  try {
    stack(files, opts);
    return [];
  } catch (err) {
    if (!(err instanceof ComposeError)) throw err;
    return err.problems;
  }
}

describe('variables: .env and env_file as Compose reads them', () => {
  test('every form of ${…} substitutes from the variables, nested defaults too', () => {
    const vars = new Map([
      ['SET', 'x'],
      ['EMPTY', ''],
    ]);
    const found: string[] = [];
    const sub = (t: string) => substitute(t, (n) => vars.get(n), 'f', found);
    expect(sub('$SET ${SET} $$SET ${UNSET:-d} ${EMPTY:-d} ${EMPTY-d} ${UNSET-${SET}}')).toBe('x x $SET d d  x');
    expect(sub('${SET:+yes}|${EMPTY:+yes}|${EMPTY+yes}|${UNSET+yes}')).toBe('yes||yes|');
    expect(found).toEqual([]);
    sub('${UNSET:?give the password}');
    sub('${NOPE}');
    expect(found).toEqual([
      'f: ${UNSET} is required: give the password (set it in .env)',
      expect.stringMatching(/^f: \$\{NOPE\} has no value in the project's \.env, and drydock does not read the host's/),
    ]);
  });

  test('.env lines: export, quotes, escapes, comments, earlier variables, values over lines', () => {
    const found: string[] = [];
    const text = [
      '# a comment',
      'export USER=app',
      'PASS = s3cret # not part of it',
      "LITERAL='${USER} stays'",
      'DOUBLE="line\\none ${USER}"',
      'URL=postgres://${USER}:${PASS}@db:5432/${DB:-shop}',
      'MULTI="a',
      'b"',
      'EMPTY=',
      '',
    ].join('\n');
    expect(Object.fromEntries(parseEnvFile(text, '.env', found))).toEqual({
      USER: 'app',
      PASS: 's3cret',
      LITERAL: '${USER} stays',
      DOUBLE: 'line\none app',
      URL: 'postgres://app:s3cret@db:5432/shop',
      MULTI: 'a\nb',
      EMPTY: '',
    });
    expect(found).toEqual([]);
    parseEnvFile('FROM_HOST\nBAD NAME=1\nOPEN="x\n', 'db.env', found);
    expect(found).toEqual([
      expect.stringMatching(/^db\.env:1: "FROM_HOST" has no value, and drydock does not read the host's environment/),
      expect.stringMatching(/^db\.env:2: /),
      'db.env:3: OPEN\'s value has no closing "',
    ]);
  });

  test("the project's .env fills ${VAR} in the file, and env_file (the project's variables in it) sets a service's environment", () => {
    const parsed = stack({
      [COMPOSE]: [
        'services:',
        '  app: { image: "${BASE_IMAGE}", env_file: app.env }',
        '  db:',
        '    image: ${PG_IMAGE}',
        '    env_file: [db.env, { path: missing.env, required: false }]',
        '    environment: { POSTGRES_DB: "${DB_NAME:-shop}", POSTGRES_USER: from-environment }',
      ].join('\n'),
      [`${DIR}/.env`]: `BASE_IMAGE=drydock-sandbox-base\nPG_IMAGE=${PG}\nDB_NAME=orders\n`,
      [`${DIR}/db.env`]:
        'POSTGRES_PASSWORD=pw\nPOSTGRES_USER=from-file\nPOSTGRES_INITDB_ARGS="--auth=${AUTH:-trust}"\n',
      [`${DIR}/app.env`]: 'DATABASE_URL=postgres://postgres:pw@db:5432/${DB_NAME}\n',
    });
    expect(parsed.dev).toMatchObject({
      image: 'drydock-sandbox-base',
      environment: { DATABASE_URL: 'postgres://postgres:pw@db:5432/orders' },
    });
    expect(parsed.services[0]).toMatchObject({
      name: 'db',
      image: PG,
      environment: {
        POSTGRES_PASSWORD: 'pw',
        POSTGRES_USER: 'from-environment',
        POSTGRES_INITDB_ARGS: '--auth=trust',
        POSTGRES_DB: 'orders',
      },
    });
  });

  test('readCompose reads what the files name, an env_file named through .env included', async () => {
    const files: Record<string, string> = {
      [COMPOSE]: `services:\n  app: { image: x }\n  db: { image: ${PG}, env_file: "\${DB_ENV}" }\n`,
      [`${DIR}/.env`]: 'DB_ENV=config/db.env\n',
      [`${DIR}/config/db.env`]: 'POSTGRES_PASSWORD=pw\n',
    };
    const read: string[] = [];
    const parsed = await readCompose([COMPOSE], (f) => (read.push(f), Promise.resolve(files[f])), {
      devService: 'app',
    });
    expect(parsed.services[0].environment).toEqual({ POSTGRES_PASSWORD: 'pw' });
    // Each file named, and the examples tried in its stead until it was known (.env.example…): nothing else.
    expect(read).toEqual(expect.arrayContaining(Object.keys(files)));
    const named = (f: string) => Object.keys(files).some((n) => f === n || EXAMPLE_SUFFIXES.some((s) => f === n + s));
    expect(read.filter((f) => !named(f))).toEqual([]);
  });

  test('a .env or env_file the repo does not hold (gitignored) is read from the example it commits', () => {
    const parsed = stack({
      [COMPOSE]: [
        'services:',
        '  app: { image: x }',
        '  db: { image: "${PG_IMAGE}", env_file: [db.env, .env] }',
        '  cache: { image: "${PG_IMAGE}", env_file: cache.env }',
      ].join('\n'),
      [`${DIR}/.env.example`]: `PG_IMAGE=${PG}\nPOSTGRES_DB=shop\n`,
      [`${DIR}/db.env.sample`]: 'POSTGRES_PASSWORD=example\n',
      // The file itself wins over its example.
      [`${DIR}/cache.env`]: 'FROM=file\n',
      [`${DIR}/cache.env.example`]: 'FROM=example\n',
    });
    const byName = Object.fromEntries(parsed.services.map((s) => [s.name, s]));
    expect(byName.db.image).toBe(PG);
    expect(byName.db.environment).toEqual({ POSTGRES_PASSWORD: 'example', PG_IMAGE: PG, POSTGRES_DB: 'shop' });
    expect(byName.cache.environment).toEqual({ FROM: 'file' });
  });

  test('an env_file with neither the file nor an example is refused, naming the field and the examples looked for', () => {
    expect(() =>
      stack({ [COMPOSE]: 'services:\n  app: { image: x }\n  db: { image: x, env_file: secrets.env }\n' }),
    ).toThrow(
      /services\.db\.env_file: \.devcontainer\/secrets\.env is not in the repository, nor an example of it \(secrets\.env\.example, .*\): commit one, or mark it required: false/,
    );
  });
});

describe('files of the repo, secrets and configs', () => {
  test('bind mounts of the repo, secrets and configs become read-only files of the service', () => {
    const parsed = stack({
      [COMPOSE]: [
        'services:',
        '  app: { image: x }',
        '  db:',
        `    image: ${PG}`,
        '    volumes:',
        '      - ./init.sql:/docker-entrypoint-initdb.d/init.sql:ro',
        '      - ../config/pg_hba.conf:/etc/postgresql/pg_hba.conf',
        '      - { type: bind, source: ./seeds, target: /seeds }',
        '      - pgdata:/var/lib/postgresql/data',
        '    secrets: [db_password, { source: api_key, target: key.txt, mode: 0400 }]',
        '    configs: [{ source: app_config, target: /etc/app.json }, inline]',
        'volumes: { pgdata: {} }',
        'secrets:',
        '  db_password: { file: ./secrets/db_password.txt }',
        '  api_key: { environment: API_KEY }',
        'configs:',
        '  app_config: { file: ../app.json }',
        '  inline: { content: "hello ${WHO:-world}" }',
      ].join('\n'),
      [`${DIR}/.env`]: 'API_KEY=k-123\n',
    });
    const [db] = parsed.services;
    expect(db.data).toEqual(['/var/lib/postgresql/data']);
    expect(db.files).toEqual([
      { target: '/docker-entrypoint-initdb.d/init.sql', source: `${DIR}/init.sql` },
      { target: '/etc/postgresql/pg_hba.conf', source: 'config/pg_hba.conf' },
      { target: '/seeds', source: `${DIR}/seeds` },
      { target: '/run/secrets/db_password', source: `${DIR}/secrets/db_password.txt`, mode: 0o444 },
      { target: '/run/secrets/key.txt', source: `${COMPOSE} secrets.api_key`, content: 'k-123', mode: 0o400 },
      { target: '/etc/app.json', source: 'app.json', mode: 0o444 },
      { target: '/inline', source: `${COMPOSE} configs.inline`, content: 'hello world', mode: 0o444 },
    ]);
  });

  test.each([
    [
      'volumes: ["../../outside:/x"]',
      /services\.db\.volumes\.0: "\.\.\/\.\.\/outside" is a folder of the host outside the repository/,
    ],
    ['volumes: ["/var/run/docker.sock:/var/run/docker.sock"]', /services\.db\.volumes\.0: .* is a folder of the host/],
    ['volumes: ["~/.ssh:/root/.ssh"]', /services\.db\.volumes\.0: .* is a folder of the host/],
    ['secrets: [{ source: s, uid: "0" }]', /services\.db\.secrets\.0\.uid: drydock mounts secrets readable/],
    ['configs: [missing]', /services\.db\.configs\.0: missing is not declared in the file's top-level configs/],
  ])('refuses %s naming the field', (line, message) => {
    const found = problems({
      [COMPOSE]: `services:\n  app: { image: x }\n  db:\n    image: ${PG}\n    ${line}\nsecrets: { s: { file: s.txt } }\n`,
    });
    expect(found.join('\n')).toMatch(message);
  });

  test('a secret or config file outside the repository is refused naming it', () => {
    expect(problems({ [COMPOSE]: 'services:\n  app: { image: x }\nsecrets: { s: { file: ../../s.txt } }\n' })).toEqual([
      `${COMPOSE}: secrets.s.file: "../../s.txt" is outside the repository`,
    ]);
  });
});

describe('networks and names', () => {
  test('networks are flattened; every name a service is reached by resolves on the loopback', () => {
    const parsed = stack({
      [COMPOSE]: [
        'services:',
        '  app:',
        '    image: x',
        '    networks: { front: { aliases: [web] } }',
        '    links: ["db:database"]',
        '  db:',
        `    image: ${PG}`,
        '    container_name: shop-db',
        '    networks: { back: { aliases: [postgres, pg.local] }, front: null }',
        '  cache:',
        '    image: drydock-service-redis:8',
        '    network_mode: service:db',
        '    networks: [back]',
        'networks: { front: {}, back: { driver: bridge, internal: true } }',
      ].join('\n'),
    });
    expect(parsed.dev.hostNames).toEqual(['app', 'web']);
    expect(parsed.services.map((s) => [s.name, s.hostNames])).toEqual([
      ['db', ['database', 'pg.local', 'postgres', 'shop-db']],
      ['cache', undefined],
    ]);
  });
});

describe('ports: each service at its container port on the shared loopback', () => {
  test('where Compose publishes a port (another number, a host address, a variable with no value) means nothing here', () => {
    const parsed = stack({
      [COMPOSE]: [
        'services:',
        '  app: { image: x, ports: ["8080:3000"] }',
        '  db:',
        `    image: ${PG}`,
        '    ports: ["15432:5432", "127.0.0.1:${DB_PORT}:5432/tcp", {target: 5432, published: 1, host_ip: 0.0.0.0}]',
        '  cache:',
        '    image: drydock-service-redis:8',
        '    ports: ["[::1]:${REDIS_PORT:-16379}:6379", "8001"]',
        '    expose: [6380]',
      ].join('\n'),
    });
    expect(parsed.services.map((s) => [s.name, s.ports])).toEqual([
      ['db', [5432]],
      ['cache', [6379, 8001, 6380]],
    ]);
  });

  test('a variable in the container port still needs a value, named', () => {
    expect(
      problems({ [COMPOSE]: 'services:\n  app: { image: x }\n  db: { image: x, ports: ["5432:${PORT}"] }\n' }),
    ).toEqual([
      `${COMPOSE}: services.db.ports.0: \${PORT} has no value in the project's .env, and drydock does not read the host's environment: set it in .env, or write \${PORT:-value}`,
    ]);
  });

  test('two services on one container port are refused, naming both; the dev service counts unless it is in another namespace', () => {
    const clash = (app: string) =>
      problems({
        [COMPOSE]: [
          'services:',
          `  app: { image: x${app} }`,
          `  web: { image: ${PG}, ports: ["8081:80"] }`,
          `  admin: { image: ${PG}, ports: ["8082:80", "3000"] }`,
        ].join('\n'),
      });
    const both =
      "and a sandbox's services share one loopback, where each is reached at its container port: move one to another port (its command or environment), or leave it out (profiles, runServices)";
    expect(clash('')).toEqual([`${COMPOSE}: services.admin.ports: admin listens on port 80 as web does, ${both}`]);
    expect(clash(', ports: ["3000:3000"]')).toEqual([
      `${COMPOSE}: services.admin.ports: admin listens on port 3000 as app does, ${both}`,
      `${COMPOSE}: services.admin.ports: admin listens on port 80 as web does, ${both}`,
    ]);
    expect(clash(', ports: ["3000"], network_mode: service:web')).toHaveLength(1);
  });
});

describe('several files, profiles, runServices', () => {
  test('a second file is merged into the first as docker compose -f a -f b does', () => {
    const parsed = stack(
      {
        [COMPOSE]: [
          'services:',
          '  app: { image: x }',
          '  db:',
          `    image: ${PG}`,
          '    command: [postgres, -c, fsync=off]',
          '    environment: [POSTGRES_PASSWORD=pw, POSTGRES_DB=a]',
          '    volumes: ["./a.sql:/docker-entrypoint-initdb.d/a.sql"]',
          '    ports: [5432]',
        ].join('\n'),
        [`${DIR}/compose.override.yaml`]: [
          'services:',
          '  db:',
          '    command: [postgres, -c, log_statement=all]',
          '    environment: { POSTGRES_DB: b }',
          '    volumes: ["./b.sql:/docker-entrypoint-initdb.d/a.sql", "./c.sql:/docker-entrypoint-initdb.d/c.sql"]',
          '  cache: { image: drydock-service-redis:8 }',
        ].join('\n'),
      },
      { composeFiles: [COMPOSE, `${DIR}/compose.override.yaml`] },
    );
    const [db, cache] = parsed.services;
    expect(db).toMatchObject({
      command: ['postgres', '-c', 'log_statement=all'],
      environment: { POSTGRES_PASSWORD: 'pw', POSTGRES_DB: 'b' },
      ports: [5432],
      files: [
        { target: '/docker-entrypoint-initdb.d/a.sql', source: `${DIR}/b.sql` },
        { target: '/docker-entrypoint-initdb.d/c.sql', source: `${DIR}/c.sql` },
      ],
      source: `${COMPOSE} services.db`,
    });
    expect(cache.source).toBe(`${DIR}/compose.override.yaml services.cache`);
  });

  test('a compose file not in the repository is named', () => {
    expect(
      problems({ [COMPOSE]: 'services:\n  app: { image: x }\n' }, { composeFiles: [COMPOSE, 'nope.yaml'] }),
    ).toEqual(['nope.yaml: not in the repository (named in dockerComposeFile)']);
  });

  const profiled = {
    [COMPOSE]: [
      'services:',
      '  app: { image: x, depends_on: [db] }',
      `  db: { image: ${PG}, profiles: [storage] }`,
      '  cache: { image: drydock-service-redis:8 }',
      '  debug: { image: drydock-service-redis:8, profiles: [debug] }',
      '  mail: { image: drydock-service-redis:8, profiles: [mail] }',
    ].join('\n'),
  };
  test('a service whose profiles are not active is left out, unless something that runs depends on it', () => {
    expect(stack(profiled).services.map((s) => s.name)).toEqual(['db', 'cache']);
    expect(
      stack({ ...profiled, [`${DIR}/.env`]: 'COMPOSE_PROFILES=debug,mail\n' }).services.map((s) => s.name),
    ).toEqual(['db', 'cache', 'debug', 'mail']);
  });

  test('runServices names what runs, whatever its profile, with what it depends on', () => {
    const parsed = stack(
      {
        [COMPOSE]: [
          'services:',
          '  app: { image: x }',
          `  db: { image: ${PG}, profiles: [storage] }`,
          '  api: { image: drydock-service-redis:8, profiles: [debug], depends_on: { db: { condition: service_healthy } } }',
          '  other: { image: drydock-service-redis:8 }',
        ].join('\n'),
      },
      { runServices: ['api'] },
    );
    expect(parsed.services.map((s) => [s.name, s.dependsOn])).toEqual([
      ['db', []],
      ['api', ['db']],
    ]);
  });
});

describe('the dev service', () => {
  const dev = (lines: string) => problems({ [COMPOSE]: `services:\n  app:\n    image: x\n${lines}` });

  test('what dev container templates write is honoured: keep-alive command, the repo mounted, network_mode service:', () => {
    expect(
      dev(
        [
          '    command: sleep infinity',
          '    volumes: ["../..:/workspaces:cached", "..:/workspace"]',
          '    network_mode: service:db',
          '    user: node',
          '    ports: [3000]',
          `  db: { image: ${PG} }`,
          '',
        ].join('\n'),
      ),
    ).toEqual([]);
    expect(dev(`    command: /bin/sh -c "while sleep 1000; do :; done"\n`)).toEqual([]);
    expect(dev(`    command: >\n      bash -lc "\n        exec sleep infinity\n      "\n`)).toEqual([]);
    expect(dev(`    deploy: { resources: { limits: { cpus: "2", memory: 4g } } }\n`)).toEqual([]);
    // A volume keeps a folder of the container, as a sandbox keeps its folders in its snapshot; a healthcheck waits on nothing here.
    const kept = '    volumes: [node_modules:/workspace/node_modules, /cache, {type: tmpfs, target: /tmp/x}]\n';
    expect(dev(`${kept}    healthcheck: { test: [CMD, "true"] }\n`)).toEqual([]);
    // ... each a writable folder of the sandbox (repo-image.ts volumesOf keeps those outside /workspace, home and /tmp).
    expect(stack({ [COMPOSE]: `services:\n  app:\n    image: x\n${kept}` }).dev.volumes).toEqual([
      '/workspace/node_modules',
      '/cache',
      '/tmp/x',
    ]);
  });

  test("the dev service's working_dir is where its app starts (a sandbox's other commands start in the workspace)", async () => {
    expect(dev('    working_dir: /workspace/src\n')).toEqual([]);
    const devcontainer = JSON.stringify({ dockerComposeFile: 'compose.yaml', service: 'app' });
    const files: Record<string, string> = {
      '.devcontainer/devcontainer.json': devcontainer,
      [COMPOSE]:
        'services:\n  app:\n    image: x\n    working_dir: /app\n    command: npm start\n    ports: ["3000"]\n',
    };
    const env = parseDevcontainer(devcontainer, '.devcontainer/devcontainer.json');
    const { stack: declared } = await declaredStack((f) => Promise.resolve(files[f]), env, undefined);
    expect(declared.app).toMatchObject({ start: 'cd /app && npm start', port: 3000 });
  });

  test("the repo's root mounted at /workspace is the sandbox's /workspace, written ../ or .. alike", () => {
    for (const source of ['..', '../', '../.', '..//']) {
      expect(dev(`    volumes: ["${source}:/workspace:cached"]\n`)).toEqual([]);
    }
    // A folder of it there is not: /workspace is the repo's root.
    expect(dev('    volumes: ["../src/:/workspace"]\n')).toEqual([
      `${COMPOSE}: services.app.volumes.0: "../src/" is in the repository, and /workspace is in (or holds) the sandbox's own /workspace or /home/drydock or /tmp: read the repository at /workspace`,
    ]);
  });

  test("several files: every file's paths start from the first file's folder, as Compose reads them", () => {
    // VS Code's "extend your compose file" layout: the repo's compose file, then .devcontainer's override.
    const files: Record<string, string> = {
      'docker-compose.yml':
        'services:\n  app:\n    build: .\n  db:\n    image: x\n    volumes: ["./init.sql:/docker-entrypoint-initdb.d/init.sql"]\n',
      [`${DIR}/docker-compose.yml`]:
        'services:\n  app:\n    build: { context: ., dockerfile: .devcontainer/Dockerfile }\n    volumes: [".:/workspace:cached"]\n    command: sleep infinity\n',
    };
    const parsed = stack(files, { composeFiles: ['docker-compose.yml', `${DIR}/docker-compose.yml`] });
    expect(parsed.dev).toMatchObject({ dockerfile: '.devcontainer/Dockerfile', context: '' });
    expect(parsed.dev.links).toBeUndefined();
    expect(parsed.services[0].files).toMatchObject([{ source: 'init.sql' }]);
  });

  test("a top-level volume's name and labels name the engine's volume, nothing a sandbox needs; driver options refused", () => {
    const volumes = '    volumes: [data:/data]\nvolumes:\n';
    expect(dev(`${volumes}  data:\n    name: my-data\n    labels: { a: b }\n`)).toEqual([]);
    expect(dev(`${volumes}  data:\n    driver_opts: { type: none, o: bind, device: /srv }\n`)).toEqual([
      `${COMPOSE}: volumes.data: only plain named volumes are supported (no driver options, no external)`,
    ]);
  });

  test('a folder or file of the repo the dev service mounts elsewhere is a link to its place in /workspace', async () => {
    const files: Record<string, string> = {
      '.devcontainer/devcontainer.json': JSON.stringify({ dockerComposeFile: 'compose.yaml', service: 'app' }),
      [COMPOSE]:
        'services:\n  app:\n    image: x\n    volumes: ["../backend:/app", "./app.ini:/etc/app/app.ini:ro", "..:/srv/repo"]\n',
    };
    const env = parseDevcontainer(files['.devcontainer/devcontainer.json'], '.devcontainer/devcontainer.json');
    const { environment } = await declaredStack((f) => Promise.resolve(files[f]), env, undefined);
    expect(environment?.links).toEqual([
      { path: '/app', to: '/workspace/backend' },
      { path: '/etc/app/app.ini', to: '/workspace/.devcontainer/app.ini' },
      { path: '/srv/repo', to: '/workspace' },
    ]);
    // Made as root in drydock's layer by the builder, replacing what the image has there as a bind mount hides it.
    expect(linkSteps(environment!.links!.slice(0, 2))).toEqual([
      'USER root',
      'RUN ["/bin/sh","-c","rm -rf /app && mkdir -p / && ln -s /workspace/backend /app && ' +
        'rm -rf /etc/app/app.ini && mkdir -p /etc/app && ln -s /workspace/.devcontainer/app.ini /etc/app/app.ini"]',
    ]);
  });

  test("the dev service's named volumes become the environment's VOLUMEs, those in /workspace excepted", async () => {
    const files: Record<string, string> = {
      '.devcontainer/devcontainer.json': JSON.stringify({ dockerComposeFile: 'compose.yaml', service: 'app' }),
      [COMPOSE]:
        'services:\n  app:\n    image: x\n    volumes: [nm:/workspace/node_modules, history:/commandhistory]\n',
    };
    const env = parseDevcontainer(files['.devcontainer/devcontainer.json'], '.devcontainer/devcontainer.json');
    const { environment } = await declaredStack((f) => Promise.resolve(files[f]), env, undefined);
    expect(environment?.volumes).toEqual(['/commandhistory']);
  });

  test("a healthcheck's retries written as a string is the number Compose casts it to", () => {
    const parsed = stack({
      [COMPOSE]: `services:\n  app: { image: x }\n  db:\n    image: ${PG}\n    healthcheck: { test: [CMD, pg_isready], retries: '3', timeout: 5s }\n`,
    });
    expect(parsed.services[0].healthcheck).toMatchObject({ test: ['pg_isready'], retries: 3, timeoutMs: 5000 });
  });

  test("Compose Watch's develop (syncing a developer's edits into a container) means nothing in a sandbox", () => {
    const develop = '    develop: { watch: [{ action: sync, path: ./src, target: /app/src }] }\n';
    expect(
      problems({ [COMPOSE]: `services:\n  app:\n    image: x\n${develop}  db:\n    image: x\n${develop}` }),
    ).toEqual([]);
  });

  test("the dev service's own command on a port it declares is the repo's app (postStartCommand wins)", async () => {
    const devcontainer = { dockerComposeFile: 'compose.yaml', service: 'app' };
    const files: Record<string, string> = {
      '.devcontainer/devcontainer.json': JSON.stringify(devcontainer),
      [COMPOSE]: 'services:\n  app:\n    image: x\n    command: [npm, run, "dev server"]\n    ports: ["8000:3000"]\n',
    };
    const env = parseDevcontainer(files['.devcontainer/devcontainer.json'], '.devcontainer/devcontainer.json');
    const { stack: declared } = await declaredStack((f) => Promise.resolve(files[f]), env, undefined);
    expect(declared.app).toEqual({
      start: "npm run 'dev server'",
      port: 3000,
      readyPath: '/',
      readyTimeoutMs: 60_000,
      source: '.devcontainer/devcontainer.json (.devcontainer/compose.yaml) services.app.command',
    });
    const withPostStart = JSON.stringify({ ...devcontainer, postStartCommand: 'make serve', forwardPorts: [9000] });
    const own = parseDevcontainer(withPostStart, '.devcontainer/devcontainer.json');
    const { stack: theirs } = await declaredStack((f) => Promise.resolve(files[f]), own, undefined);
    expect(theirs.app).toMatchObject({ start: 'make serve', port: 9000 });
  });

  test("the dev service's entrypoint (and its command as the entrypoint's arguments) on a port it declares is the app", async () => {
    const devcontainer = JSON.stringify({ dockerComposeFile: 'compose.yaml', service: 'app' });
    const files: Record<string, string> = {
      '.devcontainer/devcontainer.json': devcontainer,
      [COMPOSE]:
        'services:\n  app:\n    image: x\n    entrypoint: /app/entrypoint.sh\n    command: [serve, "--port", "8000"]\n    ports: ["8000:8000"]\n',
    };
    const env = parseDevcontainer(devcontainer, '.devcontainer/devcontainer.json');
    const { stack: declared } = await declaredStack((f) => Promise.resolve(files[f]), env, undefined);
    expect(declared.app).toMatchObject({
      start: '/app/entrypoint.sh serve --port 8000',
      port: 8000,
      source: '.devcontainer/devcontainer.json (.devcontainer/compose.yaml) services.app.entrypoint',
    });
  });

  test("long sleeps with a unit keep the dev container running (VS Code's templates), as drydock's keeper does", () => {
    for (const command of [
      '/bin/sh -c "while sleep 10000d; do :; done"',
      '["sleep", "1000d"]',
      'sleep 3600s',
      'bash -c "exec sleep infinity"',
      'sh -c "tail -f /dev/null"',
    ])
      expect(dev(`    command: ${command}\n`)).toEqual([]);
    // A short sleep ends, and the dev container with it: not a keep-alive.
    expect(dev('    command: sleep 5m\n').join('\n')).toMatch(
      /services\.app\.command: a sandbox runs drydock's keeper/,
    );
  });

  test("start-up work before the dev container's keep-alive is refused, naming it (the keeper does not do it)", () => {
    expect(
      dev('    command: /bin/sh -c "chown -R app /data && while sleep 1000; do :; done"\n    ports: [8000]\n'),
    ).toEqual([
      `${COMPOSE}: services.app.command: "chown -R app /data" runs before the dev container's keep-alive, and a sandbox ` +
        "runs drydock's keeper instead: put that work in postCreateCommand (run as the sandbox user), or remove it",
    ]);
    expect(dev('    entrypoint: /docker-entrypoint.sh\n    command: sleep infinity\n    ports: [8000]\n')).toEqual([
      `${COMPOSE}: services.app.entrypoint: "/docker-entrypoint.sh" runs before the dev container's keep-alive, and a sandbox ` +
        "runs drydock's keeper instead: put that work in postCreateCommand (run as the sandbox user), or remove it",
    ]);
  });

  test("the dev service's user root is not given (a sandbox runs as uid 1000): said in a note, not refused", () => {
    const parsed = stack({ [COMPOSE]: 'services:\n  app:\n    image: x\n    user: "0:0"\n' });
    expect(parsed.notes).toEqual([
      `${COMPOSE}: services.app.user: root is not given: a sandbox runs as the sandbox user (uid 1000), and so do the lifecycle commands; ` +
        'what needs root goes in the Dockerfile, a feature or setup.root (run as root in the isolated builder)',
    ]);
  });

  test('a command on ports whose variable has no value is refused once, for the ports', () => {
    const found = dev('    command: npm start\n    ports: ["${PORT}:${PORT}"]\n');
    expect(found).toHaveLength(1);
    expect(found[0]).toMatch(/services\.app\.ports\.0: \$\{PORT\} has no value in the project's \.env/);
  });

  test("network_mode host is refused for what it is, and the command's port still makes it the app", () => {
    expect(dev('    network_mode: host\n    command: npm start\n    ports: ["7344:7344"]\n')).toEqual([
      `${COMPOSE}: services.app.network_mode: a sandbox never gets the host's network (its services share the sandbox's loopback): remove it`,
    ]);
  });

  test.each([
    [
      '    command: npm run dev\n',
      /services\.app\.command: a sandbox runs drydock's keeper.*the dev service's command is its app only on the port/,
    ],
    [
      '    entrypoint: [/start.sh]\n',
      /services\.app\.entrypoint: a sandbox runs drydock's keeper.*entrypoint and command are its app only on the port/,
    ],
    [
      '    volumes: ["/home/me/.ssh:/home/node/.ssh"]\n',
      /services\.app\.volumes\.0: a folder of the host, which a sandbox never mounts/,
    ],
    [
      '    volumes: ["./src:/workspace/src2"]\n',
      /services\.app\.volumes\.0: ".\/src" is in the repository, and \/workspace\/src2 is in \(or holds\) the sandbox's own/,
    ],
    [
      '    volumes: ["./x:/home"]\n',
      /services\.app\.volumes\.0: "\.\/x" is in the repository, and \/home is in \(or holds\)/,
    ],
    [
      '    volumes: ["./x:/usr"]\n',
      /services\.app\.volumes\.0: "\.\/x" is in the repository, and \/usr is a system folder/,
    ],
    ['    volumes: ["/var/run/docker.sock:/var/run/docker.sock"]\n', /services\.app\.volumes\.0: /],
    ['    secrets: [s]\n', /services\.app\.secrets: not supported by drydock for the dev container/],
    ['    working_dir: src\n', /services\.app\.working_dir: "src": an absolute path/],
    ['    working_dir: /a/../etc\n', /services\.app\.working_dir: "\/a\/..\/etc": an absolute path .*without "\.\."/],
    ['    volumes: ["data:/usr"]\n', /services\.app\.volumes\.0: \/usr is a system folder of the sandbox's image/],
    ['    privileged: true\n', /services\.app\.privileged: services run without privileges/],
    ['    network_mode: host\n', /services\.app\.network_mode: a sandbox never gets the host's network/],
    ['    network_mode: bridge\n', /services\.app\.network_mode: every service shares the sandbox's loopback/],
    [
      '    deploy: { resources: { reservations: { devices: [{ driver: nvidia, capabilities: [gpu] }] } } }\n',
      /services\.app\.deploy: resources\.reservations\.devices: a sandbox and its services get no host devices \(GPUs\)/,
    ],
    [
      '    security_opt: [seccomp:unconfined]\n',
      /services\.app\.security_opt\.0: "seccomp:unconfined": services run under/,
    ],
  ])('refuses %j naming the field', (lines, message) => {
    expect(dev(lines).join('\n')).toMatch(message);
  });

  test("what drydock does already (no new privileges, capabilities dropped) and the dev service's own limits are accepted", () => {
    const hardened = '    security_opt: ["no-new-privileges:true"]\n    cap_drop: [ALL]\n';
    expect(dev(`${hardened}    mem_limit: 2g\n    cpus: 2\n    pids_limit: 100\n`)).toEqual([]);
    expect(dev(`  db:\n    image: ${PG}\n${hardened}`)).toEqual([]);
    expect(dev(`  db:\n    image: ${PG}\n    security_opt: [no-new-privileges, "apparmor:unconfined"]\n`)).toEqual([
      `${COMPOSE}: services.db.security_opt.1: "apparmor:unconfined": services run under drydock's security options (no new privileges, Docker's seccomp profile): remove it`,
    ]);
  });
});

describe('devcontainer.json: remoteEnv, mounts and runArgs honoured or refused by name', () => {
  const dc = (extra: object) =>
    parseDevcontainer(JSON.stringify({ image: 'drydock-sandbox-base', ...extra }), '.devcontainer/devcontainer.json');

  test("remoteEnv is every step's environment, ${containerEnv:…} read from the sandbox's", () => {
    const env = dc({
      remoteEnv: {
        PATH: '${containerEnv:PATH}:/workspace/bin',
        ROOT: '${containerWorkspaceFolder}/src',
        MODE: '${localEnv:MODE:test}',
        NONE: '${containerEnv:UNSET}',
      },
    });
    expect(remoteEnvIn(env.remoteEnv!, ['PATH=/usr/bin', 'HOME=/home/drydock', 'PATH=/opt/node/bin:/usr/bin'])).toEqual(
      ['PATH=/opt/node/bin:/usr/bin:/workspace/bin', 'ROOT=/workspace/src', 'MODE=test', 'NONE='],
    );
  });

  test('${localEnv:NAME} with no default is empty, as the Dev Container CLI makes an unset one, said in a note', () => {
    const env = dc({
      remoteEnv: {
        TOKEN: '${localEnv:TOKEN}',
        HERE: '${localWorkspaceFolder}/bin',
        NAME: '${localWorkspaceFolderBasename}',
      },
      containerEnv: { KEY: 'k-${localEnv:KEY}', TZ: '${localEnv:TZ:UTC}', PATH: '${PATH}:${containerWorkspaceFolder}' },
    });
    // The worker's own environment is never read: a sandbox has no developer's machine.
    expect(remoteEnvIn(env.remoteEnv!, [])).toEqual(['TOKEN=', 'HERE=/workspace/bin', 'NAME=workspace']);
    expect(env.containerEnv).toEqual({ KEY: 'k-', TZ: 'UTC', PATH: '${PATH}:/workspace' });
    expect(env.notes).toEqual([
      expect.stringMatching(
        /^\.devcontainer\/devcontainer\.json: containerEnv\.KEY: \$\{localEnv:KEY\} is empty, as the Dev Container CLI/,
      ),
      expect.stringMatching(/^\.devcontainer\/devcontainer\.json: remoteEnv\.TOKEN: \$\{localEnv:TOKEN\} is empty/),
    ]);
  });

  test('a mount of the repo at ${localWorkspaceFolder} is where the sandbox has it: /workspace', () => {
    const env = dc({
      mounts: [
        { source: '${localWorkspaceFolder}', target: '${localWorkspaceFolder}', type: 'bind' },
        'source=${localWorkspaceFolder}/src,target=${localWorkspaceFolder}/src,type=bind',
      ],
    });
    expect(env.links).toBeUndefined();
  });

  test('remoteUser root is not given (a sandbox runs as uid 1000), said in a note; features are told the sandbox user', () => {
    for (const user of ['root', '0']) {
      const env = dc({ remoteUser: user });
      expect(env.remoteUser).toBeUndefined();
      expect(env.notes).toEqual([
        `.devcontainer/devcontainer.json: remoteUser: root is not given: a sandbox runs as the sandbox user (uid 1000), and so do the lifecycle commands; ` +
          'what needs root goes in the Dockerfile, a feature or setup.root (run as root in the isolated builder)',
      ]);
    }
    expect(dc({ remoteUser: 'vscode' })).toMatchObject({ remoteUser: 'vscode' });
    expect(dc({ remoteUser: 'vscode' }).notes).toBeUndefined();
  });

  test("the dev container's notes are the stack's, said in the worker's log, never kept in the environment", async () => {
    const env = dc({ remoteUser: 'root' });
    const { environment, notes } = await declaredStack(() => Promise.resolve(undefined), env, undefined);
    expect(notes).toEqual([expect.stringMatching(/remoteUser: root is not given/)]);
    expect(environment).not.toHaveProperty('notes');
  });

  test.each([
    [
      { remoteEnv: { HOME_DIR: '${localHomeFolder}' } },
      /remoteEnv\.HOME_DIR: \$\{localHomeFolder\} is of the developer's machine/,
    ],
    [
      { mounts: ['source=/home/me/cache,target=/cache,type=bind'] },
      /devcontainer\.json: mounts\.0: "source=\/home\/me\/cache,target=\/cache,type=bind": a folder of the developer's machine/,
    ],
    [
      { runArgs: ['--init', '--cap-add=SYS_PTRACE'] },
      /runArgs\.1: "--cap-add=SYS_PTRACE": sandboxes run with no capabilities/,
    ],
  ])('%j is refused, naming the field', (extra, message) => {
    expect(() => dc(extra)).toThrow(message);
  });

  test('runArgs the sandbox has already (--init) are accepted', () => {
    expect(dc({ runArgs: ['--init'] }).image).toBe('drydock-sandbox-base');
  });
});

describe("the operator's image in place of a compose dev container's (repo add --environment base|image:<ref>)", () => {
  /** node-postgres's shape: a dev service built from a Dockerfile this host cannot build, and its database. */
  const files: Record<string, string> = {
    '.devcontainer/devcontainer.json': JSON.stringify({
      dockerComposeFile: 'docker-compose.yml',
      service: 'web',
      features: { 'ghcr.io/devcontainers/features/node:1': {} },
      runArgs: ['--privileged'],
    }),
    '.devcontainer/docker-compose.yml': [
      'services:',
      '  web:',
      '    build: { context: ., dockerfile: Dockerfile }',
      '    volumes: ["..:/workspace:cached"]',
      '    environment: { PGHOST: db, PGUSER: user, PGPASSWORD: pass }',
      '    command: sleep infinity',
      '    depends_on: [db]',
      '    links: ["db:db"]',
      '  db:',
      `    image: ${PG}`,
      '    restart: unless-stopped',
      '    ports: ["5432:5432"]',
      '    command: postgres -c password_encryption=md5',
      '    environment: { POSTGRES_USER: user, POSTGRES_PASSWORD: pass }',
    ].join('\n'),
  };
  const read = (f: string) => Promise.resolve(files[f]);

  test.each([
    ['base', undefined],
    ['image:example/node:22', 'example/node:22'],
  ] as const)(
    '--environment %s keeps its services, names and environment; its image, build and features are the operator’s',
    async (setting, image) => {
      const declared = await declaredEnvironment({ environment: setting }, undefined, read);
      expect(declared?.compose).toEqual({
        files: ['.devcontainer/docker-compose.yml'],
        service: 'web',
        servicesOnly: true,
      });
      const { environment, stack: declaredStack_ } = await declaredStack(read, declared, undefined);
      expect(environment).toMatchObject({
        source: `the operator's setting (repo add --environment ${setting})`,
        containerEnv: { PGHOST: 'db', PGUSER: 'user', PGPASSWORD: 'pass' },
        args: {},
      });
      expect(environment?.image).toBe(image);
      expect(environment?.dockerfile).toBeUndefined();
      expect(environment?.features).toBeUndefined();
      expect(declaredStack_.services.map((s) => [s.name, s.image, s.command])).toEqual([
        ['db', PG, ['postgres', '-c', 'password_encryption=md5']],
      ]);
      expect(declaredStack_.hostNames).toEqual(['web']);
    },
  );

  test('--ignore-devcontainer reads nothing of it: the base image, no services', async () => {
    expect(await declaredEnvironment({ ignoreDevcontainer: true }, undefined, read)).toBeUndefined();
    expect(
      await declaredEnvironment({ environment: 'base', ignoreDevcontainer: true }, undefined, read),
    ).toBeUndefined();
  });
});
