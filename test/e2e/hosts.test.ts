/**
 * Snapshots on every host: two workers on two Docker engines of this machine
 * (test/support/docker-hosts.ts); a repo registered once gets a refresh schedule per
 * host, and each host builds its own snapshot image on its own engine.
 */
import { openDatabase, type Database } from '../../store/db';
import { deleteSnapshotSchedules, SnapshotRegistry, snapshotScheduleId } from '../../sandbox/snapshots';
import { containersOn, secondDockerHost, type DockerHost } from '../support/docker-hosts';
import { connectClient, docker, makeSnapshotRepo, runCli, scheduledRunsEnded, testConfig } from '../support/helpers';
import { killWorkerProcesses, newQueue, startWorkerProcess, workerEnv } from '../support/workers';

jest.setTimeout(300_000);

let second: DockerHost;
let db: Database;
beforeAll(async () => {
  second = await secondDockerHost();
  db = await openDatabase(testConfig());
});
afterAll(async () => {
  await killWorkerProcesses();
  await db?.close();
});

test('a repo registered once gets a snapshot on every host, built on that host’s engine', async () => {
  const queue = newQueue('hosts');
  const [a, b] = [`${queue}-a`, `${queue}-b`];
  const envA = await workerEnv(queue, { DRYDOCK_HOST_ID: a });
  const envB = await workerEnv(queue, { DRYDOCK_HOST_ID: b, DOCKER_HOST: second.dockerHost });
  const workers = [startWorkerProcess(envA), startWorkerProcess(envB)];
  await Promise.all(workers.map((w) => w.ready));
  const client = await connectClient();
  const repo = await makeSnapshotRepo();
  const engines = { [a]: docker, [b]: second.docker };
  const registry = new SnapshotRegistry(db.pool);
  try {
    const cli = { TEMPORAL_ADDRESS: envA.TEMPORAL_ADDRESS, DRYDOCK_TASK_QUEUE: queue };
    const added = await runCli(['repo', 'add', repo.url, '--every', '1h', '--json'], cli);
    expect(added).toMatchObject({ code: 0, stderr: '' });
    // Both workers recorded their host at start: each got its own schedule.
    const { scheduleIds } = JSON.parse(added.stdout) as { scheduleIds: string[] };
    expect(scheduleIds).toEqual(
      expect.arrayContaining([snapshotScheduleId(repo.url, a), snapshotScheduleId(repo.url, b)]),
    );
    for (const host of [a, b]) await client.schedule.getHandle(snapshotScheduleId(repo.url, host)).trigger();

    const readyOn = async (host: string) => (await registry.ready(repo.url, host))[0];
    const deadline = Date.now() + 240_000;
    while (!((await readyOn(a)) && (await readyOn(b))) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 1000));
    }
    const [imageA, imageB] = [(await readyOn(a))!.image!, (await readyOn(b))!.image!];
    // Each image is on its own host's engine, and only there.
    expect(await docker.getImage(imageA).inspect()).toBeTruthy();
    expect(await second.docker.getImage(imageB).inspect()).toBeTruthy();
    await expect(second.docker.getImage(imageA).inspect()).rejects.toThrow();
    await expect(docker.getImage(imageB).inspect()).rejects.toThrow();

    const list = await runCli(['repo', 'list'], cli);
    expect(list.stdout).toContain(repo.url);
    const builds = await runCli(['snapshot', 'list', repo.url], cli);
    expect(builds.stdout).toContain(`on ${a}`);
    expect(builds.stdout).toContain(`on ${b}`);
    // No build container is left on either engine, once each build's workflow has ended: it is
    // ready in the registry before it fills the pool and removes its build sandbox.
    for (const host of [a, b]) await scheduledRunsEnded(client, snapshotScheduleId(repo.url, host));
    for (const [host, engine] of Object.entries(engines)) {
      for (const build of await registry.builds({ repo: repo.url })) {
        if (build.host === host) expect(await containersOn(engine, build.id)).toHaveLength(0);
      }
    }
  } finally {
    await deleteSnapshotSchedules(client, repo.url, [a, b]);
    for (const engine of Object.values(engines)) {
      for (const build of await registry.builds({ repo: repo.url })) {
        if (build.image)
          await engine
            .getImage(build.image)
            .remove({ force: true })
            .catch(() => undefined);
      }
    }
    await client.connection.close();
  }
});
