/**
 * The artifact store: a session's large data (logs, diffs, transcripts,
 * screenshots) as files under one folder per session; workflow history holds
 * only their names.
 */
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
    const ref = refOf(sessionId, name);
    const file = path.join(this.root, ref);
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(file, content);
    return ref;
  }

  /** Adds to an artifact being written while a step runs; `put` replaces it with the whole at the end. */
  async append(sessionId: string, name: string, content: Buffer | string): Promise<string> {
    const ref = refOf(sessionId, name);
    const file = path.join(this.root, ref);
    await mkdir(path.dirname(file), { recursive: true });
    await appendFile(file, content);
    return ref;
  }

  /** The content stored under this name, if any. */
  async get(sessionId: string, name: string): Promise<Buffer | undefined> {
    const file = path.join(this.root, refOf(sessionId, name));
    return readFile(file).catch(() => undefined);
  }

  pathOf(ref: string): string {
    return path.join(this.root, ref);
  }
}

/** A session id or a name would leave its session's folder (".", "..", empty or "/" segments). */
export class UnsafeArtifactPath extends Error {
  constructor(what: string, value: string) {
    super(`artifact ${what} ${JSON.stringify(value)}: no ".", ".." or empty path segments`);
    this.name = 'UnsafeArtifactPath';
  }
}

/**
 * Whether a session id can name a folder of its own: letters, digits, ".",
 * "_" and "-", 1 to 100 of them, and not "." or "..". The HTTP API's check of
 * a requested id should be this function.
 */
export function isSafeSessionId(id: string): boolean {
  return /^[A-Za-z0-9._-]{1,100}$/.test(id) && id !== '.' && id !== '..';
}

/** `<session>/<name>`, refused when either part could point outside the session's folder. */
function refOf(sessionId: string, name: string): string {
  // Other characters of older ids are mapped, as before; what is left must still be one plain segment.
  const folder = sessionId.replace(/[^A-Za-z0-9._-]/g, '_');
  if (folder === '' || folder === '.' || folder === '..') throw new UnsafeArtifactPath('session id', sessionId);
  // Names may have folders (junit/report.xml), but every segment must be a plain one.
  const segments = name.split('/');
  if (segments.some((s) => s === '' || s === '.' || s === '..' || s.includes('\\') || s.includes('\0'))) {
    throw new UnsafeArtifactPath('name', name);
  }
  return path.join(folder, ...segments);
}
