/**
 * The reaper: sandboxes that no teardown will remove are found and removed;
 * live ones are kept. So is the staging container of an image layering a
 * dead worker left.
 */
import { randomBytes } from 'node:crypto';
import { DockerProvider, LAYER_STAGING_LABEL, layerStagingName } from '../../sandbox/docker/provider';
import { LABELS } from '../../sandbox/provider';
import {
  containersOf,
  docker,
  inPhase,
  makeFixtureRepo,
  newSessionId,
  runReaper,
  scriptedSession,
  startSession,
  startStack,
  testConfig,
  waitForStatus,
} from '../support/helpers';
import { createSandbox } from '../support/docker';

test('reapSandboxes removes the sandbox of a terminated session and an expired one, and spares a running session', async () => {
  const stack = await startStack();
  const repo = await makeFixtureRepo();
  const longSession = scriptedSession(repo.url, 'wait', 'sleep 300');
  try {
    const schedule = await stack.client.schedule.getHandle(`drydock-reaper-${stack.config.DRYDOCK_HOST_ID}`).describe();
    expect(schedule.action).toMatchObject({ type: 'startWorkflow', workflowType: 'reapSandboxes' });

    const terminatedId = newSessionId('terminated');
    const terminated = await startSession(stack, terminatedId, longSession);
    const runningId = newSessionId('running');
    const running = await startSession(stack, runningId, longSession);
    await waitForStatus(terminated, inPhase('agent'));
    await waitForStatus(running, inPhase('agent'));
    await terminated.terminate('killed from outside: no teardown runs');
    expect(await containersOf(terminatedId)).toHaveLength(1);

    // A leftover of the running session, past its expiry: removed although the session runs.
    const expired = 'drydock-expired-leftover';
    await createSandbox(expired, {
      labels: {
        [LABELS.session]: runningId,
        [LABELS.host]: stack.config.DRYDOCK_HOST_ID,
        [LABELS.expires]: new Date(Date.now() - 60_000).toISOString(),
      },
    });

    const reaped = await runReaper(stack);
    expect(reaped.sort((a, b) => a.sandbox.localeCompare(b.sandbox))).toEqual([
      { sandbox: expired, sessionId: runningId, reason: expect.stringMatching(/^expired at /) },
      { sandbox: `drydock-${terminatedId}`, sessionId: terminatedId, reason: 'its session is closed' },
    ]);
    expect(await containersOf(terminatedId)).toHaveLength(0);
    expect((await containersOf(runningId)).map((c) => c.Names[0])).toEqual([`/drydock-${runningId}`]);

    await running.cancel();
    await running.result().catch(() => undefined);
    expect(await containersOf(runningId)).toHaveLength(0);
  } finally {
    await stack.stop();
  }
});

test("drydock's layer: a retry removes the staging container an interrupted run left; the reaper removes one nobody retries", async () => {
  const provider = new DockerProvider();
  const from = (await docker.getImage(testConfig().DRYDOCK_BASE_IMAGE!).inspect()).Id;
  const tag = `drydock-test-layer:${randomBytes(6).toString('hex')}`;
  const staging = layerStagingName(tag);
  /** What a worker that died between create and remove left: the staging container with its label. */
  const leftover = () =>
    docker.createContainer({ name: staging, Image: from, Labels: { [LAYER_STAGING_LABEL]: staging } });
  const stagingLeft = async () =>
    (await docker.listContainers({ all: true, filters: { name: [`^/${staging}$`] } })).length;
  const made: string[] = [];
  try {
    await leftover();
    await provider.layerImage({
      tag,
      from,
      labels: { 'drydock.test': 'layer' },
      folders: ['/workspace/layered'],
      owner: 1000,
      env: [],
      user: '1000:1000',
      workdir: '/workspace',
      cmd: ['sleep', 'infinity'],
    });
    expect(await stagingLeft()).toBe(0);
    const image = await docker.getImage(tag).inspect();
    expect(image.Config.Labels).toMatchObject({ 'drydock.test': 'layer', [LAYER_STAGING_LABEL]: '' });

    // A container of the layered image inherits the emptied label: it is no staging container, and stays.
    const user = await docker.createContainer({ name: `${staging}-user`, Image: tag });
    made.push(user.id);
    await leftover();
    expect(await provider.reapStorage(0)).toContain(`layer staging container ${staging}`);
    expect(await stagingLeft()).toBe(0);
    expect((await user.inspect()).Id).toBe(user.id);
  } finally {
    for (const id of [...made, staging])
      await docker
        .getContainer(id)
        .remove({ force: true })
        .catch(() => undefined);
    await docker
      .getImage(tag)
      .remove()
      .catch(() => undefined);
  }
});
