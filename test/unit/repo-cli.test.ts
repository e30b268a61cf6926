/**
 * The repo and snapshot verbs of the CLI against a real (embedded) registry:
 * defects found trying real projects (docs/benchmarks.md, "Real projects as
 * published"). Temporal is not needed: the client is a recorder of what
 * would be started.
 */
import type { Client } from '@temporalio/client';
import { buildSnapshot, listRepos } from '../../cli/snapshots';
import { SnapshotRegistry } from '../../sandbox/snapshots';
import type { Config } from '../../platform/config';
import type { Database } from '../../store/db';
import { openEmbeddedDatabase } from '../support/helpers';

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
}, 60_000);
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
