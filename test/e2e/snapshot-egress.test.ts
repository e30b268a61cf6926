/**
 * Snapshot setup through drydock's egress proxy (sandbox/egress.ts, the runStep
 * activity's `egress`): `npm ci` reaches an allowlisted registry stand-in on
 * loopback; a host not on the list, the host's Temporal and Postgres ports
 * and any direct connection are refused, and every attempt is logged.
 */
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { addRepo } from '../../cli/snapshots';
import type { SessionStatus } from '../../workflows/api';
import {
  makeSnapshotRepo,
  newSessionId,
  scriptedSession,
  startSession,
  startStack,
  type TestStack,
} from '../support/helpers';
import { buildSnapshot, removeSnapshots } from '../support/snapshots';
import { lockEntryOf, packTinyPackage, startNpmRegistry, type NpmRegistryStandIn } from '../support/npm-registry';

let stack: TestStack;
let registry: NpmRegistryStandIn;
let tinyFile: string;
const repos: string[] = [];

beforeAll(async () => {
  stack = await startStack();
  const dir = await mkdtemp(path.join(tmpdir(), 'drydock-npm-'));
  tinyFile = await packTinyPackage(dir, 'drydock-tiny', '1.0.0', "module.exports = 'tiny from the stand-in';\n");
  registry = await startNpmRegistry(dir);
});
afterAll(async () => {
  if (stack) await removeSnapshots(stack, repos);
  await registry?.close();
  await stack?.stop();
});

/** npm in the sandbox: the stand-in as registry, reached through the proxy (npm would skip it for 127.0.0.1 otherwise). */
const npmCi = () =>
  `npm_config_noproxy=none.invalid npm ci --registry ${registry.url} --no-audit --no-fund --loglevel=error`;

const buildOf = (repo: string) => buildSnapshot(stack, repo);

const artifact = (buildId: string, name: string) =>
  readFile(path.join(stack.config.DRYDOCK_DATA_DIR, 'artifacts', buildId, name), 'utf8');

test('setup installs from an allowlisted registry stand-in on loopback through the egress proxy', async () => {
  const tiny = await lockEntryOf(tinyFile);
  const repo = await makeSnapshotRepo();
  repos.push(repo.url);
  await repo.commit({
    'package.json': JSON.stringify({ name: 'app', version: '1.0.0', dependencies: { 'drydock-tiny': '1.0.0' } }),
    'package-lock.json': JSON.stringify({
      name: 'app',
      version: '1.0.0',
      lockfileVersion: 3,
      requires: true,
      packages: {
        '': { name: 'app', version: '1.0.0', dependencies: { 'drydock-tiny': '1.0.0' } },
        'node_modules/drydock-tiny': tiny,
      },
    }),
  });
  await addRepo(stack.client, stack.config, repo.url, {
    every: '1h',
    setup: npmCi(),
    allow: [`127.0.0.1:${registry.port}`],
  });
  const built = await buildOf(repo.url);
  expect(built.status).toBe('ready');
  expect(registry.requests).toContain('GET /drydock-tiny/-/drydock-tiny-1.0.0.tgz 200');

  const session = (await (
    await startSession(
      stack,
      newSessionId('egress-session'),
      scriptedSession(repo.url, 'use the dependency', `node -e "console.log(require('drydock-tiny'))"`),
    )
  ).result()) as SessionStatus;
  expect(session.snapshot?.image).toBe(built.image);
  expect(session.timeline.find((t) => t.name.startsWith('step 1'))?.outputTail).toContain('tiny from the stand-in');
});

test("setup cannot reach a host off the list, the host's Temporal or Postgres, or anything directly; each attempt is logged", async () => {
  const temporalPort = Number(stack.config.TEMPORAL_ADDRESS.split(':').pop());
  const postgresPort = Number(new URL(stack.config.DATABASE_URL!).port);
  const probe = `
const http = require('node:http');
const net = require('node:net');
const viaProxy = (label, url) => new Promise((resolve) => {
  const req = http.request({ host: '127.0.0.1', port: 3128, method: 'GET', path: url }, (res) => {
    res.resume();
    console.log(label, res.statusCode);
    resolve();
  });
  req.on('error', (e) => { console.log(label, 'error', e.code); resolve(); });
  req.end();
});
const direct = (label, port) => new Promise((resolve) => {
  const s = net.connect(port, '127.0.0.1');
  s.on('connect', () => { console.log(label, 'CONNECTED'); s.destroy(); resolve(); });
  s.on('error', (e) => { console.log(label, e.code); resolve(); });
});
(async () => {
  console.log('proxy env', process.env.HTTP_PROXY);
  await viaProxy('allowed', '${registry.url}drydock-tiny');
  await viaProxy('off the list', 'http://example.com/');
  await viaProxy('temporal', 'http://127.0.0.1:${temporalPort}/');
  await viaProxy('postgres', 'http://127.0.0.1:${postgresPort}/');
  await direct('direct registry', ${registry.port});
  await direct('direct temporal', ${temporalPort});
})();
`;
  const repo = await makeSnapshotRepo();
  repos.push(repo.url);
  await repo.commit({ 'probe.js': probe });
  await addRepo(stack.client, stack.config, repo.url, {
    every: '1h',
    setup: 'node probe.js',
    allow: [`127.0.0.1:${registry.port}`],
  });
  const built = await buildOf(repo.url);
  const buildId = (await findBuildId(repo.url))!;
  expect(built.status).toBe('ready');
  const output = await artifact(buildId, 'setup.log');
  expect(output).toContain('proxy env http://127.0.0.1:3128');
  expect(output).toContain('allowed 200');
  expect(output).toContain('off the list 403');
  expect(output).toContain('temporal 403');
  expect(output).toContain('postgres 403');
  // No network in the sandbox: its loopback has nothing on those ports.
  expect(output).toContain('direct registry ECONNREFUSED');
  expect(output).toContain('direct temporal ECONNREFUSED');

  const log = (await artifact(buildId, 'setup.egress.jsonl'))
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { host: string; port: number; allowed: boolean; sessionId: string; step: string });
  expect(log.map((r) => `${r.host}:${r.port} ${r.allowed}`)).toEqual([
    `127.0.0.1:${registry.port} true`,
    'example.com:80 false',
    `127.0.0.1:${temporalPort} false`,
    `127.0.0.1:${postgresPort} false`,
  ]);
  for (const r of log) expect(r).toMatchObject({ sessionId: buildId, step: 'setup' });
});

/** The build id (workflow id) of the newest build of a repo, from the registry. */
async function findBuildId(repo: string): Promise<string | undefined> {
  const { openDatabase } = await import('../../store/db');
  const { SnapshotRegistry } = await import('../../sandbox/snapshots');
  const db = await openDatabase(stack.config);
  try {
    return (await new SnapshotRegistry(db.pool).builds({ repo, limit: 1 }))[0]?.id;
  } finally {
    await db.close();
  }
}
