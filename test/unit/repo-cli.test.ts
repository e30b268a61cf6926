/**
 * The repo and snapshot verbs of the CLI against a real (embedded) registry:
 * defects found trying real projects (docs/benchmarks.md, "Real projects as
 * published"). Temporal is not needed: the client is a recorder of what
 * would be started.
 */
import type { Client } from '@temporalio/client';
import { addRepo, buildSnapshot, describeLockfileEgress, listRepos, listSnapshots } from '../../cli/snapshots';
import { BUILD_NOTES, SnapshotRegistry } from '../../sandbox/snapshots';
import type { Config } from '../../platform/config';
import type { Database } from '../../store/db';
import { makeFixtureRepo, openEmbeddedDatabase } from '../support/helpers';

const URL = 'file:///srv/repos/node-postgres.git';
const CHI = 'file:///srv/repos/chi.git';
let db: Database & { dataDir: string };
let config: Config;

beforeAll(async () => {
  db = await openEmbeddedDatabase();
  config = {
    DRYDOCK_DATA_DIR: db.dataDir,
    DATABASE_URL: undefined,
    DRYDOCK_REPOS: [`brianc/node-postgres=${URL}`, `go-chi/chi=${CHI}`],
    DRYDOCK_TASK_QUEUE: 'drydock-repo-cli',
  } as unknown as Config;
});
afterAll(() => db?.close());

/** A client that records the workflows it is asked to start. */
function recordingClient() {
  const started: { type: string; args: unknown[] }[] = [];
  const client = {
    workflow: {
      start: (type: string, opts: { args: unknown[] }) => {
        started.push({ type, args: opts.args });
        return Promise.resolve({});
      },
    },
  } as unknown as Client;
  return { client, started };
}

test('snapshot build takes a registered "owner/name", like run --repo and repo remove, and builds its URL', async () => {
  const { client, started } = recordingClient();
  const log = jest.spyOn(console, 'log').mockImplementation(() => {});
  try {
    const code = await buildSnapshot(client, config, 'Brianc/Node-Postgres', { detach: true, json: false });
    expect(code).toBe(0);
  } finally {
    log.mockRestore();
  }
  expect(started).toEqual([{ type: 'refreshSnapshot', args: [{ repo: URL }] }]);
});

test('snapshot build of an unregistered name starts nothing and says how to register it (by URL, with --name)', async () => {
  const { client, started } = recordingClient();
  await expect(buildSnapshot(client, config, 'someone/else', { detach: true, json: false })).rejects.toThrow(
    'repo someone/else is not served by this drydock (register it: drydock repo add <url> --name owner/name)',
  );
  expect(started).toEqual([]);
});

/** `repo list`'s text for one repo. */
async function listed(name: string): Promise<string> {
  const lines: string[] = [];
  const log = jest.spyOn(console, 'log').mockImplementation((text: string) => lines.push(text));
  try {
    await listRepos(config, false);
  } finally {
    log.mockRestore();
  }
  return lines.find((l) => l.startsWith(`${name} `)) ?? `${name} not listed in:\n${lines.join('\n')}`;
}

test('repo list shows the setup that runs and where it comes from, not a setup.sh the repo does not have', async () => {
  // Registered with no --setup: nothing is known until a build chooses one from the repo.
  expect(await listed('go-chi/chi')).toContain(
    "setup: the repo's, chosen at its first build: .drydock/config.yaml's setup, its dev container's, " +
      '.drydock/setup.sh, else inferred from its lockfiles',
  );
  const snapshots = new SnapshotRegistry(db.pool);
  await snapshots.startBuild({ id: 'build-chi-1', repo: CHI, host: 'h1' });
  const commit = '735ae2b8'.padEnd(40, '0');
  await snapshots.finishBuild('build-chi-1', {
    status: 'failed',
    commit,
    error: 'setup exited with 127',
    setup: 'go mod download',
    setupSource: 'inferred from go.sum',
  });
  const shown = await listed('go-chi/chi');
  expect(shown).toContain('setup: go mod download (inferred from go.sum, as of the build at 735ae2b80000;');
  expect(shown).not.toContain('.drydock/setup.sh');
});

