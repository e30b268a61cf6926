/** Snapshot builds for tests, and their removal afterwards. */
import type { SnapshotBuildResult } from '../../sandbox/contract';
import { deleteSnapshotSchedules, SNAPSHOT_LABELS } from '../../sandbox/snapshots';
import { docker, newSessionId, type TestStack } from './helpers';
import { LOWER_LABEL } from '../../sandbox/docker/storage';

/** Builds a snapshot of `repo` now, as its schedule would: one refreshSnapshot workflow. */
export function buildSnapshot(stack: TestStack, repo: string): Promise<SnapshotBuildResult> {
  return stack.client.workflow.execute('refreshSnapshot', {
    workflowId: newSessionId('snap'),
    taskQueue: stack.config.DRYDOCK_TASK_QUEUE,
    args: [{ repo }],
  });
}

/** Removes the snapshot images (and their services' data images) and the schedules of these repos (each test's repo is a fresh temp dir). */
export async function removeSnapshots(stack: TestStack, repos: string[]): Promise<void> {
  // Snapshots, and their services' data images.
  for (const kind of ['snapshot', 'service-data']) {
    for (const image of await docker.listImages({ filters: { label: [`${SNAPSHOT_LABELS.image}=${kind}`] } })) {
      if (repos.includes(image.Labels?.[SNAPSHOT_LABELS.repo] ?? '')) {
        await docker.getImage(image.Id).remove({ force: true });
        // Its copy-on-write lower layers, which no sandbox of the test uses any more.
        const lowers = await docker.listVolumes({ filters: { label: [`${LOWER_LABEL}=${image.Id}`] } });
        for (const v of lowers.Volumes ?? [])
          await docker
            .getVolume(v.Name)
            .remove()
            .catch(() => undefined);
      }
    }
  }
  for (const repo of repos) await deleteSnapshotSchedules(stack.client, repo, [stack.config.DRYDOCK_HOST_ID]);
}
