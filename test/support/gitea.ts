/**
 * A real Gitea for a test file: the server infra/gitea.sh builds from Go
 * modules, started here on a free loopback port with its data (SQLite, repos,
 * logs) in a temp folder, installed without the web installer (INSTALL_LOCK),
 * with an admin user and an access token made by its own `gitea admin` CLI.
 * Webhooks may target loopback (the test's receivers). Owned by the test run
 * (a killed run's next one stops it); `stop()` ends it.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { projectRoot } from './helpers';
import { ownProcess } from './leftovers';
import { freePort } from './ports';

const run = promisify(execFile);

export interface GiteaUser {
  username: string;
  password: string;
  /** An access token with every scope (`all`). */
  token: string;
}

export interface TestGitea {
  /** http://127.0.0.1:<port> (no trailing slash): also its ROOT_URL. */
  url: string;
  /** The site admin, made by `gitea admin user create --admin`. */
  admin: GiteaUser;
  /** Its work folder: app.ini, data (SQLite, repos), log. */
  dir: string;
  /** A call of its REST API (/api/v1 + `route`) as `as` (default: the admin); throws on a non-2xx answer. */
  api<T = unknown>(method: string, route: string, body?: unknown, as?: GiteaUser): Promise<T>;
  /** A plain user with a password and an all-scopes token (made through the admin API). */
  createUser(username: string): Promise<GiteaUser>;
  /** A clone URL with `user`'s token in it, for git over HTTP. */
  cloneUrl(owner: string, repo: string, user?: GiteaUser): string;
  stop(): Promise<void>;
}

/** The folder infra/gitea.sh built (the first run on a machine builds it: minutes). */
export async function giteaFolder(): Promise<string> {
  const { stdout } = await run('bash', [path.join(projectRoot, 'infra/gitea.sh')], { maxBuffer: 16 << 20 });
  return stdout.trim().split('\n').pop()!;
}

function appIni(dir: string, staticRoot: string, port: number): string {
  const secret = () => randomBytes(32).toString('hex');
  return `APP_NAME = drydock test forge
RUN_MODE = prod
RUN_USER = ${userInfo().username}
WORK_PATH = ${dir}
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = ${port}
DOMAIN = 127.0.0.1
ROOT_URL = http://127.0.0.1:${port}/
STATIC_ROOT_PATH = ${staticRoot}
APP_DATA_PATH = ${dir}/data
DISABLE_SSH = true
START_SSH_SERVER = false
LFS_START_SERVER = false
OFFLINE_MODE = true

[database]
DB_TYPE = sqlite3
PATH = ${dir}/data/gitea.db
SQLITE_JOURNAL_MODE = WAL

[repository]
ROOT = ${dir}/data/repos
DEFAULT_BRANCH = main

[security]
INSTALL_LOCK = true
SECRET_KEY = ${secret()}
INTERNAL_TOKEN = ${secret()}
; the tests' webhook receivers listen on loopback
ALLOWED_HOST_LIST = loopback

[oauth2]
ENABLED = false

[service]
DISABLE_REGISTRATION = true
REQUIRE_SIGNIN_VIEW = false
DEFAULT_KEEP_EMAIL_PRIVATE = true

[indexer]
ISSUE_INDEXER_TYPE = db

[mailer]
ENABLED = false

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[queue]
TYPE = channel

[cron]
ENABLED = false

[actions]
ENABLED = false

[log]
MODE = file
LEVEL = Warn
ROOT_PATH = ${dir}/log
`;
}

/**
 * Starts a Gitea of its own: writes app.ini, migrates the database, makes the
 * admin and its token with the CLI, starts `gitea web` and resolves once its
 * API answers.
 */
export async function startGitea(): Promise<TestGitea> {
  const folder = await giteaFolder();
  const bin = path.join(folder, 'gitea');
  const dir = mkdtempSync(path.join(tmpdir(), 'gitea-'));
  const config = path.join(dir, 'app.ini');
  const port = await freePort();
  writeFileSync(config, appIni(dir, folder, port));
  const env = { ...process.env, GITEA_WORK_DIR: dir, HOME: dir };
  const cli = async (args: string[]) =>
    (await run(bin, ['--config', config, '--work-path', dir, ...args], { env, cwd: dir })).stdout;
  await cli(['migrate']);
  const admin = { username: 'drydock-admin', password: randomBytes(12).toString('hex'), token: '' };
  await cli([
    'admin',
    'user',
    'create',
    '--admin',
    '--username',
    admin.username,
    '--password',
    admin.password,
    '--email',
    'admin@drydock.test',
    '--must-change-password=false',
  ]);
  admin.token = (
    await cli(['admin', 'user', 'generate-access-token', '--username', admin.username, '--scopes', 'all', '--raw'])
  ).trim();

  const server = spawn(bin, ['--config', config, '--work-path', dir, 'web'], { env, cwd: dir, stdio: 'ignore' });
  ownProcess(server.pid);
  const exited = new Promise<void>((resolve) => server.once('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;

  async function api<T>(method: string, route: string, body?: unknown, as: GiteaUser = admin): Promise<T> {
    const res = await fetch(`${url}/api/v1${route}`, {
      method,
      headers: { authorization: `token ${as.token}`, 'content-type': 'application/json', accept: 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`Gitea ${method} ${route}: ${res.status} ${text.slice(0, 500)}`);
    return (text ? JSON.parse(text) : undefined) as T;
  }

  const deadline = Date.now() + 60_000;
  for (;;) {
    if (server.exitCode !== null) throw new Error(`gitea web exited with ${server.exitCode} (log: ${dir}/log)`);
    const ok = await fetch(`${url}/api/v1/version`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (Date.now() > deadline) throw new Error(`gitea web did not answer within 60 s (log: ${dir}/log)`);
    await new Promise((r) => setTimeout(r, 200));
  }

  return {
    url,
    admin,
    dir,
    api,
    async createUser(username) {
      const password = randomBytes(12).toString('hex');
      await api('POST', '/admin/users', {
        username,
        password,
        email: `${username}@drydock.test`,
        must_change_password: false,
      });
      const basic = `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`;
      const res = await fetch(`${url}/api/v1/users/${username}/tokens`, {
        method: 'POST',
        headers: { authorization: basic, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'test', scopes: ['all'] }),
      });
      if (!res.ok) throw new Error(`Gitea token for ${username}: ${res.status} ${await res.text()}`);
      const { sha1 } = (await res.json()) as { sha1: string };
      return { username, password, token: sha1 };
    },
    cloneUrl(owner, repo, user = admin) {
      return `http://${user.username}:${user.token}@127.0.0.1:${port}/${owner}/${repo}.git`;
    },
    async stop() {
      if (server.exitCode === null && server.signalCode === null) server.kill('SIGTERM');
      await exited;
    },
  };
}
