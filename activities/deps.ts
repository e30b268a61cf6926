import type { ArtifactStore } from '../lib/artifacts';
import type { Logger } from '../lib/log';
import type { DockerSandboxes } from '../lib/sandbox';

/** What activities need from the process; tests hand in real or local ones. */
export interface ActivityDeps {
  sandboxes: DockerSandboxes;
  artifacts: ArtifactStore;
  /** Host-side bare mirrors of repos (sandboxes have no network). */
  mirrorsDir: string;
  hostId: string;
  /** This worker's host queue, `<task queue>@<host id>`. */
  hostQueue: string;
  baseImage: string;
  log: Logger;
}
