/**
 * Files for generated repos whose tests need PostgreSQL and Redis: clients of
 * a few lines each (Node.js, no packages, so no registry is needed), and the
 * declarations of the two services in both of the ways a repo can make them.
 */

/** `node pgq.js "<sql>"`: runs SQL on localhost:5432 as postgres (trust), prints each row as a|b|c. */
export const PG_CLIENT = `// A PostgreSQL client in a few lines: simple query protocol, trust authentication.
const net = require('net');
const sql = process.argv[2];
const msg = (type, body) => {
  const len = Buffer.alloc(4);
  len.writeInt32BE(body.length + 4);
  return Buffer.concat([Buffer.from(type), len, body]);
};
const startup = Buffer.from('\\0\\0\\0\\0\\0\\x03\\0\\0user\\0postgres\\0database\\0app\\0\\0', 'binary');
startup.writeInt32BE(startup.length);
const sock = net.connect(5432, '127.0.0.1', () => sock.write(startup));
let buf = Buffer.alloc(0);
let sent = false;
sock.on('data', (d) => {
  buf = Buffer.concat([buf, d]);
  while (buf.length >= 5 && buf.length >= 1 + buf.readInt32BE(1)) {
    const type = String.fromCharCode(buf[0]);
    const body = buf.subarray(5, 1 + buf.readInt32BE(1));
    buf = buf.subarray(1 + buf.readInt32BE(1));
    if (type === 'E') {
      console.error(body.toString().replace(/\\0/g, ' '));
      process.exitCode = 1;
    }
    if (type === 'D') {
      const cols = [];
      let i = 2;
      for (let c = 0; c < body.readInt16BE(0); c++) {
        const n = body.readInt32BE(i);
        i += 4;
        cols.push(n < 0 ? 'NULL' : body.subarray(i, i + n).toString());
        if (n > 0) i += n;
      }
      console.log(cols.join('|'));
    }
    if (type === 'Z') {
      if (sent) return void sock.end(msg('X', Buffer.alloc(0)));
      sent = true;
      sock.write(msg('Q', Buffer.from(sql + '\\0')));
    }
  }
});
sock.on('error', (e) => {
  console.error(e.message);
  process.exit(2);
});
`;

/** `node redisq.js SET k v`: one command to localhost:6379, prints the reply's value. */
export const REDIS_CLIENT = `// A Redis client in a few lines: one command, its reply's value.
const net = require('net');
const args = process.argv.slice(2);
const sock = net.connect(6379, '127.0.0.1', () =>
  sock.write(\`*\${args.length}\\r\\n\${args.map((a) => \`$\${Buffer.byteLength(a)}\\r\\n\${a}\\r\\n\`).join('')}\`),
);
sock.on('data', (d) => {
  console.log(d.toString().split('\\r\\n').filter((l) => l && !/^[$*]/.test(l)).join(' ').replace(/^[+:]/, ''));
  sock.end();
});
sock.on('error', (e) => {
  console.error(e.message);
  process.exit(2);
});
`;

/** The migration setup runs: a table and a seeded row, and a Redis key. */
export const MIGRATION =
  `node pgq.js "create table items (name text primary key); insert into items values ('seeded')" && ` +
  `node redisq.js SET greeting seeded`;

/** PostgreSQL's readiness over TCP: during its first start it listens on its socket alone, then restarts. */
export const PG_READY = 'pg_isready -U postgres -h 127.0.0.1';

/**
 * .drydock/config.yaml declaring PostgreSQL 17 and Redis from these images,
 * with the migration as setup; PostgreSQL alone without a Redis image.
 */
export function configServices(images: { postgres: string; redis?: string }): string {
  if (!images.redis) {
    const setup = MIGRATION.replace(/ && node redisq.js .*$/, '');
    return configServices({ ...images, redis: 'x' })
      .replace(/^setup: .*$/m, `setup: ${JSON.stringify(setup)}`)
      .replace(/\n {2}cache:[\s\S]*$/, '\n');
  }
  return `setup: ${JSON.stringify(MIGRATION)}
services:
  db:
    image: ${images.postgres}
    environment: { POSTGRES_HOST_AUTH_METHOD: trust, POSTGRES_DB: app }
    data: [/var/lib/postgresql/data]
    healthcheck: { test: "${PG_READY}", interval: 200ms, retries: 150 }
  cache:
    image: ${images.redis}
    ports: [6379]
    data: [/data]
`;
}

