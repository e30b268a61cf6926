import { appendFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * The artifact store: large data (whole step output, logs) stays out of
 * workflow history; history keeps the returned reference. For now a local
 * folder on the worker: `<data dir>/artifacts/<session>/<name>`.
 */
export class ArtifactStore {
  constructor(readonly root: string) {}

  /** Writes (or overwrites: retries are idempotent) and returns the reference. */
  async put(sessionId: string, name: string, content: Buffer | string): Promise<string> {
    const ref = path.join(safeName(sessionId), name);
    const file = path.join(this.root, ref);
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(file, content);
    return ref;
  }

  /** Adds to an artifact being written while a step runs; `put` replaces it with the whole at the end. */
  async append(sessionId: string, name: string, content: Buffer | string): Promise<string> {
    const ref = path.join(safeName(sessionId), name);
    const file = path.join(this.root, ref);
    await mkdir(path.dirname(file), { recursive: true });
    await appendFile(file, content);
    return ref;
  }

  /** The content stored under this name, if any. */
  async get(sessionId: string, name: string): Promise<Buffer | undefined> {
    return readFile(path.join(this.root, safeName(sessionId), name)).catch(() => undefined);
  }

  pathOf(ref: string): string {
    return path.join(this.root, ref);
  }
}

function safeName(s: string): string {
  return s.replace(/[^A-Za-z0-9._-]/g, '_');
}
