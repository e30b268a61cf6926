/**
 * A provisioning attempt leaves nothing behind that nobody would remove: one
 * that fails after making its sandbox removes it (a retry provisions anew,
 * and a session that gives up tears down only the sandbox it has), and one
 * that follows an attempt on another host names the sandbox that attempt may
 * have made there, for the session to remove on that host. Real Docker, git
 * and database (test/support/activities.ts).
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import type { ProvisionInput, Sandbox, SandboxPlace } from '../../sandbox/contract';
import { sandboxName } from '../../sandbox/activities/container';
import { CheckpointStore } from '../../sandbox/checkpoints';
import { testActivities, type TestActivities } from '../support/activities';
import { docker, makeFixtureRepo, newSessionId, type FixtureRepo } from '../support/helpers';

let t: TestActivities;
let repo: FixtureRepo;
const made: { sessionId: string; generation?: number }[] = [];

beforeAll(async () => {
  t = await testActivities();
  repo = await makeFixtureRepo();
});
afterAll(async () => {
  for (const m of made) await t.env.run(t.activities.destroySandbox, m);
  await t?.close();
});

function provisioning(sessionId: string, generation?: number, ref?: string): ProvisionInput {
  made.push({ sessionId, ...(generation ? { generation } : {}) });
  return {
    sessionId,
    repo: { url: repo.url, ...(ref ? { ref } : {}) },
    limits: { cpus: 1, memoryBytes: 512 * 1024 ** 2, pids: 256, tmpBytes: 512 * 1024 ** 2, diskBytes: 1024 ** 3 },
    expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
    ...(generation ? { generation } : {}),
  };
}

const exists = (name: string) =>
  docker
    .getContainer(name)
    .inspect()
    .then(
      () => true,
      () => false,
    );

test('a replacement whose checkpoint does not apply fails, and the sandbox it made is gone; the one it replaces stays', async () => {
  const sessionId = newSessionId('attempt-fails');
  const first: Sandbox = await t.env.run(t.activities.provisionSandbox, provisioning(sessionId));
  const diff = Buffer.from('this is not a diff\n');
  await new CheckpointStore(t.db.pool).save({ sessionId, step: 'step-1', baseCommit: first.baseCommit, diff });

  const replacement = t.env.run(t.activities.provisionSandbox, provisioning(sessionId, 1, first.baseCommit));
  await expect(replacement).rejects.toThrow(/patch/);
  expect(await exists(sandboxName(sessionId, 1))).toBe(false);
  expect(await exists(first.name)).toBe(true);
});

test('an attempt after one on another host names the sandbox made there; one after an attempt here names none', async () => {
  const sessionId = newSessionId('attempt-elsewhere');
  const there: SandboxPlace = {
    name: sandboxName(sessionId),
    host: 'host-a',
    hostQueue: 'drydock@host-a',
    hostTimeoutMs: 60_000,
  };
  const here: SandboxPlace = {
    name: sandboxName(sessionId),
    host: 'activities-test',
    hostQueue: 'unused',
    hostTimeoutMs: 60_000,
  };

  const after = new MockActivityEnvironment({ heartbeatDetails: { provisioningOn: [there] } });
  const heartbeats: unknown[] = [];
  after.on('heartbeat', (details: unknown) => heartbeats.push(details));
  const sandbox: Sandbox = await after.run(t.activities.provisionSandbox, provisioning(sessionId));
  expect(sandbox.leftBehind).toEqual([there]);
  // What the next attempt would read: the other host, then this one.
  expect(heartbeats[0]).toEqual({ provisioningOn: [there, here] });

  // A retry on this host finds its sandbox and names nothing to remove.
  const retry = new MockActivityEnvironment({ heartbeatDetails: { provisioningOn: [here] } });
  const again: Sandbox = await retry.run(t.activities.provisionSandbox, provisioning(sessionId));
  expect(again.name).toBe(sandbox.name);
  expect(again.leftBehind).toBeUndefined();
});