/** The same through a dev container: its compose file's dev service is the sandbox's image, the others run beside it. */
export function composeServices(images: { postgres: string; redis: string; dev: string }): Record<string, string> {
  return {
    '.devcontainer/devcontainer.json': JSON.stringify({
      name: 'shop',
      dockerComposeFile: 'compose.yaml',
      service: 'app',
      runServices: ['db', 'cache'],
      postCreateCommand: MIGRATION,
    }),
    '.devcontainer/compose.yaml': `services:
  app:
    image: ${images.dev}
    volumes: [../..:/workspaces:cached]
    command: sleep infinity
    network_mode: service:db
  db:
    image: ${images.postgres}
    restart: unless-stopped
    environment:
      POSTGRES_HOST_AUTH_METHOD: trust
      POSTGRES_DB: app
    volumes: [pgdata:/var/lib/postgresql/data]
    ports: ["5432:5432"]
    healthcheck:
      test: ["CMD-SHELL", "${PG_READY}"]
      interval: 200ms
      retries: 150
  cache:
    image: ${images.redis}
    expose: [6379]
    volumes: [cachedata:/data]
volumes:
  pgdata:
  cachedata:
`,
  };
}

/**
 * A compose stack as its developers write it, for a dev container: the
 * database reached by its service name (DB_HOST=db from an env_file), its
 * schema and rows from an init SQL file of the repo, its settings from an
 * env_file and the project's .env, a secret from a repo file, an init script
 * that resolves a service's name inside the service.
 */
export function composeAsWritten(images: { postgres: string; dev: string }): Record<string, string> {
  return {
    'pgq.js': PG_CLIENT.replace(
      "net.connect(5432, '127.0.0.1'",
      'net.connect(Number(process.env.DB_PORT), process.env.DB_HOST',
    ).replace('database\\0app', 'database\\0shop'),
    '.devcontainer/devcontainer.json': JSON.stringify({
      dockerComposeFile: ['compose.yaml', 'compose.dev.yaml'],
      service: 'app',
      postCreateCommand: 'node pgq.js "select count(*) from items"',
    }),
    '.devcontainer/.env': `DB_NAME=shop\nPG_IMAGE=${images.postgres}\n`,
    '.devcontainer/compose.yaml': `services:
  app:
    image: ${images.dev}
    env_file: app.env
    networks: [back]
  db:
    image: \${PG_IMAGE}
    env_file: [db.env]
    volumes:
      - ./db/init.sql:/docker-entrypoint-initdb.d/1-init.sql:ro
      - ./db/init.sh:/docker-entrypoint-initdb.d/2-init.sh
      - pgdata:/var/lib/postgresql/data
    secrets: [token]
    networks: { back: { aliases: [database] } }
    healthcheck:
      test: ["CMD-SHELL", "${PG_READY}"]
      interval: 200ms
      retries: 150
  debug:
    image: ${images.postgres}
    profiles: [debug]
networks: { back: {} }
volumes: { pgdata: {} }
secrets: { token: { file: ./db/token.txt } }
`,
    '.devcontainer/compose.dev.yaml': 'services:\n  db:\n    environment: { POSTGRES_INITDB_ARGS: "--no-sync" }\n',
    '.devcontainer/app.env': 'DB_HOST=db\nDB_PORT=5432\n',
    '.devcontainer/db.env': 'POSTGRES_HOST_AUTH_METHOD=trust\nPOSTGRES_DB=${DB_NAME}\n',
    '.devcontainer/db/init.sql':
      "create table items (name text primary key);\ninsert into items values ('from init.sql');\n",
    '.devcontainer/db/init.sh': `psql -v ON_ERROR_STOP=1 -U postgres -d "$POSTGRES_DB" -qc "insert into items values ('secret $(cat /run/secrets/token)'), ('database is $(getent hosts database | cut -d' ' -f1)')"\n`,
    '.devcontainer/db/token.txt': 's3cret',
  };
}