test("a build's notes about the environment are kept bounded and shown by repo list and snapshot list", async () => {
  const snapshots = new SnapshotRegistry(db.pool);
  await snapshots.startBuild({ id: 'build-chi-2', repo: CHI, host: 'h1' });
  const rootNote = '.devcontainer/devcontainer.json: remoteUser: root is not given: a sandbox runs as the sandbox user';
  // Repo text: terminal sequences dropped, each cut, at most BUILD_NOTES.count (the last says how many more).
  const many = Array.from({ length: 30 }, (_, i) => `compose.yaml: services.s${i}: note`);
  await snapshots.noteBuild('build-chi-2', [rootNote, '\x1b]0;title\x07x'.padEnd(2_000, 'y'), ...many, rootNote]);
  await snapshots.finishBuild('build-chi-2', {
    status: 'ready',
    commit: '735ae2b9'.padEnd(40, '0'),
    setupHash: 'h',
    image: 'drydock-snap/chi:1',
    sizeBytes: 1,
  });
  const row = (await snapshots.build('build-chi-2'))!;
  expect(row.notes).toHaveLength(BUILD_NOTES.count);
  expect(row.notes![0]).toBe(rootNote);
  expect(row.notes![1]).toMatch(/^xy+…$/);
  expect(row.notes![1]).toHaveLength(BUILD_NOTES.chars);
  expect(row.notes!.at(-1)).toBe("and 13 more notes (the worker's log has them all)");
  expect(await listed('go-chi/chi')).toContain(`\n    note: ${rootNote}\n`);
  const lines: string[] = [];
  const log = jest.spyOn(console, 'log').mockImplementation((text: string) => lines.push(text));
  try {
    await listSnapshots(config, CHI, false);
  } finally {
    log.mockRestore();
  }
  expect(lines[0]).toMatch(/^file:\/\/\/srv\/repos\/chi\.git {2}ready 735ae2b90000 .* drydock-snap\/chi:1\n {2}note: /);
  expect(lines[0]).toContain(`\n  note: ${rootNote}\n`);
});

/** node-postgres's shape: a classic yarn.lock, whose setup fetches from yarn's registry as well as npm's. */
const YARN_REPO = {
  'package.json': '{"name": "pg-monorepo", "private": true}\n',
  'yarn.lock': '# THIS IS AN AUTOGENERATED FILE. DO NOT EDIT THIS FILE DIRECTLY.\n# yarn lockfile v1\n',
};
const OPERATOR_SETUP = 'npx --yes yarn@1 install --frozen-lockfile --ignore-scripts && npx --yes yarn@1 build';

test("--setup without --allow keeps the registries the lockfiles need (yarn's), and says so", async () => {
  const repo = await makeFixtureRepo(YARN_REPO);
  const { registration, lockfileEgress, inferred } = await addRepo(recordingClient().client, config, repo.url, {
    name: 'brianc/pg-setup',
    setup: OPERATOR_SETUP,
  });
  expect(inferred).toBeUndefined();
  expect(registration.setup).toBe(OPERATOR_SETUP);
  expect(registration.egress).toEqual([{ host: 'registry.npmjs.org' }, { host: 'registry.yarnpkg.com' }]);
  expect(describeLockfileEgress(lockfileEgress!, registration.egress)).toBe(
    'egress for setup: registry.npmjs.org, registry.yarnpkg.com ' +
      '(registry.yarnpkg.com kept from yarn.lock; --allow replaces the list)',
  );
}, 60_000);

test('--setup with an --allow that leaves a lockfile registry out keeps the list and names the host and the flag', async () => {
  const repo = await makeFixtureRepo(YARN_REPO);
  const { registration, lockfileEgress } = await addRepo(recordingClient().client, config, repo.url, {
    name: 'brianc/pg-allow',
    setup: OPERATOR_SETUP,
    allow: ['registry.npmjs.org'],
  });
  expect(registration.egress).toEqual([{ host: 'registry.npmjs.org' }]);
  expect(describeLockfileEgress(lockfileEgress!, registration.egress)).toBe(
    'note: a setup from yarn.lock fetches from registry.yarnpkg.com, which --allow leaves out: ' +
      'add --allow registry.yarnpkg.com if yours needs it',
  );
}, 60_000);
