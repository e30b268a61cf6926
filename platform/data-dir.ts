/**
 * The worker's data dir (DRYDOCK_DATA_DIR: repo mirrors, artifacts, the audit
 * key, sandboxes' storage) is readable by its owner only. An agent CLI's
 * install scripts run on the host as nobody (models/agent-clis.ts) with the
 * registry in reach; a world-readable data dir would hand them every mirror
 * and artifact. Sandboxes and service containers never need the host's
 * folders above their bind mounts, so 0700 costs them nothing.
 */
import { chmod, mkdir } from 'node:fs/promises';

/** Creates the data dir when missing and makes it 0700 (an older, world-readable one included). */
export async function ownDataDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  try {
    await chmod(dir, 0o700);
  } catch (err) {
    // Not ours to change (a volume owned by another user): only a root worker installs as nobody, and root may.
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') throw err;
    if (process.getuid?.() === 0) throw err;
  }
}
